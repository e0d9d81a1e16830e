//! Short byte strings kept inside a fixed buffer with their length, so that
//! a lock's owner and an index entry's key name need no allocation of their
//! own. The enums that hold them ([`crate::Lock`]'s owner,
//! [`crate::KeyId`]) choose the buffer size for their memory layout.

/// `bytes` copied into an `N`-byte buffer, with its length, if it fits.
pub(crate) fn pack<const N: usize>(bytes: &[u8]) -> Option<(u8, [u8; N])> {
    let len = u8::try_from(bytes.len())
        .ok()
        .filter(|_| bytes.len() <= N)?;
    let mut buffer = [0; N];
    buffer.get_mut(..bytes.len())?.copy_from_slice(bytes);
    Some((len, buffer))
}

/// The bytes [`pack`] stored.
pub(crate) fn unpack<const N: usize>(len: u8, buffer: &[u8; N]) -> &[u8] {
    buffer.get(..usize::from(len)).unwrap_or(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_what_fits_and_reads_it_back_whole() {
        for bytes in [&b""[..], b"a", b"abcd"] {
            let (len, buffer) = pack::<4>(bytes).unwrap();
            assert_eq!(unpack(len, &buffer), bytes);
        }
        assert_eq!(pack::<4>(b"abcde"), None);
        assert_eq!(pack::<300>(&[7; 256]), None, "a length must fit a u8");
    }
}
