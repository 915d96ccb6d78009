//! Bytes from traced processes as text, one home for every protocol
//! module: tokens (RFC 9110 `tchar`) and clean, bounded strings.

/// RFC 9110 `tchar`, one lookup a byte (a search of the symbol list for
/// every byte of every method showed in the live profile).
const TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric();
        i += 1;
    }
    let symbols = b"!#$%&'*+-.^_`|~";
    let mut j = 0;
    while j < symbols.len() {
        t[symbols[j] as usize] = true;
        j += 1;
    }
    t
};

/// Whether `b` may stand in a token (a method, a header name).
pub fn is_token(b: u8) -> bool {
    TOKEN[usize::from(b)]
}

/// Bytes as text: invalid UTF-8 replaced, control characters removed (they
/// would corrupt logs and terminals downstream), at most `max` bytes (cut
/// at a character boundary).
pub fn clean(bytes: &[u8], max: usize) -> String {
    // The common case, printable ASCII, is valid UTF-8 and clean, and each
    // byte a character: only the first `max` bytes are looked at.
    let head = &bytes[..bytes.len().min(max)];
    if head.iter().all(|b| (0x20..0x7f).contains(b)) {
        return std::str::from_utf8(head).map(str::to_owned).unwrap_or_default();
    }
    let mut s: String = String::from_utf8_lossy(bytes).chars().filter(|c| !c.is_control()).collect();
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bytes_are_rfc_9110_tchar() {
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_token(b), tchar, "byte {b:#04x}");
        }
    }

    #[test]
    fn text_is_bounded_and_clean() {
        assert_eq!(clean(b"abc", 2), "ab");
        assert_eq!(clean("é".as_bytes(), 1), "");
        assert_eq!(clean(b"a\x01b\xff", 10), "ab\u{fffd}");
    }
}
