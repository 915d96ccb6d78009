//! FNV-1a, 64 bits: the pins' stamp and the build's digests of the eBPF
//! objects (`build.rs` includes this file too, so both hash alike).

/// FNV-1a's offset basis, the hash of nothing.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// `h` extended by `bytes`.
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
