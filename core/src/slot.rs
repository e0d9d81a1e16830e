//! Cluster hash slots: which of the 16,384 slots a key name belongs to (the
//! CRC16 of the name, or of its hash tag, as Redis's and Valkey's
//! `keyHashSlot` compute it), and a set of slot ranges a server names in an
//! event (the slots whose keys leave a node).

/// Slots in a cluster.
pub const SLOTS: u16 = 16_384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), by a table.
const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        let [high, _] = crc.to_be_bytes();
        let index = usize::from(high ^ b);
        (crc << 8) ^ TABLE.get(index).copied().unwrap_or(0)
    })
}

/// The hash slot of key `name`: of the part between its first `{` and the
/// first `}` after it when that part is not empty, else of the whole name.
pub fn key_slot(name: &[u8]) -> u16 {
    let tagged = name
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = name.get(open + 1..)?;
            let close = rest.iter().position(|&b| b == b'}')?;
            rest.get(..close)
        })
        .filter(|tag| !tag.is_empty());
    crc16(tagged.unwrap_or(name)) & (SLOTS - 1)
}

/// A set of slots, as ranges (inclusive), in any order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotRanges {
    ranges: Vec<(u16, u16)>,
}

impl SlotRanges {
    /// The ranges `(start, end)` of a server's event; a range that is not a
    /// range of slots (its end before its start, or past the last slot) is
    /// not taken.
    pub fn new(ranges: impl IntoIterator<Item = (u16, u16)>) -> Self {
        Self {
            ranges: ranges
                .into_iter()
                .filter(|&(start, end)| start <= end && end < SLOTS)
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn contains(&self, slot: u16) -> bool {
        self.ranges
            .iter()
            .any(|&(start, end)| (start..=end).contains(&slot))
    }

    /// Whether key `name`'s slot is one of these.
    pub fn has_key(&self, name: &[u8]) -> bool {
        !self.is_empty() && self.contains(key_slot(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        // The check value of CRC-16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_are_the_servers() {
        // `CLUSTER KEYSLOT` on Redis 8.6 and Valkey 9.1.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{job}"), key_slot(b"job"));
        assert_eq!(key_slot(b"{job}ex"), key_slot(b"job"));
        assert_eq!(key_slot(b"a{job}b{other}"), key_slot(b"job"));
        // An empty tag hashes the whole name; so does a tag never closed.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") & 16383);
        // The tag ends at the first `}` after the first `{`.
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b""), 0);
        assert!(key_slot(&[0xff; 1000]) < SLOTS);
    }

    #[test]
    fn ranges() {
        let none = SlotRanges::new([]);
        assert!(none.is_empty() && !none.has_key(b"foo"));
        let some = SlotRanges::new([(0, 10), (12182, 12182), (20, 5), (16383, 16384)]);
        assert!(some.contains(0) && some.contains(10) && !some.contains(11));
        assert!(some.has_key(b"foo") && !some.has_key(b"bar"));
        // Inverted and out-of-range ranges are not taken.
        assert!(!some.contains(16383) && !some.contains(15));
        assert!(SlotRanges::new([(0, 16383)]).has_key(b"anything"));
    }
}
