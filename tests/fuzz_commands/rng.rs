//! The fuzzer's PRNG: the same sequence for the same seed.

#![allow(unused_imports)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::contract::*;
use crate::generator::*;
use crate::runner::*;
use crate::*;
use redis::{Connection, Value};
use testkit::{wait_until, RedisServer, ServerOptions};

/// xorshift64*: small, fast, and the same sequence for the same seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A value in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `num/den`.
    pub(crate) fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub(crate) fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// Random bytes, `lo..=hi` of them.
    pub(crate) fn some_bytes(&mut self, lo: usize, hi: usize) -> Vec<u8> {
        let len = self.range(lo as u64, hi as u64) as usize;
        self.bytes(len)
    }

    /// `word` with each letter in a random case.
    pub(crate) fn casing(&mut self, word: &str) -> Vec<u8> {
        word.bytes()
            .map(|b| {
                if self.chance(1, 2) {
                    b.to_ascii_lowercase()
                } else {
                    b
                }
            })
            .collect()
    }
}
