//! What the protocol modules share: a bounded reader of big-endian fields
//! (each module adds its own fields in a trait of its own), and the way a
//! record is fed to one direction's [`Stream`]: a desynced direction
//! resumes only at a boundary the module proves, then every whole message
//! is handed on.

use super::MsgCounts;
use crate::db::pieces::{self, Piece};
use crate::db::stream::{Frame, Msg, Next, Stream, MAX_BUFFERED};

/// A bounded reader of big-endian fields; `None` past the end.
#[derive(Debug, Clone)]
pub(super) struct R<'a> {
    /// The bytes read.
    pub(super) b: &'a [u8],
    /// Where the next field starts.
    pub(super) at: usize,
}

impl<'a> R<'a> {
    pub(super) fn new(b: &'a [u8]) -> R<'a> {
        R { b, at: 0 }
    }

    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    pub(super) fn arr<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(super) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.arr()?))
    }

    pub(super) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.arr()?))
    }

    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.arr()?))
    }

    pub(super) fn i8(&mut self) -> Option<i8> {
        Some(i8::from_be_bytes(self.arr()?))
    }

    pub(super) fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.arr()?))
    }

    pub(super) fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.arr()?))
    }

    pub(super) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.arr()?))
    }
}

/// Whether a record of a direction can be read: `Some(false)` when the
/// direction is in place, `Some(true)` when it was desynced and the record
/// is one piece of bytes that `tiles` proves starts at a boundary (the
/// stream restarts, counted; the caller forgets what went by unseen), and
/// `None` when the record is to be skipped.
pub(super) fn resume(stream: &mut Stream, bytes: &[u8], tiles: impl FnOnce(&[u8]) -> bool, counts: &mut MsgCounts) -> Option<bool> {
    if !stream.desynced() {
        return Some(false);
    }
    let mut ps = pieces::pieces(bytes).flatten();
    match (ps.next(), ps.next()) {
        (Some(Piece::Bytes(b)), None) if tiles(b) => {
            stream.restart();
            counts.resync += 1;
            Some(true)
        }
        _ => None,
    }
}

/// Pushes a record's pieces into `stream` and hands each message `frame`
/// cuts to `each`, counting one longer than the stream keeps. `each`
/// returning false desyncs the stream (counted): the message proved the
/// framing wrong.
pub(super) fn drain(
    stream: &mut Stream,
    bytes: &[u8],
    frame: impl Fn(&[u8]) -> Frame,
    counts: &mut MsgCounts,
    mut each: impl FnMut(Msg<'_>, &mut MsgCounts) -> bool,
) {
    for piece in pieces::pieces(bytes).flatten() {
        stream.push(piece);
        loop {
            match stream.next(&frame) {
                Next::Msg(m) => {
                    if m.len > MAX_BUFFERED as u64 {
                        counts.too_large += 1;
                    }
                    if !each(m, counts) {
                        stream.desync();
                        counts.desync += 1;
                        break;
                    }
                }
                Next::Wait => break,
                Next::Desync => {
                    counts.desync += 1;
                    break;
                }
            }
        }
    }
}
