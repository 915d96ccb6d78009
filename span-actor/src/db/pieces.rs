//! A stream record's `pieces` (`RawStream::pieces`) into [`Piece`]s, without copying.
//!
//! The bytes come from the privileged loader, which copied them from the
//! kernel, which copied them from a traced process: hostile.
//!
//! # Layout
//! Back-to-back pieces, each a tag byte then its body, integers
//! little-endian:
//! ```text
//! pieces = piece*
//! piece  = u8(2) u16le(n) n bytes   MORE: the next n bytes of the stream
//!        | u8(3) u32le(n)           LOST: n bytes went by unseen
//! record = piece* gap*
//! gap    = u8(4) u8(dir) u32le(n)   GAP: before this record, n bytes of
//!                                   direction dir (0 received, 1 sent) went
//!                                   by in records of the connection the
//!                                   ring had no room for
//! ```
//! The kernel captures the head of each syscall's bytes (up to ~16 KiB),
//! then LOST for the middle, then MORE with the last (up to 256) bytes,
//! then the GAP pieces when records of the connection were lost since its
//! last one ([`split_gap`] takes them off: the protocols see pieces only).
//! An unknown tag (GAP included, to [`pieces`]), a piece after a GAP, or a
//! piece cut by the end of the record makes the whole record malformed:
//! the iterator yields one error and stops.

/// `PIECE_MORE`.
pub const MORE: u8 = 2;
/// `PIECE_LOST`.
pub const LOST: u8 = 3;
/// `PIECE_GAP`.
pub const GAP: u8 = 4;
/// A GAP piece's length.
const GAP_LEN: usize = 6;

/// What a record's GAP pieces say: bytes of each direction that went by,
/// before the record, in records the kernel's ring had no room for (the
/// calls they carried are not traced; the kernel counted their sends).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gap {
    /// Bytes the client received, unseen.
    pub recv: u32,
    /// Bytes the client sent, unseen.
    pub send: u32,
}

impl Gap {
    /// Whether nothing went by unseen.
    pub fn is_empty(&self) -> bool {
        self.recv == 0 && self.send == 0
    }
}

/// One piece, borrowing the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// The next bytes of the stream.
    Bytes(&'a [u8]),
    /// This many bytes of the stream went by unseen.
    Lost(u32),
}

/// Why a record's pieces could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PiecesError {
    /// An unknown tag, or a piece cut by the end of the record.
    #[error("malformed database record piece at byte {at}")]
    Malformed {
        /// Where the bad piece starts.
        at: usize,
    },
}

/// The pieces of one record, in order; after an error, nothing.
#[derive(Debug, Clone)]
pub struct Pieces<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Iterates the pieces of `bytes`.
pub fn pieces(bytes: &[u8]) -> Pieces<'_> {
    Pieces { bytes, at: 0 }
}

/// Checks a whole record first: protocol parsers must not act on half a
/// record they will then call malformed.
pub fn validate(bytes: &[u8]) -> Result<(), PiecesError> {
    pieces(bytes).try_for_each(|p| p.map(drop))
}

/// Splits a record into its pieces (everything before its GAP pieces,
/// checked as [`validate`] does) and the gap they tell. Malformed: a piece
/// after a GAP, a direction other than 0 and 1, anything [`validate`]
/// refuses.
pub fn split_gap(bytes: &[u8]) -> Result<(&[u8], Gap), PiecesError> {
    let mut gap = Gap::default();
    let mut at = 0;
    let mut end = None;
    while let Some(rest) = bytes.get(at..).filter(|r| !r.is_empty()) {
        let bad = PiecesError::Malformed { at };
        let len = match rest[0] {
            GAP => {
                let g = rest.get(..GAP_LEN).ok_or(bad)?;
                let n = u32::from_le_bytes([g[2], g[3], g[4], g[5]]);
                match g[1] {
                    0 => gap.recv = gap.recv.saturating_add(n),
                    1 => gap.send = gap.send.saturating_add(n),
                    _ => return Err(bad),
                }
                end.get_or_insert(at);
                GAP_LEN
            }
            _ if end.is_some() => return Err(bad),
            MORE => 3 + usize::from(u16::from_le_bytes([*rest.get(1).ok_or(bad)?, *rest.get(2).ok_or(bad)?])),
            LOST => 5,
            _ => return Err(bad),
        };
        if rest.len() < len {
            return Err(bad);
        }
        at += len;
    }
    Ok((&bytes[..end.unwrap_or(bytes.len())], gap))
}

/// The last [`Piece::Bytes`] of a valid record, if it is the record's
/// last piece: the captured tail of the syscall, where the resync rules
/// look for an end of response.
pub fn tail(bytes: &[u8]) -> Option<&[u8]> {
    match pieces(bytes).last() {
        Some(Ok(Piece::Bytes(b))) => Some(b),
        _ => None,
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Result<Piece<'a>, PiecesError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.bytes.get(self.at..).filter(|r| !r.is_empty())?;
        let bad = PiecesError::Malformed { at: self.at };
        let item = match rest[0] {
            MORE => rest.get(1..3).map(|b| usize::from(u16::from_le_bytes([b[0], b[1]]))).and_then(|n| {
                let data = rest.get(3..3 + n)?;
                Some((Piece::Bytes(data), 3 + n))
            }),
            LOST => rest.get(1..5).map(|b| (Piece::Lost(u32::from_le_bytes([b[0], b[1], b[2], b[3]])), 5)),
            _ => None,
        };
        match item {
            Some((piece, len)) => {
                self.at += len;
                Some(Ok(piece))
            }
            None => {
                // Stop for good: what follows a bad piece is not pieces.
                self.at = self.bytes.len();
                Some(Err(bad))
            }
        }
    }
}

/// Encodes pieces the way the kernel writes them (tests and fuzzing).
pub fn encode(out: &mut Vec<u8>, piece: Piece<'_>) {
    match piece {
        Piece::Bytes(b) => {
            for chunk in b.chunks(usize::from(u16::MAX)) {
                out.push(MORE);
                // `chunks` bounds the length to u16::MAX.
                out.extend_from_slice(&(chunk.len() as u16).to_le_bytes());
                out.extend_from_slice(chunk);
            }
        }
        Piece::Lost(n) => {
            out.push(LOST);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// Encodes a gap's GAP pieces the way the kernel writes them (tests and
/// fuzzing): after the record's other pieces.
pub fn encode_gap(out: &mut Vec<u8>, gap: Gap) {
    for (dir, n) in [(0u8, gap.recv), (1, gap.send)] {
        out.extend_from_slice(&[GAP, dir]);
        out.extend_from_slice(&n.to_le_bytes());
    }
}

/// Pieces of a record that captured all of `b` (the protocols' tests
/// build their records with it and [`captured`]).
#[cfg(test)]
pub(crate) fn whole(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&mut out, Piece::Bytes(b));
    out
}

/// Pieces of a record as the kernel captures a long syscall: the first
/// `head` bytes, LOST, the last `tail` bytes.
#[cfg(test)]
pub(crate) fn captured(b: &[u8], head: usize, tail: usize) -> Vec<u8> {
    if b.len() <= head + tail {
        return whole(b);
    }
    let mut out = Vec::new();
    encode(&mut out, Piece::Bytes(&b[..head]));
    encode(&mut out, Piece::Lost((b.len() - head - tail) as u32));
    encode(&mut out, Piece::Bytes(&b[b.len() - tail..]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_lost() {
        let mut b = Vec::new();
        encode(&mut b, Piece::Bytes(b"hello"));
        encode(&mut b, Piece::Lost(70_000));
        // An empty MORE (encode writes none; the kernel might).
        b.extend_from_slice(&[MORE, 0, 0]);
        encode(&mut b, Piece::Bytes(b"end"));
        let p: Vec<_> = pieces(&b).collect::<Result<_, _>>().unwrap();
        assert_eq!(p, vec![Piece::Bytes(b"hello"), Piece::Lost(70_000), Piece::Bytes(b""), Piece::Bytes(b"end")]);
        assert_eq!(tail(&b), Some(&b"end"[..]));
        assert!(validate(&b).is_ok());
    }

    #[test]
    fn hostile_records_are_refused() {
        for bad in [&[9u8][..], &[MORE, 5, 0, 1], &[MORE, 1], &[LOST, 1, 0], &[MORE, 0, 0, 7]] {
            let r: Vec<_> = pieces(bad).collect();
            assert!(r.last().unwrap().is_err(), "{bad:?}");
            assert!(validate(bad).is_err());
            // One error, then nothing.
            assert_eq!(r.iter().filter(|p| p.is_err()).count(), 1);
        }
        assert_eq!(pieces(&[]).count(), 0);
        assert_eq!(tail(&[LOST, 0, 0, 0, 0]), None);
    }

    #[test]
    fn a_gap_ends_the_record_and_is_taken_off() {
        let mut b = Vec::new();
        encode(&mut b, Piece::Bytes(b"get k\r\n"));
        encode(&mut b, Piece::Lost(9));
        let stream = b.len();
        encode_gap(&mut b, Gap { recv: 2_519, send: 0 });
        let (p, gap) = split_gap(&b).unwrap();
        assert_eq!((p, gap), (&b[..stream], Gap { recv: 2_519, send: 0 }));
        assert!(validate(p).is_ok());
        // the protocols never see a GAP piece
        assert!(validate(&b).is_err());
        // a record that is only a gap (its own bytes all lost in the middle are LOST, never GAP)
        let mut only = Vec::new();
        encode_gap(&mut only, Gap { recv: 0, send: 62 });
        assert_eq!(split_gap(&only).unwrap(), (&[][..], Gap { recv: 0, send: 62 }));
        // none
        assert_eq!(split_gap(&b[..stream]).unwrap(), (&b[..stream], Gap::default()));
        assert!(Gap::default().is_empty());
    }

    #[test]
    fn hostile_gaps_are_refused() {
        let mut after = Vec::new();
        encode_gap(&mut after, Gap { recv: 1, send: 1 });
        encode(&mut after, Piece::Bytes(b"x"));
        let mut cut = Vec::new();
        encode_gap(&mut cut, Gap { recv: 1, send: 1 });
        cut.pop();
        for bad in [&after[..], &cut, &[GAP, 2, 1, 0, 0, 0], &[MORE, 5, 0, 1, GAP, 0, 0, 0, 0, 0], &[9]] {
            assert!(split_gap(bad).is_err(), "{bad:?}");
        }
        // counts add up without overflow
        let mut big = Vec::new();
        encode_gap(&mut big, Gap { recv: u32::MAX, send: 0 });
        encode_gap(&mut big, Gap { recv: u32::MAX, send: 7 });
        assert_eq!(split_gap(&big).unwrap().1, Gap { recv: u32::MAX, send: 7 });
    }
}
