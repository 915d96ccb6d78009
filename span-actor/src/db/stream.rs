//! [`Stream`]: one direction of a connection, pieces in, whole (or
//! knowingly cut) protocol messages out.
//!
//! A protocol parser frames messages (it reads a header and says how long
//! the message is: [`Frame`]); the stream holds the bytes of the message
//! in progress across pieces and records, and deals with what the kernel
//! did not capture:
//! - a LOST region inside a message whose length is known (from a header
//!   already seen) is fine: the message comes out cut ([`Msg::whole`]
//!   false, its captured head) and the rest of its body is skipped;
//! - a LOST region where a header would be (nothing pending, or longer
//!   than the message in progress) is a desync: the parser is told
//!   ([`Next::Desync`]) and the stream ignores everything until the
//!   parser restarts it at a boundary it can prove ([`Stream::restart`]).
//!
//! # Layout
//! ```text
//! buf[..pos]      consumed (dropped at the next append)
//! buf[pos..]      unparsed: the message in progress (at most MAX_BUFFERED)
//! skip            stream bytes still to drop: the rest of a cut message
//! ```
//! Memory: at most [`MAX_BUFFERED`] bytes kept between pieces, plus one
//! piece (≤ 64 KiB) while it is being parsed; the buffer is freed when it
//! empties past [`KEEP_CAPACITY`].

use super::pieces::Piece;

/// Unparsed bytes kept per direction: a message longer than this comes
/// out cut (its head) and its rest is skipped; bytes without a framable
/// header past this are a desync.
pub const MAX_BUFFERED: usize = 64 * 1024;

/// Buffer capacity kept when it empties (a few ordinary messages); more
/// is returned to the allocator so idle connections stay small.
pub const KEEP_CAPACITY: usize = 8 * 1024;

/// What the parser reads of the unparsed bytes' head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A message of this many bytes (header included; at least 1) starts
    /// here.
    Len(u64),
    /// Not enough bytes to tell.
    Need,
    /// Not a message header: the stream is not where the parser thought.
    Bad,
}

/// A message: whole, or its captured head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg<'a> {
    /// The message's bytes, header included (all of them when `whole`).
    pub bytes: &'a [u8],
    /// Every byte was captured.
    pub whole: bool,
    /// The message's length from its header.
    pub len: u64,
}

/// What [`Stream::next`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next<'a> {
    /// A message, in stream order.
    Msg(Msg<'a>),
    /// Nothing more until the next piece.
    Wait,
    /// The stream lost its place (a header in a LOST region, a bad
    /// header, too many bytes without one). Reported once; the stream
    /// then ignores everything until [`Stream::restart`].
    Desync,
}

/// One direction's unparsed bytes. See the module doc.
#[derive(Debug, Default)]
pub struct Stream {
    buf: Vec<u8>,
    pos: usize,
    skip: u64,
    /// Bytes not yet seen of a LOST piece that is being applied.
    lost: u64,
    desynced: bool,
}

impl Stream {
    /// A stream at a message boundary.
    pub fn new() -> Stream {
        Stream::default()
    }

    /// Whether the stream has lost its place.
    pub fn desynced(&self) -> bool {
        self.desynced
    }

    /// Whether the stream is at a message boundary with nothing pending:
    /// the next piece starts a message.
    pub fn at_boundary(&self) -> bool {
        !self.desynced && self.pos == self.buf.len() && self.skip == 0
    }

    /// The unparsed bytes (the head of the message in progress).
    pub fn unparsed(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    /// Bytes held (for the connection's memory account).
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Marks the stream lost: everything is dropped until [`restart`](Self::restart).
    pub fn desync(&mut self) {
        self.clear();
        self.desynced = true;
    }

    /// Puts the stream at a message boundary the parser has proved (the
    /// start or the end of a record).
    pub fn restart(&mut self) {
        self.clear();
        self.desynced = false;
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.pos = 0;
        self.skip = 0;
        self.lost = 0;
        if self.buf.capacity() > KEEP_CAPACITY {
            self.buf = Vec::new();
        }
    }

    /// Takes in the next piece. Messages come out of [`next`](Self::next),
    /// which must be called until it says [`Next::Wait`] or
    /// [`Next::Desync`] before the next piece.
    pub fn push(&mut self, piece: Piece<'_>) {
        if self.desynced {
            return;
        }
        match piece {
            Piece::Bytes(mut b) => {
                if self.skip > 0 {
                    let n = usize::try_from(self.skip).unwrap_or(usize::MAX).min(b.len());
                    b = &b[n..];
                    // n <= skip: no underflow.
                    self.skip -= n as u64;
                }
                if self.pos == self.buf.len() {
                    self.buf.clear();
                    self.pos = 0;
                } else if self.pos > 0 {
                    self.buf.drain(..self.pos);
                    self.pos = 0;
                }
                self.buf.extend_from_slice(b);
            }
            Piece::Lost(n) => {
                let n = u64::from(n);
                if self.skip >= n {
                    self.skip -= n;
                } else {
                    self.lost = n - self.skip;
                    self.skip = 0;
                }
            }
        }
    }

    /// The next message, with `frame` reading the unparsed head (it is
    /// called with the head each time; a stateful parser frames the bytes
    /// right after the last message it was given).
    pub fn next(&mut self, frame: impl FnOnce(&[u8]) -> Frame) -> Next<'_> {
        if self.desynced {
            return Next::Wait;
        }
        let avail = self.buf.len() - self.pos;
        if self.lost > 0 {
            // A LOST piece: inside the message in progress, or a desync.
            let lost = std::mem::take(&mut self.lost);
            if avail == 0 {
                self.desync();
                return Next::Desync;
            }
            return match frame(&self.buf[self.pos..]) {
                Frame::Len(len) if len > avail as u64 && len - (avail as u64) >= lost => {
                    self.skip = len - avail as u64 - lost;
                    self.cut(len, avail)
                }
                _ => {
                    self.desync();
                    Next::Desync
                }
            };
        }
        if avail == 0 {
            self.tidy();
            return Next::Wait;
        }
        match frame(&self.buf[self.pos..]) {
            Frame::Len(0) | Frame::Bad => {
                self.desync();
                Next::Desync
            }
            Frame::Len(len) if len <= avail as u64 => {
                // len <= avail: fits usize.
                let start = self.pos;
                self.pos += len as usize;
                Next::Msg(Msg { bytes: &self.buf[start..self.pos], whole: true, len })
            }
            Frame::Len(len) if len > MAX_BUFFERED as u64 => {
                // Too long to hold: its head now, the rest skipped.
                self.skip = len - avail as u64;
                self.cut(len, avail)
            }
            Frame::Len(_) => Next::Wait,
            Frame::Need if avail > MAX_BUFFERED => {
                self.desync();
                Next::Desync
            }
            Frame::Need => Next::Wait,
        }
    }

    /// Gives out the `avail` unparsed bytes as the cut head of a message
    /// of `len` bytes.
    fn cut(&mut self, len: u64, avail: usize) -> Next<'_> {
        let start = self.pos;
        self.pos += avail;
        Next::Msg(Msg { bytes: &self.buf[start..self.pos], whole: false, len })
    }

    fn tidy(&mut self) {
        if self.pos == self.buf.len() && self.buf.capacity() > KEEP_CAPACITY {
            self.buf = Vec::new();
            self.pos = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of `u8 len` + body: the length byte counts itself.
    fn frame(b: &[u8]) -> Frame {
        match b.first() {
            None => Frame::Need,
            Some(0) => Frame::Bad,
            Some(&n) => Frame::Len(u64::from(n) * if n >= 200 { 1000 } else { 1 }),
        }
    }

    fn drain(s: &mut Stream) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        loop {
            match s.next(frame) {
                Next::Msg(m) => out.push((m.bytes.to_vec(), m.whole)),
                Next::Wait => return out,
                Next::Desync => {
                    out.push((b"desync".to_vec(), false));
                    return out;
                }
            }
        }
    }

    #[test]
    fn messages_across_pieces() {
        let mut s = Stream::new();
        s.push(Piece::Bytes(&[3, 1, 2, 2]));
        assert_eq!(drain(&mut s), vec![(vec![3, 1, 2], true)]);
        assert!(!s.at_boundary());
        s.push(Piece::Bytes(&[9]));
        assert_eq!(drain(&mut s), vec![(vec![2, 9], true)]);
        assert!(s.at_boundary());
    }

    #[test]
    fn lost_inside_a_message_skips_its_body() {
        let mut s = Stream::new();
        s.push(Piece::Bytes(&[10, 1, 2]));
        assert_eq!(drain(&mut s), vec![]);
        s.push(Piece::Lost(5));
        assert_eq!(drain(&mut s), vec![(vec![10, 1, 2], false)]);
        s.push(Piece::Bytes(&[7, 8, 2, 5]));
        assert_eq!(drain(&mut s), vec![(vec![2, 5], true)]);
        assert!(s.at_boundary());
    }

    #[test]
    fn lost_past_the_message_is_a_desync() {
        let mut s = Stream::new();
        s.push(Piece::Bytes(&[4, 1]));
        drain(&mut s);
        s.push(Piece::Lost(3));
        assert_eq!(drain(&mut s), vec![(b"desync".to_vec(), false)]);
        assert!(s.desynced());
        s.push(Piece::Bytes(&[2, 2]));
        assert_eq!(drain(&mut s), vec![]);
        s.restart();
        s.push(Piece::Bytes(&[2, 2]));
        assert_eq!(drain(&mut s), vec![(vec![2, 2], true)]);
        // LOST at a boundary: a header was in it.
        s.push(Piece::Lost(1));
        assert_eq!(drain(&mut s), vec![(b"desync".to_vec(), false)]);
    }

    #[test]
    fn huge_messages_come_out_cut_and_memory_stays_bounded() {
        let mut s = Stream::new();
        // 250_000 bytes declared.
        s.push(Piece::Bytes(&[250, 1, 2]));
        assert_eq!(drain(&mut s), vec![(vec![250, 1, 2], false)]);
        let body = vec![7u8; 60_000];
        for _ in 0..4 {
            s.push(Piece::Bytes(&body));
            assert_eq!(drain(&mut s), vec![]);
            assert!(s.held() <= MAX_BUFFERED + 65_536);
        }
        s.push(Piece::Lost(9_997));
        s.push(Piece::Bytes(&[2, 0]));
        assert_eq!(drain(&mut s), vec![(vec![2, 0], true)]);
    }
}
