//! HTTP/2 and gRPC in user space: frame pieces captured by the kernel in,
//! one [`StreamDone`] per finished stream out.
//!
//! The kernel walks the frames of every read and write on an HTTP/2
//! connection and hands over, per syscall and direction, the frame headers
//! it saw and the first bytes of the payloads that matter (header blocks,
//! RST_STREAM, GOAWAY, SETTINGS). [`H2Conn`] follows one connection: it
//! reassembles header blocks (HEADERS + CONTINUATION, padding and priority
//! stripped), decodes them with a per-direction HPACK table, and delimits
//! each stream from its first request HEADERS to the response's
//! END_STREAM (or RST_STREAM, GOAWAY, close).
//!
//! **Never a wrong method or path.** A connection that was running before
//! tracing began, or a direction that lost bytes, has an HPACK table with
//! an unknown prefix; [`hpack`] reports references into it as unknown, and
//! a stream whose `:method`, `:path` or `:status` is unknown produces no
//! [`StreamDone`] (counted in [`H2Stats`] by [`DropReason`] reason). When the
//! framing itself may be lost (a [`Piece::Lost`] that is not provably
//! inside the current frame, or frames that cannot be: the client's on a
//! stream it never opened, a request below one already opened), the
//! connection is given up: nothing after it can be trusted to be a frame
//! boundary, nor a header block to have been decoded in the order it was
//! sent.
//!
//! # Layout
//! - [`huffman`]: HPACK's Huffman code (RFC 7541 Appendix B).
//! - [`hpack`]: the decoder that knows what it does not know.
//! - [`frames`]: frame types, flags and payload parsing (RFC 9113).
//! - [`record`]: the kernel record's piece bytes into [`Piece`]s (hostile input).
//! - [`conn`]: [`H2Conn`], pieces in, streams out.
//! - [`table`]: every followed connection, bounded (host-wide bytes, the
//!   oldest connection evicted first); records in,
//!   [`Operation`](crate::operation::Operation)s out.
//! - [`grpc`]: the RPC semantic conventions (stable, experimental, dup)
//!   as pure functions: status names, span name, error rules, attributes,
//!   duration metrics.

pub mod conn;
pub mod frames;
pub mod grpc;
pub mod hpack;
pub mod huffman;
pub mod record;
pub mod table;
#[cfg(test)]
mod testenc;
#[cfg(test)]
mod tests;

pub use conn::H2Conn;

/// `network.protocol.version` for spans of HTTP/2 streams.
pub const PROTOCOL_VERSION: &str = "2";

/// Which way the bytes of a syscall went, seen from the traced process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Bytes the traced process read.
    Recv,
    /// Bytes the traced process wrote.
    Send,
}

impl Dir {
    /// The other direction.
    pub fn flip(self) -> Dir {
        match self {
            Dir::Recv => Dir::Send,
            Dir::Send => Dir::Recv,
        }
    }
}

/// The traced process's side of the connection: the side that sent the
/// client preface is the client, and its direction carries the requests.
pub use ipc_schema::Role;

/// The direction requests travel in, seen from the traced process.
pub fn request_dir(role: Role) -> Dir {
    match role {
        Role::Server => Dir::Recv,
        Role::Client => Dir::Send,
    }
}

/// One element of what the kernel saw in a syscall, in byte order. The
/// 24-byte client preface is never part of the pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A frame header at a frame boundary, with the first captured bytes
    /// of its payload (empty for DATA and the other types whose payload
    /// is not needed). `payload.len() < len` means the rest follows in
    /// [`Piece::More`] pieces or was not captured.
    Frame {
        /// Frame type (RFC 9113 section 6).
        typ: u8,
        /// Frame flags.
        flags: u8,
        /// Stream identifier (the reserved bit is ignored).
        stream: u32,
        /// Payload length from the frame header.
        len: u32,
        /// The captured start of the payload.
        payload: Vec<u8>,
    },
    /// More payload of the frame in progress, right after the bytes
    /// captured so far (the frame straddled syscalls).
    More {
        /// The bytes.
        payload: Vec<u8>,
    },
    /// Bytes that went by without being seen. If they lie within the
    /// payload of the frame in progress, framing is intact (only that
    /// payload is incomplete); otherwise the frame boundaries after them
    /// are unknown and the connection is given up.
    Lost {
        /// How many bytes.
        bytes: u64,
    },
}

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The response's END_STREAM.
    Complete,
    /// RST_STREAM with this error code.
    Reset {
        /// RFC 9113 error code (`None`: the payload was not captured).
        code: Option<u32>,
        /// Whether the traced process sent the RST_STREAM (else its peer).
        by_traced: bool,
    },
    /// The server's GOAWAY did not cover this stream (its id is above the
    /// last stream id): the request was never processed.
    GoAway {
        /// RFC 9113 error code of the GOAWAY.
        code: u32,
    },
    /// The connection closed (or was given up) before the stream ended.
    Closed,
}

/// gRPC details of a stream whose content-type is `application/grpc*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grpc {
    /// `package.Service` from the path, if the path has gRPC's shape.
    pub service: Option<String>,
    /// `Method` from the path, if the path has gRPC's shape.
    pub method: Option<String>,
    /// `grpc-status` from the trailers (or a trailers-only response).
    pub status_code: Option<i32>,
    /// `grpc-message`, percent-decoded and bounded.
    pub message: Option<String>,
}

/// A finished stream: what a span needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamDone {
    /// The HTTP/2 stream id.
    pub stream_id: u32,
    /// The traced process's side (SERVER or CLIENT span).
    pub role: Role,
    /// CLOCK_MONOTONIC ns of the syscall that carried the request HEADERS.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns of the syscall that carried the end (response
    /// END_STREAM, RST_STREAM, GOAWAY or the close).
    pub end_ns: u64,
    /// `:method` as sent.
    pub method: String,
    /// `:path` without the query (empty for CONNECT).
    pub path: String,
    /// The query, without `?`.
    pub query: Option<String>,
    /// `:scheme`.
    pub scheme: Option<String>,
    /// `:authority` (or `host`).
    pub authority: Option<String>,
    /// `:status` of the final response; `None` when the stream ended
    /// (reset, refused, closed) before one.
    pub status: Option<u16>,
    /// The request's content-type (the response's when the request has
    /// none).
    pub content_type: Option<String>,
    /// `user-agent`.
    pub user_agent: Option<String>,
    /// `traceparent`.
    pub traceparent: Option<String>,
    /// `tracestate`.
    pub tracestate: Option<String>,
    /// Set for gRPC streams.
    pub grpc: Option<Grpc>,
    /// How the stream ended.
    pub end: End,
    /// Sum of the request's DATA frame lengths (padding included).
    pub request_body_bytes: u64,
    /// Sum of the response's DATA frame lengths (padding included).
    pub response_body_bytes: u64,
    /// Some headers could not be decoded (unknown table entries): the
    /// optional fields above may be missing though sent.
    pub headers_incomplete: bool,
}

/// Why a stream produced no [`StreamDone`]. Labels are fixed, so they can
/// be metric label values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Its request HEADERS were never seen (began before tracing, or lost).
    RequestUnseen,
    /// `:method` refers to HPACK state from before tracing or a gap.
    MethodUnknown,
    /// `:path` refers to HPACK state from before tracing or a gap.
    PathUnknown,
    /// `:status` refers to HPACK state from before tracing or a gap.
    StatusUnknown,
    /// A required pseudo-header is absent or invalid.
    Malformed,
    /// More than [`conn::MAX_STREAMS`] open streams: the oldest went.
    TooManyStreams,
    /// The connection was given up (framing lost) while it was open.
    FramingLost,
}

impl DropReason {
    /// Every reason, in label order.
    pub const ALL: [DropReason; 7] = [
        DropReason::RequestUnseen,
        DropReason::MethodUnknown,
        DropReason::PathUnknown,
        DropReason::StatusUnknown,
        DropReason::Malformed,
        DropReason::TooManyStreams,
        DropReason::FramingLost,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::RequestUnseen => "h2_request_unseen",
            DropReason::MethodUnknown => "h2_method_unknown",
            DropReason::PathUnknown => "h2_path_unknown",
            DropReason::StatusUnknown => "h2_status_unknown",
            DropReason::Malformed => "h2_malformed",
            DropReason::TooManyStreams => "h2_too_many_streams",
            DropReason::FramingLost => "h2_framing_lost",
        }
    }
}

/// Counts of one connection since the last [`H2Conn::take_stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct H2Stats {
    /// Streams dropped, indexed like [`DropReason::ALL`].
    pub dropped: [u64; 7],
    /// Header blocks not captured whole (capture cap, [`Piece::Lost`],
    /// over [`conn::MAX_HEADER_BLOCK`]): decoded as far as they went.
    pub header_blocks_truncated: u64,
    /// Header blocks with invalid HPACK (the table was reset).
    pub hpack_errors: u64,
    /// Connections given up because frame boundaries were lost or the
    /// frames made no sense.
    pub connections_given_up: u64,
    /// Of those, given up at a frame the client sent on a stream it never
    /// opened (DATA, RST_STREAM, WINDOW_UPDATE): its frame boundaries went
    /// out of step unseen (a frame header the kernel's walk lost read on
    /// as another frame, whose "payload" swallowed the requests after it).
    pub unopened_stream_frames: u64,
    /// Of those, given up at a request's first header block whose stream
    /// id is not above every one seen: the request direction's records
    /// came out of the order they were sent in (and the HPACK decoder
    /// read them out of it).
    pub requests_out_of_order: u64,
}

impl H2Stats {
    /// How many streams were dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize]
    }

    pub(crate) fn drop(&mut self, reason: DropReason) {
        self.dropped[reason as usize] += 1;
    }

    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &H2Stats) {
        for (a, b) in self.dropped.iter_mut().zip(other.dropped) {
            *a += b;
        }
        self.header_blocks_truncated += other.header_blocks_truncated;
        self.hpack_errors += other.hpack_errors;
        self.connections_given_up += other.connections_given_up;
        self.unopened_stream_frames += other.unopened_stream_frames;
        self.requests_out_of_order += other.requests_out_of_order;
    }
}
