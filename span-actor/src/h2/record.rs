//! The kernel's h2 record pieces (`RawH2::pieces`) into [`Piece`]s.
//!
//! The bytes come from the privileged loader, which copied them from the
//! kernel, which copied them from a traced process: hostile. Layout (see
//! probe-loader's `bpf/ringtail.h`, `PIECE_*`), integers little-endian:
//! `1` + the 9-byte frame header; `2` + u16 n + n payload bytes (more of
//! the current frame); `3` + u32 n (bytes unseen). A frame's captured
//! payload arrives as the `More` pieces right after it: they are joined to
//! the frame here, so [`Piece::Frame`] carries what was captured in the
//! same syscall and [`Piece::More`] only what straddled syscalls.

use super::Piece;

/// `PIECE_FRAME`.
const FRAME: u8 = 1;
/// `PIECE_MORE`.
const MORE: u8 = 2;
/// `PIECE_LOST`.
const LOST: u8 = 3;

/// Why a record's pieces could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// An unknown tag, or a piece cut by the end of the record.
    #[error("malformed h2 record at byte {at}")]
    Malformed {
        /// Where the bad piece starts.
        at: usize,
    },
}

/// The pieces of one record, in order.
pub fn pieces(bytes: &[u8]) -> Result<Vec<Piece>, RecordError> {
    let mut out: Vec<Piece> = Vec::new();
    let mut at = 0usize;
    // True while the last piece is a frame of this record whose payload
    // may still continue in this record's MORE pieces.
    let mut open_frame = false;
    while at < bytes.len() {
        let bad = RecordError::Malformed { at };
        let rest = &bytes[at..];
        match rest[0] {
            FRAME => {
                let h = rest.get(1..10).ok_or(bad)?;
                let len = (u32::from(h[0]) << 16) | (u32::from(h[1]) << 8) | u32::from(h[2]);
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                out.push(Piece::Frame { typ: h[3], flags: h[4], stream, len, payload: Vec::new() });
                open_frame = true;
                at += 10;
            }
            MORE => {
                let n = rest.get(1..3).map(|b| usize::from(u16::from_le_bytes([b[0], b[1]]))).ok_or(bad)?;
                let data = rest.get(3..3 + n).ok_or(bad)?;
                match out.last_mut() {
                    Some(Piece::Frame { payload, len, .. }) if open_frame => {
                        // A frame's payload cannot exceed its length: the
                        // excess is someone else's bytes.
                        let room = (*len as usize).saturating_sub(payload.len());
                        if data.len() > room {
                            return Err(bad);
                        }
                        payload.extend_from_slice(data);
                    }
                    _ => out.push(Piece::More { payload: data.to_vec() }),
                }
                at += 3 + n;
            }
            LOST => {
                let b = rest.get(1..5).ok_or(bad)?;
                out.push(Piece::Lost { bytes: u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])) });
                open_frame = false;
                at += 5;
            }
            _ => return Err(bad),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_with_their_payload_more_and_lost() {
        let mut b = vec![FRAME, 0, 0, 3, 1, 4, 0, 0, 0, 1];
        b.extend_from_slice(&[MORE, 2, 0, 0x82, 0x86]);
        b.extend_from_slice(&[FRAME, 0, 0, 8, 0, 1, 0x80, 0, 0, 3]); // DATA, reserved bit set
        b.extend_from_slice(&[LOST, 5, 0, 0, 0]);
        b.extend_from_slice(&[MORE, 1, 0, 0x84]);
        let p = pieces(&b).unwrap();
        assert_eq!(
            p,
            vec![
                Piece::Frame { typ: 1, flags: 4, stream: 1, len: 3, payload: vec![0x82, 0x86] },
                Piece::Frame { typ: 0, flags: 1, stream: 3, len: 8, payload: vec![] },
                Piece::Lost { bytes: 5 },
                Piece::More { payload: vec![0x84] },
            ]
        );
    }

    #[test]
    fn hostile_records_are_refused() {
        assert!(pieces(&[9]).is_err());
        assert!(pieces(&[FRAME, 0, 0]).is_err());
        assert!(pieces(&[MORE, 5, 0, 1]).is_err());
        assert!(pieces(&[LOST, 1]).is_err());
        // more payload than the frame declares
        assert!(pieces(&[FRAME, 0, 0, 1, 1, 4, 0, 0, 0, 1, MORE, 2, 0, 1, 2]).is_err());
        assert_eq!(pieces(&[]).unwrap(), vec![]);
    }
}
