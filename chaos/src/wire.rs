//! A wire between two network namespaces: a TUN device in each, and two
//! forwarder threads that carry the IP packets one device's kernel sends
//! to the other's, each direction with its own impairment: a drop
//! probability (100%: cut) and a delay with jitter. Packets keep their
//! order (a delayed packet holds back the ones behind it, as on a slow
//! link). What `tc netem` would do on a veth pair, where the kernel has it.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::Error;

/// What one direction of a wire does to its packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Impairment {
    /// Dropped with this probability, percent (100: every packet).
    pub loss_percent: u32,
    /// Held back this long, ± `jitter_ms`.
    pub delay_ms: u64,
    pub jitter_ms: u64,
}

/// One direction's impairment and counters, shared with its thread.
#[derive(Default)]
struct Direction {
    impairment: Mutex<Impairment>,
    sent: AtomicU64,
    dropped: AtomicU64,
}

/// A running wire; dropping it stops its threads and closes both devices.
pub struct Wire {
    /// [requests (a → b), replies (b → a)]
    directions: [Arc<Direction>; 2],
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Wire {
    /// Joins `a` (the client side) and `b` (the node side).
    pub fn start(name: String, a: File, b: File) -> Result<Wire, Error> {
        let (a, b) = (Arc::new(a), Arc::new(b));
        let stop = Arc::new(AtomicBool::new(false));
        let directions = [
            Arc::new(Direction::default()),
            Arc::new(Direction::default()),
        ];
        let mut threads = Vec::new();
        for (index, (from, to)) in [(a.clone(), b.clone()), (b, a)].into_iter().enumerate() {
            let direction = directions[index].clone();
            let stop = stop.clone();
            let seed = name.bytes().fold(index as u64, |h, c| {
                h.wrapping_mul(31).wrapping_add(u64::from(c))
            });
            let thread = std::thread::Builder::new()
                .name(format!("wire-{name}-{index}"))
                .spawn(move || forward(&from, &to, &direction, &stop, seed))
                .map_err(|e| Error::Setup(format!("wire {name}: {e}")))?;
            threads.push(thread);
        }
        Ok(Wire {
            directions,
            stop,
            threads,
        })
    }

    /// Sets the impairment of the requests (`true`) or the replies.
    pub fn set(&self, requests: bool, impairment: Impairment) {
        let direction = &self.directions[usize::from(!requests)];
        *direction
            .impairment
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = impairment;
    }

    /// Packets carried and dropped, both directions.
    pub fn packets(&self) -> (u64, u64) {
        self.directions.iter().fold((0, 0), |(s, d), dir| {
            (
                s + dir.sent.load(Ordering::Relaxed),
                d + dir.dropped.load(Ordering::Relaxed),
            )
        })
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Carries packets from `from` to `to` until `stop`.
fn forward(from: &File, to: &File, direction: &Direction, stop: &AtomicBool, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut held: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; 65_536];
    let (mut reader, mut writer) = (from, to);
    while !stop.load(Ordering::Relaxed) {
        // Wait for a packet, or until the first held one is due.
        let now = Instant::now();
        let wait = held
            .front()
            .map_or(Duration::from_millis(50), |(due, _)| {
                due.saturating_duration_since(now)
            })
            .min(Duration::from_millis(50));
        let mut fds = [PollFd::new(reader.as_fd().as_raw_fd(), PollFlags::POLLIN)];
        let timeout = i32::try_from(wait.as_millis()).unwrap_or(50);
        let readable = matches!(poll(&mut fds, timeout), Ok(n) if n > 0);
        if readable {
            if let Ok(n) = reader.read(&mut buf) {
                let packet = buf.get(..n).unwrap_or_default().to_vec();
                let impairment = *direction
                    .impairment
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if impairment.loss_percent > 0 && rng.random_range(0..100) < impairment.loss_percent
                {
                    direction.dropped.fetch_add(1, Ordering::Relaxed);
                } else {
                    let jitter = if impairment.jitter_ms > 0 {
                        rng.random_range(0..=2 * impairment.jitter_ms)
                    } else {
                        0
                    };
                    let delay = (impairment.delay_ms + jitter).saturating_sub(impairment.jitter_ms);
                    let due = Instant::now() + Duration::from_millis(delay);
                    // In order: never before the packet ahead of it.
                    let due = held.back().map_or(due, |(ahead, _)| due.max(*ahead));
                    held.push_back((due, packet));
                }
            }
        }
        let now = Instant::now();
        while held.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, packet)) = held.pop_front() {
                // A device that is down refuses the write: the packet is lost.
                if writer.write(&packet).is_ok() {
                    direction.sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Opens a new TUN device (IP packets without a header) named `name` in
/// the calling thread's network namespace.
pub fn open_tun(name: &str) -> Result<File, Error> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| Error::Setup(format!("/dev/net/tun: {e}")))?;
    let mut request = IfReq {
        name: [0; 16],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    if name.len() >= request.name.len() {
        return Err(Error::Setup(format!("TUN name {name:?} is too long")));
    }
    for (slot, byte) in request.name.iter_mut().zip(name.bytes()) {
        *slot = byte;
    }
    // SAFETY: TUNSETIFF reads (and may write back the name into) a
    // `struct ifreq`, which `IfReq` lays out in full (40 bytes), and the
    // descriptor is the open /dev/net/tun.
    let result = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut request) };
    if result < 0 {
        return Err(Error::Setup(format!(
            "TUNSETIFF {name}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ifreq_is_as_large_as_the_kernels() {
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }
}
