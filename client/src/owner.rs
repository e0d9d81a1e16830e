//! Owner ids: what each node stores as the lock's holder.

/// A fresh owner id: 128 random bits from the thread-local CSPRNG (seeded
/// by the OS), as 32 hex digits. The same id is sent to every node, so a node
/// grants re-entry, extension and release only to this handle; its length
/// makes a collision between two handles practically impossible.
pub fn new_owner_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn owner_ids_are_128_bit_hex_and_distinct() {
        let ids: HashSet<String> = (0..10_000).map(|_| new_owner_id()).collect();
        assert_eq!(ids.len(), 10_000);
        for id in ids.iter().take(100) {
            assert_eq!(id.len(), 32);
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
}
