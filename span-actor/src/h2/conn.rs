//! [`H2Conn`]: one HTTP/2 connection, frame pieces in, finished streams out.
//!
//! Per direction: the frame in progress (its payload may straddle
//! syscalls), the header block in progress (HEADERS or PUSH_PROMISE until
//! END_HEADERS) and the HPACK decoder of the peer that writes in that
//! direction. Per connection: the open streams, at most [`MAX_STREAMS`],
//! keyed by id (ids grow, so the smallest is the oldest).
//!
//! What a connection holds is counted as it changes
//! ([`H2Conn::state_bytes`]: streams with their header values, HPACK
//! tables, frames and header blocks in progress), so that the span-actor
//! can bound all connections together, not only each one.

use std::collections::BTreeMap;

use super::frames::{self, CONTINUATION, DATA, GOAWAY, HEADERS, PUSH_PROMISE, RST_STREAM, SETTINGS, WINDOW_UPDATE};
use super::hpack::{self, DecodeError, Header};
use super::{request_dir, Dir, DropReason, End, Grpc, H2Stats, Piece, Role, StreamDone};

/// Open streams kept per connection; past it the oldest is dropped
/// (counted), so streams whose end was never seen cannot pile up.
pub const MAX_STREAMS: usize = 1024;

/// Bytes of one header block kept for decoding; the rest is treated as
/// not captured (the block is decoded as far as it goes, counted).
pub const MAX_HEADER_BLOCK: usize = 64 * 1024;

/// Bytes kept of SETTINGS, RST_STREAM and GOAWAY payloads (GOAWAY debug
/// data is not needed; SETTINGS has 6 bytes per setting).
const MAX_CONTROL_PAYLOAD: usize = 1024;

/// Kept length of `:path` (with the query); longer paths are cut, as
/// HTTP/1 paths are cut by the capture length.
const MAX_PATH: usize = 2048;

/// Kept length of the other header values.
const MAX_VALUE: usize = 512;

/// Kept length of a decoded `grpc-message`.
const MAX_GRPC_MESSAGE: usize = 1024;

/// A header value as far as it is known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Val {
    /// Not in the block.
    #[default]
    Absent,
    Known(String),
    /// Maybe in the block, as a header whose name could not be decoded.
    Unknown,
}

impl Val {
    fn known(&self) -> Option<&str> {
        match self {
            Val::Known(s) => Some(s),
            _ => None,
        }
    }

    fn into_option(self) -> Option<String> {
        match self {
            Val::Known(s) => Some(s),
            _ => None,
        }
    }

    fn heap(&self) -> usize {
        match self {
            Val::Known(s) => runtime_kit::memory::allocated(s.capacity()),
            _ => 0,
        }
    }
}

/// The headers of one block that spans need.
#[derive(Debug, Clone, Default)]
struct Fields {
    method: Val,
    path: Val,
    scheme: Val,
    authority: Val,
    host: Val,
    status: Val,
    content_type: Val,
    user_agent: Val,
    traceparent: Val,
    tracestate: Val,
    grpc_status: Val,
    grpc_message: Val,
    /// A regular (non-pseudo) header was seen: pseudo-headers come first
    /// (RFC 9113 8.3), so unknown headers after it are not pseudo-headers.
    regular_seen: bool,
    unknown_pseudo: bool,
    unknown_regular: bool,
}

use crate::text::{clean as text, is_token};

impl Fields {
    fn visit(&mut self, h: Header<'_>) {
        let (Some(name), value) = (h.name, h.value) else {
            self.note_unknown();
            return;
        };
        if !name.starts_with(b":") {
            self.regular_seen = true;
        }
        let (slot, max) = match name {
            b":method" => (&mut self.method, 64),
            b":path" => (&mut self.path, MAX_PATH),
            b":scheme" => (&mut self.scheme, 64),
            b":authority" => (&mut self.authority, MAX_VALUE),
            b":status" => (&mut self.status, 16),
            b"host" => (&mut self.host, MAX_VALUE),
            b"content-type" => (&mut self.content_type, MAX_VALUE),
            b"user-agent" => (&mut self.user_agent, MAX_VALUE),
            b"traceparent" => (&mut self.traceparent, MAX_VALUE),
            b"tracestate" => (&mut self.tracestate, MAX_VALUE),
            b"grpc-status" => (&mut self.grpc_status, 16),
            b"grpc-message" => (&mut self.grpc_message, MAX_GRPC_MESSAGE * 3),
            _ => return,
        };
        if *slot == Val::Absent {
            *slot = match value {
                Some(v) => Val::Known(text(v, max)),
                None => Val::Unknown,
            };
        }
    }

    /// Whether the block begins a request: it carries a `:method` or a
    /// `:path` that was decoded (trailers carry no pseudo-header; a name
    /// that could not be decoded proves nothing).
    fn opens_request(&self) -> bool {
        matches!(self.method, Val::Known(_)) || matches!(self.path, Val::Known(_))
    }

    /// A header whose name is unknown (or the rest of a cut block).
    fn note_unknown(&mut self) {
        if !self.regular_seen {
            self.unknown_pseudo = true;
        }
        self.unknown_regular = true;
    }

    /// Absent fields become unknown where an unknown header could be them.
    fn finish(&mut self) {
        if self.unknown_pseudo {
            for v in [&mut self.method, &mut self.path, &mut self.scheme, &mut self.authority, &mut self.status] {
                if *v == Val::Absent {
                    *v = Val::Unknown;
                }
            }
        }
        if self.unknown_regular {
            for v in [
                &mut self.host,
                &mut self.content_type,
                &mut self.user_agent,
                &mut self.traceparent,
                &mut self.tracestate,
                &mut self.grpc_status,
                &mut self.grpc_message,
            ] {
                if *v == Val::Absent {
                    *v = Val::Unknown;
                }
            }
        }
    }

    fn incomplete(&self) -> bool {
        self.unknown_pseudo || self.unknown_regular
    }

    /// Heap bytes of its values.
    fn heap(&self) -> usize {
        [
            &self.method,
            &self.path,
            &self.scheme,
            &self.authority,
            &self.host,
            &self.status,
            &self.content_type,
            &self.user_agent,
            &self.traceparent,
            &self.tracestate,
            &self.grpc_status,
            &self.grpc_message,
        ]
        .into_iter()
        .map(Val::heap)
        .sum()
    }
}

#[derive(Debug)]
struct Stream {
    start_ns: u64,
    /// `None`: the request HEADERS were never seen.
    req: Option<Fields>,
    /// The final response headers.
    resp: Option<Fields>,
    grpc_status: Val,
    grpc_message: Val,
    req_ended: bool,
    req_body: u64,
    resp_body: u64,
    incomplete: bool,
    /// The stream ended before its request was seen: how and when. It
    /// waits for the request (see [`H2Conn::end_stream`]).
    ended: Option<(End, u64)>,
}

/// What a stream's slot in the map costs besides its box: a B-tree node
/// holds 11 ids and boxes (12 bytes each) in ~150 bytes, and a node may be
/// left with 5 (ids only grow: every split leaves the left node half full).
const STREAM_SLOT: usize = 32;

/// What a stream costs besides its header values: its box, as allocated,
/// and its slot in the map. (Boxed: a stream is ~700 bytes, and half-full
/// nodes of inline streams cost twice what they held: 48 connections of
/// 1,000 streams took 22 MiB more than was counted.)
fn stream_overhead() -> usize {
    runtime_kit::memory::allocated(std::mem::size_of::<Stream>()) + STREAM_SLOT
}

impl Stream {
    /// Bytes it holds (see [`stream_overhead`]).
    fn bytes(&self) -> usize {
        stream_overhead()
            + self.req.as_ref().map_or(0, Fields::heap)
            + self.resp.as_ref().map_or(0, Fields::heap)
            + self.grpc_status.heap()
            + self.grpc_message.heap()
    }

    fn new(start_ns: u64, req: Option<Fields>) -> Self {
        let incomplete = req.as_ref().is_some_and(Fields::incomplete);
        Stream {
            start_ns,
            req,
            resp: None,
            grpc_status: Val::Absent,
            grpc_message: Val::Absent,
            req_ended: false,
            req_body: 0,
            resp_body: 0,
            incomplete,
            ended: None,
        }
    }
}

/// A frame header as the kernel shipped it (the stream's reserved bit
/// cleared).
#[derive(Debug, Clone, Copy)]
struct FrameHead {
    typ: u8,
    flags: u8,
    stream: u32,
    len: u32,
}

/// The frame whose payload is being received.
#[derive(Debug)]
struct Frame {
    typ: u8,
    flags: u8,
    stream: u32,
    len: u32,
    /// Payload bytes gone by (captured or not).
    seen: u64,
    /// The captured payload, contiguous from its start (types whose
    /// payload is needed only).
    buf: Vec<u8>,
    /// Payload bytes went by uncaptured: `buf` is a prefix.
    cut: bool,
    ts: u64,
}

#[derive(Debug)]
struct Block {
    stream: u32,
    push: bool,
    end_stream: bool,
    buf: Vec<u8>,
    /// Part of the block was not captured: `buf` is a prefix of it.
    cut: bool,
    ts: u64,
}

#[derive(Debug)]
struct Side {
    frame: Option<Frame>,
    block: Option<Block>,
    hpack: hpack::Decoder,
}

impl Side {
    fn new(mid_connection: bool) -> Self {
        Side { frame: None, block: None, hpack: hpack::Decoder::new(mid_connection) }
    }

    /// Heap bytes: the HPACK table and the frame and block in progress.
    fn bytes(&self) -> usize {
        use runtime_kit::memory::allocated;
        self.hpack.bytes()
            + self.frame.as_ref().map_or(0, |f| allocated(f.buf.capacity()))
            + self.block.as_ref().map_or(0, |b| allocated(b.buf.capacity()))
    }
}

/// The open streams by id, with the bytes they hold kept up to date by
/// every change (insertions, removals, and changes through [`Streams::with`]).
#[derive(Debug, Default)]
struct Streams {
    map: BTreeMap<u32, Box<Stream>>,
    bytes: usize,
}

impl Streams {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn contains_key(&self, id: &u32) -> bool {
        self.map.contains_key(id)
    }

    fn get(&self, id: u32) -> Option<&Stream> {
        self.map.get(&id).map(|s| &**s)
    }

    fn range(&self, r: impl std::ops::RangeBounds<u32>) -> impl Iterator<Item = (&u32, &Stream)> {
        self.map.range(r).map(|(id, s)| (id, &**s))
    }

    fn insert(&mut self, id: u32, s: Stream) {
        self.bytes += s.bytes();
        if let Some(old) = self.map.insert(id, Box::new(s)) {
            self.bytes -= old.bytes();
        }
    }

    fn remove(&mut self, id: &u32) -> Option<Stream> {
        let s = self.map.remove(id)?;
        self.bytes -= s.bytes();
        Some(*s)
    }

    fn pop_first(&mut self) -> Option<(u32, Stream)> {
        let (id, s) = self.map.pop_first()?;
        self.bytes -= s.bytes();
        Some((id, *s))
    }

    /// Every stream, taken out.
    fn take(&mut self) -> impl Iterator<Item = (u32, Stream)> {
        self.bytes = 0;
        std::mem::take(&mut self.map).into_iter().map(|(id, s)| (id, *s))
    }

    /// Changes stream `id` with `f`, counting what it holds afterwards.
    fn with<R>(&mut self, id: u32, f: impl FnOnce(&mut Stream) -> R) -> Option<R> {
        let s = self.map.get_mut(&id)?;
        let before = s.bytes();
        let r = f(s);
        self.bytes = self.bytes - before + s.bytes();
        Some(r)
    }
}

/// One HTTP/2 connection as seen by the traced process.
#[derive(Debug)]
pub struct H2Conn {
    role: Role,
    /// Indexed by [`Dir`]: Recv = 0, Send = 1.
    sides: [Side; 2],
    streams: Streams,
    /// Highest client-initiated stream id whose request was seen.
    max_request_id: u32,
    /// Followed from its start: every stream the client opened was seen
    /// opening, in order (a request direction's records come in the order
    /// its bytes went).
    from_start: bool,
    /// Streams ended whose request may still come (`Stream::ended`).
    parked: usize,
    given_up: bool,
    stats: H2Stats,
}

fn idx(dir: Dir) -> usize {
    match dir {
        Dir::Recv => 0,
        Dir::Send => 1,
    }
}

impl H2Conn {
    /// A connection where the traced process is `role`. `mid_connection`:
    /// it was already running when tracing began (its HPACK tables have
    /// an unknown prefix; streams already open are not seen).
    pub fn new(role: Role, mid_connection: bool) -> Self {
        H2Conn {
            role,
            sides: [Side::new(mid_connection), Side::new(mid_connection)],
            streams: Streams::default(),
            max_request_id: 0,
            from_start: !mid_connection,
            parked: 0,
            given_up: false,
            stats: H2Stats::default(),
        }
    }

    /// The traced process's side.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Whether the connection was given up (framing lost).
    pub fn is_given_up(&self) -> bool {
        self.given_up
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Bytes this connection holds: its struct, its open streams with their
    /// header values, its HPACK tables, the frames and header blocks in
    /// progress. Kept as they change (no walk over the streams).
    pub fn state_bytes(&self) -> usize {
        runtime_kit::memory::allocated(std::mem::size_of::<H2Conn>())
            + self.streams.bytes
            + self.sides.iter().map(Side::bytes).sum::<usize>()
    }

    /// [`H2Conn::state_bytes`] counted afresh, stream by stream (tests and
    /// fuzzing check the running count against it).
    pub fn state_bytes_recounted(&self) -> usize {
        runtime_kit::memory::allocated(std::mem::size_of::<H2Conn>())
            + self.streams.map.values().map(|s| s.bytes()).sum::<usize>()
            + self.sides.iter().map(Side::bytes).sum::<usize>()
    }

    /// The counts since the last call, reset.
    pub fn take_stats(&mut self) -> H2Stats {
        std::mem::take(&mut self.stats)
    }

    /// Stream 1's request, already seen as an HTTP/1 request with
    /// `Upgrade: h2c` (RFC 7540 3.2): its response comes as HTTP/2 frames.
    /// `target` is the request target (path and query); `headers` are the
    /// request's header lines. The pieces fed afterwards start after the
    /// `101 Switching Protocols` response (server side) and after the
    /// client preface (client side), like on any other connection.
    pub fn seed_upgrade(&mut self, ts: u64, method: &[u8], target: &[u8], headers: &[(&[u8], &[u8])]) {
        let mut f = Fields::default();
        f.visit(Header { name: Some(b":method"), value: Some(method) });
        f.visit(Header { name: Some(b":path"), value: Some(target) });
        for (n, v) in headers {
            let lower = n.to_ascii_lowercase();
            // Pseudo-header names cannot come from HTTP/1 header lines.
            if !lower.starts_with(b":") {
                f.visit(Header { name: Some(&lower), value: Some(v) });
            }
        }
        f.finish();
        let mut s = Stream::new(ts, Some(f));
        s.req_ended = true;
        self.streams.insert(1, s);
        self.max_request_id = self.max_request_id.max(1);
    }

    /// The pieces of one syscall in direction `dir` at `ts` (monotonic ns).
    /// Streams that end are appended to `out`.
    pub fn feed(&mut self, dir: Dir, ts: u64, pieces: &[Piece], out: &mut Vec<StreamDone>) {
        for p in pieces {
            if self.given_up {
                return;
            }
            match p {
                Piece::Frame { typ, flags, stream, len, payload } => {
                    if self.sides[idx(dir)].frame.is_some() {
                        // The kernel moved to the next frame: the rest of
                        // this one's payload went by uncaptured.
                        self.finish_frame(dir, ts, true, out);
                    }
                    let head = FrameHead { typ: *typ, flags: *flags, stream: *stream & 0x7fff_ffff, len: *len };
                    self.start_frame(dir, ts, head, payload, out);
                }
                Piece::More { payload } => self.more(dir, ts, payload, out),
                Piece::Lost { bytes } => self.lost(dir, ts, *bytes, out),
            }
        }
    }

    /// The connection closed at `ts`: every open stream ends.
    pub fn close(&mut self, ts: u64, out: &mut Vec<StreamDone>) {
        self.parked = 0;
        for (id, mut s) in self.streams.take() {
            // A parked stream ends as it ended first; its request will not come.
            let (end, at) = s.ended.take().unwrap_or((End::Closed, ts));
            self.finish(id, s, end, at, out);
        }
    }

    /// Frame boundaries are lost: drop every stream (counted) and ignore
    /// the connection from now on.
    fn give_up(&mut self) {
        if self.given_up {
            return;
        }
        self.given_up = true;
        self.stats.connections_given_up += 1;
        for _ in 0..self.streams.len() {
            self.stats.drop(DropReason::FramingLost);
        }
        drop(self.streams.take());
        self.parked = 0;
        for s in &mut self.sides {
            s.frame = None;
            s.block = None;
        }
    }

    fn start_frame(&mut self, dir: Dir, ts: u64, head: FrameHead, payload: &[u8], out: &mut Vec<StreamDone>) {
        let FrameHead { typ, flags, stream, len } = head;
        if len > frames::MAX_FRAME_LEN || payload.len() as u64 > u64::from(len) {
            self.give_up();
            return;
        }
        // Inside a header block only its CONTINUATIONs may come (RFC 9113
        // 6.10); anything else means the frames are not what they seem.
        let in_block = self.sides[idx(dir)].block.as_ref().map(|b| b.stream);
        match (in_block, typ) {
            (Some(s), CONTINUATION) if s == stream => {}
            (None, CONTINUATION) | (Some(_), _) => {
                self.give_up();
                return;
            }
            _ => {}
        }
        if self.unopened(dir, typ, stream) {
            self.stats.unopened_stream_frames += 1;
            self.give_up();
            return;
        }
        if typ == DATA {
            self.on_data(dir, ts, flags, stream, len, out);
        }
        let keep = if frames::payload_needed(typ) {
            if matches!(typ, HEADERS | CONTINUATION | PUSH_PROMISE) {
                MAX_HEADER_BLOCK
            } else {
                MAX_CONTROL_PAYLOAD
            }
        } else {
            0
        };
        let take = payload.len().min(keep);
        let f = Frame { typ, flags, stream, len, seen: payload.len() as u64, buf: payload[..take].to_vec(), cut: take < payload.len(), ts };
        let done = f.seen == u64::from(len);
        self.sides[idx(dir)].frame = Some(f);
        if done {
            self.finish_frame(dir, ts, false, out);
        }
    }

    /// Whether a frame the client sends can only be on a stream it never
    /// opened: DATA, RST_STREAM and WINDOW_UPDATE need an open (or closed)
    /// stream, and HTTP/2 opens the client's streams in increasing order,
    /// so on a connection followed from its start an odd id above every
    /// request seen names none (a PROTOCOL_ERROR no peer would survive).
    /// Such a header was read where no frame began: the kernel's walk lost
    /// the frame boundaries without knowing it, and what it ships for this
    /// direction from here on is not what was sent.
    fn unopened(&self, dir: Dir, typ: u8, stream: u32) -> bool {
        self.from_start
            && dir == request_dir(self.role)
            && matches!(typ, DATA | RST_STREAM | WINDOW_UPDATE)
            && !stream.is_multiple_of(2)
            && stream > self.max_request_id
    }

    fn more(&mut self, dir: Dir, ts: u64, payload: &[u8], out: &mut Vec<StreamDone>) {
        let Some(f) = self.sides[idx(dir)].frame.as_mut() else {
            // Nothing in progress: the kernel and this tracker disagree on
            // where frames are.
            if !payload.is_empty() {
                self.give_up();
            }
            return;
        };
        let room = u64::from(f.len) - f.seen;
        if payload.len() as u64 > room {
            self.give_up();
            return;
        }
        f.seen += payload.len() as u64;
        if frames::payload_needed(f.typ) && !f.cut {
            let keep =
                if f.typ == HEADERS || f.typ == CONTINUATION || f.typ == PUSH_PROMISE { MAX_HEADER_BLOCK } else { MAX_CONTROL_PAYLOAD };
            let take = payload.len().min(keep.saturating_sub(f.buf.len()));
            f.buf.extend_from_slice(&payload[..take]);
            f.cut = take < payload.len();
        }
        if f.seen == u64::from(f.len) {
            self.finish_frame(dir, ts, false, out);
        }
    }

    fn lost(&mut self, dir: Dir, ts: u64, bytes: u64, out: &mut Vec<StreamDone>) {
        if bytes == 0 {
            return;
        }
        match self.sides[idx(dir)].frame.as_mut() {
            // Inside the payload of the frame in progress: framing holds.
            Some(f) if bytes <= u64::from(f.len) - f.seen => {
                f.seen += bytes;
                f.cut = true;
                if f.seen == u64::from(f.len) {
                    self.finish_frame(dir, ts, false, out);
                }
            }
            _ => self.give_up(),
        }
    }

    /// The frame in progress is over (`early`: the next frame began before
    /// its payload was all seen).
    fn finish_frame(&mut self, dir: Dir, ts: u64, early: bool, out: &mut Vec<StreamDone>) {
        let Some(mut f) = self.sides[idx(dir)].frame.take() else {
            return;
        };
        if early {
            f.cut = true;
        }
        match f.typ {
            HEADERS | PUSH_PROMISE | CONTINUATION => {
                let Some(frag) = frames::fragment(f.typ, f.flags, f.len, &f.buf) else {
                    self.give_up();
                    return;
                };
                // `buf` is contiguous from the payload's start: if it reaches the
                // fragment's end, the fragment is whole whatever came after.
                let whole = frag.whole;
                let side = &mut self.sides[idx(dir)];
                if f.typ == CONTINUATION {
                    if let Some(b) = side.block.as_mut() {
                        append(b, frag.bytes, whole);
                    }
                } else {
                    let mut b = Block {
                        stream: f.stream,
                        push: f.typ == PUSH_PROMISE,
                        end_stream: f.typ == HEADERS && f.flags & frames::FLAG_END_STREAM != 0,
                        buf: Vec::new(),
                        cut: false,
                        ts: f.ts,
                    };
                    append(&mut b, frag.bytes, whole);
                    side.block = Some(b);
                }
                if f.flags & frames::FLAG_END_HEADERS != 0 {
                    if let Some(b) = self.sides[idx(dir)].block.take() {
                        self.on_block(dir, b, ts, out);
                    }
                }
            }
            RST_STREAM => {
                let code = frames::rst_code(&f.buf);
                if self.streams.contains_key(&f.stream) {
                    self.end_stream(f.stream, End::Reset { code, by_traced: dir == Dir::Send }, ts, out);
                }
            }
            // Sent by the server: client streams above the last id were
            // never processed.
            GOAWAY if dir != request_dir(self.role) => {
                if let Some((last, code)) = frames::goaway(&f.buf) {
                    let refused: Vec<u32> = self.streams.range(last.saturating_add(1)..).map(|(id, _)| *id).collect();
                    for id in refused {
                        self.end_stream(id, End::GoAway { code }, ts, out);
                    }
                }
            }
            SETTINGS if f.flags & frames::FLAG_ACK == 0 && f.stream == 0 => {
                for (id, v) in frames::settings(&f.buf) {
                    if id == frames::SETTINGS_HEADER_TABLE_SIZE {
                        // The sender's decoder: it decodes the other way.
                        self.sides[idx(dir.flip())].hpack.set_limit(v);
                    }
                }
            }
            _ => {}
        }
    }

    fn on_data(&mut self, dir: Dir, ts: u64, flags: u8, stream: u32, len: u32, out: &mut Vec<StreamDone>) {
        let req = dir == request_dir(self.role);
        let end = flags & frames::FLAG_END_STREAM != 0;
        let seen = self.streams.with(stream, |s| {
            if req {
                s.req_body += u64::from(len);
                s.req_ended |= end;
            } else {
                s.resp_body += u64::from(len);
            }
        });
        if seen.is_some() && !req && end {
            self.end_stream(stream, End::Complete, ts, out);
        }
    }

    /// A whole header block (or as much of it as was captured).
    fn on_block(&mut self, dir: Dir, b: Block, ts: u64, out: &mut Vec<StreamDone>) {
        let mut fields = Fields::default();
        let r = self.sides[idx(dir)].hpack.decode(&b.buf, !b.cut, |h| fields.visit(h));
        match r {
            Ok(()) => {}
            Err(DecodeError::Truncated) => {
                self.stats.header_blocks_truncated += 1;
                fields.note_unknown();
            }
            Err(DecodeError::Invalid) => {
                self.stats.hpack_errors += 1;
                fields.note_unknown();
            }
        }
        fields.finish();
        if b.push || b.stream == 0 {
            // PUSH_PROMISE: decoded only to keep the table in step.
            return;
        }
        let id = b.stream;
        if dir == request_dir(self.role) {
            // A new client stream: odd, above every id seen.
            let new = !id.is_multiple_of(2) && id > self.max_request_id;
            if !new && !id.is_multiple_of(2) && fields.opens_request() && self.streams.get(id).is_none_or(|s| s.req.is_none()) {
                // A request's first block (trailers carry no pseudo-header)
                // at or below a stream already opened: the blocks did not
                // come in the order they were sent, nor did the decoder read
                // them in it, so any value it reads from here on may be
                // another header's. Attached by its id it could make a wrong
                // span; nothing of the connection is trusted any more.
                self.stats.requests_out_of_order += 1;
                self.give_up();
                return;
            }
            if self.streams.contains_key(&id) {
                if !new {
                    // Request trailers.
                    self.streams.with(id, |s| s.req_ended |= b.end_stream);
                    return;
                }
                // Its response came first (see `end_stream`).
                self.streams.with(id, |s| {
                    s.incomplete |= fields.incomplete();
                    s.req = Some(fields);
                    s.start_ns = s.start_ns.min(b.ts);
                    s.req_ended |= b.end_stream;
                });
            } else if new {
                self.make_room();
                let mut s = Stream::new(b.ts, Some(fields));
                s.req_ended = b.end_stream;
                self.streams.insert(id, s);
            } else {
                return;
            }
            self.max_request_id = id;
            self.settle_parked(id, out);
            return;
        }
        // The response side.
        if id.is_multiple_of(2) {
            return; // a pushed stream's response
        }
        if !self.streams.contains_key(&id) {
            // Its request was never seen: tracked so it is counted once.
            self.make_room();
            self.streams.insert(id, Stream::new(b.ts, None));
        }
        let informational = fields.status.known().and_then(|v| v.parse::<u16>().ok()).is_some_and(|c| (100..200).contains(&c));
        let interim = self.streams.with(id, |s| {
            s.incomplete |= fields.incomplete();
            if s.resp.is_none() {
                if informational && !b.end_stream {
                    return true;
                }
                take_grpc(s, &mut fields);
                s.resp = Some(fields);
            } else {
                take_grpc(s, &mut fields);
            }
            false
        });
        if interim != Some(false) {
            return;
        }
        if b.end_stream {
            self.end_stream(id, End::Complete, ts, out);
        }
    }

    /// Keeps at most [`MAX_STREAMS`] - 1 streams before an insertion.
    fn make_room(&mut self) {
        while self.streams.len() >= MAX_STREAMS {
            if let Some((_, s)) = self.streams.pop_first() {
                self.parked -= usize::from(s.ended.is_some());
                self.stats.drop(DropReason::TooManyStreams);
            }
        }
    }

    /// The stream ends. One whose request was not seen yet, and may still
    /// come, waits for it: the send hooks fire when a send is over, so on a
    /// client whose reading thread is not its writing thread (gRPC, Go)
    /// the answer to a request can be read, and reported, before the send
    /// of that request is. The bytes of one direction are reported in
    /// order, so the request of a stream below one whose request was seen
    /// will not come any more (`settle_parked`).
    fn end_stream(&mut self, id: u32, end: End, ts: u64, out: &mut Vec<StreamDone>) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        if let Some((first, at)) = s.ended.take() {
            // Parked; closed now: it ends as it ended first.
            self.parked -= 1;
            self.finish(id, s, first, at, out);
            return;
        }
        if s.req.is_none() && id > self.max_request_id {
            s.ended = Some((end, ts));
            self.parked += 1;
            self.streams.insert(id, s);
            return;
        }
        self.finish(id, s, end, ts, out);
    }

    /// The request of `id` was seen: parked streams up to it are over
    /// (`id`'s own with its request, those below it without).
    fn settle_parked(&mut self, id: u32, out: &mut Vec<StreamDone>) {
        if self.parked == 0 {
            return;
        }
        let over: Vec<u32> = self.streams.range(..=id).filter(|(_, s)| s.ended.is_some()).map(|(k, _)| *k).collect();
        for k in over {
            if let Some(mut s) = self.streams.remove(&k) {
                if let Some((end, at)) = s.ended.take() {
                    self.parked -= 1;
                    self.finish(k, s, end, at, out);
                }
            }
        }
    }

    fn finish(&mut self, id: u32, s: Stream, end: End, ts: u64, out: &mut Vec<StreamDone>) {
        match done(id, self.role, s, end, ts) {
            Ok(d) => out.push(d),
            Err(reason) => self.stats.drop(reason),
        }
    }
}

/// Appends a fragment to a block; once a part is missing nothing after it
/// can be appended (it would not be contiguous).
fn append(b: &mut Block, frag: &[u8], whole: bool) {
    if b.cut {
        return;
    }
    let take = frag.len().min(MAX_HEADER_BLOCK - b.buf.len());
    b.buf.extend_from_slice(&frag[..take]);
    if take < frag.len() || !whole {
        b.cut = true;
    }
}

fn take_grpc(s: &mut Stream, f: &mut Fields) {
    // The first known value wins; an unknown one waits for a known one.
    if s.grpc_status.known().is_none() && f.grpc_status != Val::Absent {
        s.grpc_status = std::mem::take(&mut f.grpc_status);
    }
    if s.grpc_message.known().is_none() && f.grpc_message != Val::Absent {
        s.grpc_message = std::mem::take(&mut f.grpc_message);
    }
}

/// Whether a content-type is gRPC's (`application/grpc`, `+proto`, ...).
pub fn is_grpc_content_type(ct: &str) -> bool {
    let ct = ct.trim().to_ascii_lowercase();
    ct == "application/grpc" || ct.starts_with("application/grpc+") || ct.starts_with("application/grpc;")
}

/// `/package.Service/Method` split, if the path has gRPC's shape.
pub fn grpc_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix('/')?;
    let (service, method) = rest.split_once('/')?;
    if service.is_empty() || method.is_empty() || method.contains('/') {
        return None;
    }
    Some((service, method))
}

/// `grpc-message` is percent-encoded (gRPC over HTTP/2 spec).
fn percent_decode(s: &str) -> String {
    text(&runtime_kit::text::percent_decode(s.as_bytes()), MAX_GRPC_MESSAGE)
}

/// The finished stream, or why it yields nothing.
fn done(id: u32, role: Role, s: Stream, end: End, end_ns: u64) -> Result<StreamDone, DropReason> {
    let Some(mut req) = s.req else {
        return Err(DropReason::RequestUnseen);
    };
    let method = match std::mem::take(&mut req.method) {
        Val::Known(m) if !m.is_empty() && m.len() <= 32 && m.bytes().all(is_token) => m,
        Val::Unknown => return Err(DropReason::MethodUnknown),
        _ => return Err(DropReason::Malformed),
    };
    let full_path = match std::mem::take(&mut req.path) {
        Val::Known(p) if !p.is_empty() => p,
        Val::Absent if method == "CONNECT" => String::new(),
        Val::Unknown => return Err(DropReason::PathUnknown),
        _ => return Err(DropReason::Malformed),
    };
    let mut resp = s.resp;
    let status = match resp.as_mut().map(|r| std::mem::take(&mut r.status)) {
        Some(Val::Known(v)) => match v.parse::<u16>() {
            Ok(c) if (100..1000).contains(&c) && v.len() == 3 => Some(c),
            _ => return Err(DropReason::Malformed),
        },
        Some(Val::Unknown) => return Err(DropReason::StatusUnknown),
        Some(Val::Absent) => return Err(DropReason::Malformed),
        // No response headers: only a stream cut short has none.
        None if end == End::Complete => return Err(DropReason::Malformed),
        None => None,
    };
    let (path, query) = match full_path.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
        None => (full_path, None),
    };
    let req_ct = std::mem::take(&mut req.content_type);
    let resp_ct = resp.as_mut().map(|r| std::mem::take(&mut r.content_type)).unwrap_or_default();
    let content_type = req_ct.known().or(resp_ct.known()).map(str::to_owned);
    let grpc_ct = match req_ct.known() {
        Some(ct) => is_grpc_content_type(ct),
        None => resp_ct.known().is_some_and(is_grpc_content_type),
    };
    let grpc = grpc_ct.then(|| {
        let (service, gmethod) = match grpc_path(&path) {
            Some((sv, m)) => (Some(sv.to_owned()), Some(m.to_owned())),
            None => (None, None),
        };
        Grpc {
            service,
            method: gmethod,
            // A status that is not a number is UNKNOWN, as gRPC clients read it.
            status_code: s.grpc_status.known().map(|v| v.trim().parse::<i32>().unwrap_or(2)),
            message: s.grpc_message.known().map(percent_decode),
        }
    });
    let authority = std::mem::take(&mut req.authority).into_option().or(std::mem::take(&mut req.host).into_option());
    // credentials are never recorded (`user:password@` in an authority)
    let authority = authority.map(|a| crate::http::without_userinfo(&a).0.to_owned());
    Ok(StreamDone {
        stream_id: id,
        role,
        start_ns: s.start_ns,
        end_ns: end_ns.max(s.start_ns),
        method,
        path,
        query,
        scheme: std::mem::take(&mut req.scheme).into_option(),
        authority,
        status,
        content_type,
        user_agent: std::mem::take(&mut req.user_agent).into_option(),
        traceparent: std::mem::take(&mut req.traceparent).into_option(),
        tracestate: std::mem::take(&mut req.tracestate).into_option(),
        grpc,
        end,
        request_body_bytes: s.req_body,
        response_body_bytes: s.resp_body,
        headers_incomplete: s.incomplete,
    })
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn grpc_shapes() {
        assert!(is_grpc_content_type("application/grpc"));
        assert!(is_grpc_content_type("application/grpc+proto"));
        assert!(is_grpc_content_type("Application/GRPC; charset=x"));
        assert!(!is_grpc_content_type("application/grpc-web"));
        assert!(!is_grpc_content_type("application/json"));
        assert_eq!(grpc_path("/helloworld.Greeter/SayHello"), Some(("helloworld.Greeter", "SayHello")));
        assert_eq!(grpc_path("/Greeter/SayHello"), Some(("Greeter", "SayHello")));
        assert_eq!(grpc_path("/a/b/c"), None);
        assert_eq!(grpc_path("/a/"), None);
        assert_eq!(grpc_path("//b"), None);
        assert_eq!(grpc_path("/a"), None);
    }

    #[test]
    fn percent() {
        assert_eq!(percent_decode("not%20found%3A%20x"), "not found: x");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%E2%9C%93"), "\u{2713}");
        assert_eq!(percent_decode("%0a"), "");
    }
}
