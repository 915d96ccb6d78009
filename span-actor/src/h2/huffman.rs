//! HPACK's Huffman code (RFC 7541 Appendix B), decoding only.
//!
//! The code is canonical: sorting the symbols by (code length, symbol) and
//! counting upwards gives every code, so the table below holds only the
//! lengths and the decoder works from per-length ranges. A test checks a
//! few codes against the RFC and the RFC's Appendix C examples check the
//! rest.

use std::sync::OnceLock;

/// Code length in bits of each symbol 0..=255 and of EOS (256).
#[rustfmt::skip]
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
     6, 10, 10, 12, 13,  6,  8, 11, 10, 10,  8, 11,  8,  6,  6,  6,
     5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8, 15,  6, 12, 10,
    13,  6,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,
     7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8, 13, 19, 13, 14,  6,
    15,  5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5,
     6,  7,  6,  5,  5,  6,  7,  7,  7,  7,  7, 15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    30,
];

const EOS: u16 = 256;
const MAX_LEN: usize = 30;

/// Per code length: the first code of that length, how many codes have
/// it, and where its symbols start in `symbols`.
struct Canonical {
    first_code: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    first_index: [u16; MAX_LEN + 1],
    symbols: [u16; 257],
}

fn canonical() -> &'static Canonical {
    static TABLE: OnceLock<Canonical> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut c = Canonical { first_code: [0; MAX_LEN + 1], count: [0; MAX_LEN + 1], first_index: [0; MAX_LEN + 1], symbols: [0; 257] };
        let mut order: Vec<u16> = (0..257).collect();
        order.sort_by_key(|&s| (LENGTHS[usize::from(s)], s));
        for (i, &s) in order.iter().enumerate() {
            c.symbols[i] = s;
        }
        for &l in &LENGTHS {
            c.count[usize::from(l)] += 1;
        }
        let (mut code, mut index) = (0u32, 0u16);
        for len in 1..=MAX_LEN {
            code <<= 1;
            c.first_code[len] = code;
            c.first_index[len] = index;
            code += c.count[len];
            // At most 257 symbols: fits u16.
            index += c.count[len] as u16;
        }
        c
    })
}

/// The code and length of `sym` (for the tests' encoders).
#[cfg(test)]
pub(crate) fn code_of(sym: u16) -> (u32, u8) {
    let c = canonical();
    let len = LENGTHS[usize::from(sym)];
    let l = usize::from(len);
    let start = usize::from(c.first_index[l]);
    let pos = c.symbols[start..start + c.count[l] as usize].iter().position(|&s| s == sym).unwrap_or(0);
    (c.first_code[l] + pos as u32, len)
}

/// Why a Huffman string is invalid (RFC 7541 section 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HuffmanError {
    /// The EOS symbol inside the string.
    Eos,
    /// Padding longer than 7 bits or not all ones.
    Padding,
}

/// Appends the decoding of `src` to `out`. On error `out` holds a prefix.
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let c = canonical();
    // Each symbol takes at least 5 bits.
    out.reserve(src.len() * 8 / 5 + 1);
    let (mut code, mut len) = (0u32, 0usize);
    for &byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let off = code.wrapping_sub(c.first_code[len]);
            if off < c.count[len] {
                let sym = c.symbols[usize::from(c.first_index[len]) + off as usize];
                if sym == EOS {
                    return Err(HuffmanError::Eos);
                }
                // Symbols other than EOS are bytes.
                out.push(sym as u8);
                code = 0;
                len = 0;
            } else if len == MAX_LEN {
                // Every 30-bit pattern is a code or a prefix of none: the
                // longest codes fill the space, so this cannot happen; kept
                // so hostile bytes can never index past the tables.
                return Err(HuffmanError::Padding);
            }
        }
    }
    // Padding: the most significant bits of EOS (all ones), < 8 bits.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn encode(src: &[u8], out: &mut Vec<u8>) {
    let (mut acc, mut bits) = (0u64, 0u32);
    for &b in src {
        let (code, len) = code_of(u16::from(b));
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_rfc() {
        // A few rows of RFC 7541 Appendix B.
        assert_eq!(code_of(b'0'.into()), (0x0, 5));
        assert_eq!(code_of(b'a'.into()), (0x3, 5));
        assert_eq!(code_of(b' '.into()), (0x14, 6));
        assert_eq!(code_of(b'/'.into()), (0x18, 6));
        assert_eq!(code_of(0), (0x1ff8, 13));
        assert_eq!(code_of(255), (0x3ffffee, 26));
        assert_eq!(code_of(EOS), (0x3fffffff, 30));
    }

    #[test]
    fn round_trip_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert_eq!(dec, all);
    }

    #[test]
    fn rfc_example() {
        // C.4.1: "www.example.com"
        let enc = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        let mut out = Vec::new();
        decode(&enc, &mut out).unwrap();
        assert_eq!(out, b"www.example.com");
    }

    #[test]
    fn bad_padding_and_eos() {
        let mut out = Vec::new();
        // 'a' (00011) then padding 000: not ones.
        assert_eq!(decode(&[0b0001_1000], &mut out), Err(HuffmanError::Padding));
        // A whole byte of ones: padding longer than 7 bits.
        out.clear();
        assert_eq!(decode(&[0x1f, 0xff], &mut out), Err(HuffmanError::Padding));
        // EOS itself (30 ones) followed by padding.
        out.clear();
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff], &mut out), Err(HuffmanError::Eos));
        assert!(decode(&[], &mut Vec::new()).is_ok());
    }
}
