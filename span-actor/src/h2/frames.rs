//! HTTP/2 frame types, flags and the payload parsing the stream tracker
//! needs (RFC 9113 section 6). Payloads may be cut by the capture: every
//! function takes what is there and says what is missing.

/// DATA.
pub const DATA: u8 = 0x0;
/// HEADERS.
pub const HEADERS: u8 = 0x1;
/// PRIORITY.
pub const PRIORITY: u8 = 0x2;
/// RST_STREAM.
pub const RST_STREAM: u8 = 0x3;
/// SETTINGS.
pub const SETTINGS: u8 = 0x4;
/// PUSH_PROMISE.
pub const PUSH_PROMISE: u8 = 0x5;
/// PING.
pub const PING: u8 = 0x6;
/// GOAWAY.
pub const GOAWAY: u8 = 0x7;
/// WINDOW_UPDATE.
pub const WINDOW_UPDATE: u8 = 0x8;
/// CONTINUATION.
pub const CONTINUATION: u8 = 0x9;

/// END_STREAM (DATA, HEADERS); ACK on SETTINGS and PING.
pub const FLAG_END_STREAM: u8 = 0x1;
/// ACK (SETTINGS, PING).
pub const FLAG_ACK: u8 = 0x1;
/// END_HEADERS (HEADERS, PUSH_PROMISE, CONTINUATION).
pub const FLAG_END_HEADERS: u8 = 0x4;
/// PADDED (DATA, HEADERS, PUSH_PROMISE).
pub const FLAG_PADDED: u8 = 0x8;
/// PRIORITY (HEADERS).
pub const FLAG_PRIORITY: u8 = 0x20;

/// SETTINGS_HEADER_TABLE_SIZE.
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;

/// The largest frame payload a frame header can declare (2^24 - 1).
pub const MAX_FRAME_LEN: u32 = (1 << 24) - 1;

/// Whether the stream tracker needs this frame type's payload (the kernel
/// captures it only for these).
pub fn payload_needed(typ: u8) -> bool {
    matches!(typ, HEADERS | CONTINUATION | PUSH_PROMISE | RST_STREAM | GOAWAY | SETTINGS)
}

/// The header block fragment inside a HEADERS, PUSH_PROMISE or
/// CONTINUATION payload of declared length `len`, of which `payload` was
/// captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// The captured part of the fragment.
    pub bytes: &'a [u8],
    /// The whole fragment was captured.
    pub whole: bool,
}

/// Strips padding, priority and the promised stream id. `None`: the
/// padding is longer than the frame (a connection error for the peer).
pub fn fragment(typ: u8, flags: u8, len: u32, payload: &[u8]) -> Option<Fragment<'_>> {
    let len = len as usize;
    let mut off = 0usize;
    let mut pad = 0usize;
    if matches!(typ, HEADERS | PUSH_PROMISE) && flags & FLAG_PADDED != 0 {
        match payload.first() {
            Some(&p) => pad = usize::from(p),
            // Not even the pad length was captured.
            None => return if len >= 1 { Some(Fragment { bytes: &[], whole: false }) } else { None },
        }
        off = 1;
    }
    if typ == HEADERS && flags & FLAG_PRIORITY != 0 {
        off += 5;
    }
    if typ == PUSH_PROMISE {
        off += 4;
    }
    if off + pad > len {
        return None;
    }
    let end = len - pad;
    let bytes = payload.get(off..end.min(payload.len())).unwrap_or(&[]);
    Some(Fragment { bytes, whole: payload.len() >= end })
}

/// The (identifier, value) pairs of a SETTINGS payload's captured part.
pub fn settings(payload: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    payload.chunks_exact(6).map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]])))
}

/// The error code of a RST_STREAM payload, if captured.
pub fn rst_code(payload: &[u8]) -> Option<u32> {
    payload.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// (last stream id, error code) of a GOAWAY payload, if captured.
pub fn goaway(payload: &[u8]) -> Option<(u32, u32)> {
    let b = payload.get(..8)?;
    Some((u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff, u32::from_be_bytes([b[4], b[5], b[6], b[7]])))
}

/// RFC 9113 section 7 error code names (for logs and `error.type`).
pub fn error_name(code: u32) -> Option<&'static str> {
    Some(match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments() {
        // Plain.
        assert_eq!(fragment(HEADERS, 0, 3, b"abc"), Some(Fragment { bytes: b"abc", whole: true }));
        // Padded (2 bytes) with priority.
        let p = [2, 0, 0, 0, 1, 16, b'x', b'y', 0, 0];
        assert_eq!(fragment(HEADERS, FLAG_PADDED | FLAG_PRIORITY, 10, &p), Some(Fragment { bytes: b"xy", whole: true }));
        // Cut before the padding: still whole.
        assert_eq!(fragment(HEADERS, FLAG_PADDED | FLAG_PRIORITY, 10, &p[..8]), Some(Fragment { bytes: b"xy", whole: true }));
        // Cut inside the fragment.
        assert_eq!(fragment(HEADERS, FLAG_PADDED | FLAG_PRIORITY, 10, &p[..7]), Some(Fragment { bytes: b"x", whole: false }));
        // Cut inside the priority fields.
        assert_eq!(fragment(HEADERS, FLAG_PADDED | FLAG_PRIORITY, 10, &p[..3]), Some(Fragment { bytes: b"", whole: false }));
        // Padding longer than the frame.
        assert_eq!(fragment(HEADERS, FLAG_PADDED, 3, &[5, 1, 2]), None);
        assert_eq!(fragment(HEADERS, FLAG_PRIORITY, 3, &[0, 0, 0]), None);
        // PUSH_PROMISE: promised id skipped.
        assert_eq!(fragment(PUSH_PROMISE, 0, 6, &[0, 0, 0, 2, 0x82, 0x84]), Some(Fragment { bytes: &[0x82, 0x84], whole: true }));
        // CONTINUATION ignores PADDED.
        assert_eq!(fragment(CONTINUATION, FLAG_PADDED, 2, &[1, 2]), Some(Fragment { bytes: &[1, 2], whole: true }));
    }

    #[test]
    fn control_payloads() {
        let s: Vec<_> = settings(&[0, 1, 0, 0, 0x10, 0, 0, 3, 0, 0, 0, 100, 9]).collect();
        assert_eq!(s, vec![(1, 4096), (3, 100)]);
        assert_eq!(rst_code(&[0, 0, 0, 8]), Some(8));
        assert_eq!(rst_code(&[0, 0]), None);
        assert_eq!(goaway(&[0x80, 0, 0, 5, 0, 0, 0, 0, 1, 2]), Some((5, 0)));
        assert_eq!(error_name(8), Some("CANCEL"));
        assert_eq!(error_name(99), None);
    }
}
