//! The fuzz input read as numbers, shared by the operation targets.

/// Reads the input; past its end every read is 0.
pub struct Input<'a>(pub &'a [u8]);

#[allow(dead_code)] // each target uses some of these
impl Input<'_> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((first, rest)) => {
                self.0 = rest;
                *first
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u64 {
        u64::from(self.u8()) << 8 | u64::from(self.u8())
    }

    pub fn u64(&mut self) -> u64 {
        (0..8).fold(0, |acc, _| acc << 8 | u64::from(self.u8()))
    }

    /// A number with its edges likely: 0, 1, max-1, max, or anything.
    pub fn up_to(&mut self, max: u64) -> u64 {
        match self.u8() % 8 {
            0 => 0,
            1 => 1.min(max),
            2 => max.saturating_sub(1),
            3 => max,
            4 => u64::from(self.u8()).min(max),
            _ => self.u64() % max.saturating_add(1).max(1),
        }
    }
}
