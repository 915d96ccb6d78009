//! Decimal digits without an allocation (an `error.type` of a status code
//! is written for every failed request, in spans and series alike).

/// Writes a decimal number into `buf`, returning the digits.
pub fn decimal(v: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[i..]).unwrap_or("0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals() {
        let mut buf = [0; 20];
        assert_eq!(decimal(0, &mut buf), "0");
        assert_eq!(decimal(503, &mut buf), "503");
        assert_eq!(decimal(u64::MAX, &mut buf), "18446744073709551615");
    }
}
