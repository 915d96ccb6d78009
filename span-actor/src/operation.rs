//! The one small interface between a protocol and the span path: the
//! protocol's module makes an [`Operation`] of each exchange it saw, and
//! its conventions make the [`SpanParts`] of the operation's [`Call`];
//! [`crate::transform`] turns the rest into a span the same way for every
//! protocol.
//!
//! # Layout
//! - [`Operation`], [`Conn`], [`Call`] (and each family's facts:
//!   [`HttpExchange`] with its [`RpcSpan`], [`DbOp`]): what a protocol
//!   module hands over.
//! - [`SpanParts`]: what a family's conventions make of its call
//!   ([`crate::semconv::Http::judge`], [`crate::db::judge`],
//!   [`crate::messaging::judge`]).
//! - [`Addrs`]: addresses as text, the one thing every family's
//!   conventions share.
//!
//! An operation is one exchange seen from one side (the traced process is
//! the server or the client), finished: who did it ([`Conn`]), where it
//! sits on its connection (what its span and trace ids derive from), when,
//! which server operation it was made while serving (the kernel's parent
//! hint), the trace context it carried in, and what it was ([`Call`]): the
//! protocol's own facts, already judged by the protocol's conventions.
//! Nothing in it is a disguise: an HTTP/2 stream is an HTTP call with
//! version "2", a gRPC call is that plus its [`RpcSpan`].

use std::sync::Arc;

use ipc_schema::{Role, RpcCall, SockAddr, SpanKind, SpanLink, Text, Value};
use rustc_hash::FxHashMap as HashMap;

use crate::db::DbOp;

/// The traced process's end of the connection an operation went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// The connection's number (the loader's, unique in its epoch).
    pub id: u64,
    /// The traced process (tgid) and its start time: with `pid`, a
    /// process's name (pids are reused).
    pub pid: u32,
    pub proc_start_ns: u64,
    /// Its end of the connection, and the other end.
    pub local: SockAddr,
    pub peer: SockAddr,
    /// Over TLS (the plaintext came from the TLS hooks).
    pub tls: bool,
}

impl Conn {
    /// The connection a kernel record names.
    pub fn of(c: &ipc_schema::ConnHead) -> Conn {
        Conn { id: c.conn_id, pid: c.pid, proc_start_ns: c.proc_start_ns, local: c.local, peer: c.peer, tls: c.tls }
    }
}

/// One finished operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The traced process's side: a SERVER or a CLIENT span.
    pub role: Role,
    pub conn: Conn,
    /// Its place on the connection: its span and trace ids derive from
    /// (connection, `seq`, `sub`), so the same operation seen again (a
    /// replay) gets the same ids. `sub` 0 is the first request of a
    /// capture: only those are remembered as parents.
    pub seq: u32,
    pub sub: u32,
    /// CLOCK_MONOTONIC ns of its start and end.
    pub start_mono_ns: u64,
    pub end_mono_ns: u64,
    /// The server operation (connection, seq) this client operation was
    /// made while serving, as the kernel saw it (same thread, in between).
    pub parent: Option<(u64, u32)>,
    /// The W3C `traceparent` it carried in, if any.
    pub traceparent: Option<String>,
    /// A client operation whose `traceparent` the kernel wrote
    /// (`probe.propagate`): the trace id and span id it carried out, which
    /// are this span's.
    pub propagated: Option<(u128, u64)>,
    /// `probe.carrier`: its trace id, span id and parent span id (0: none)
    /// as the kernel decided them: final.
    pub kernel_ids: Option<(u128, u64, u64)>,
    /// A client operation its thread made while serving a server request
    /// and that the kernel did not link to it (several open, or a thread
    /// shared by tasks): linked only where its `traceparent` is one a server
    /// operation of its process carried in (a proxy forwarding it).
    pub unlinked: bool,
    /// What it was.
    pub call: Call,
}

/// What an operation was, by family: each family names its spans, routes
/// them and says whether they failed by its own conventions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// An HTTP exchange (HTTP/1.x, or an HTTP/2 stream).
    Http(HttpExchange),
    /// A database call (a CLIENT's), already judged by the database
    /// conventions ([`crate::db`]).
    Db(Box<DbOp>),
    /// A messaging call (a broker's client's: a publish, a delivery, a
    /// settle...), read off the wire ([`crate::messaging`]).
    Messaging(Box<crate::messaging::MsgOp>),
}

/// An HTTP request and its answer, of any version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpExchange {
    /// The method as sent (`semconv::method` makes `_OTHER` of the rest).
    pub method: String,
    /// `url.path` (empty for CONNECT).
    pub path: String,
    /// `url.query`, without `?`, not yet redacted.
    pub query: Option<String>,
    /// The authority the client addressed (an absolute-form target's or
    /// CONNECT's, else `Host` or `:authority`), without user information:
    /// `server.address` and `server.port`.
    pub authority: Option<String>,
    /// `url.scheme` when the request says it (`:scheme`); else `https`
    /// over TLS, `http` otherwise.
    pub scheme: Option<String>,
    /// `network.protocol.version`.
    pub version: &'static str,
    /// `user_agent.original`.
    pub user_agent: Option<String>,
    /// The final status; `None` when the exchange ended (reset, refused,
    /// closed) before one: an error of type `_OTHER`.
    pub status: Option<u16>,
    /// Set for a remote procedure call over it (gRPC): its conventions
    /// name the span and say whether it failed, instead of HTTP's.
    pub rpc: Option<Box<RpcSpan>>,
}

/// What the RPC conventions make of a call: decided once, by the protocol
/// module ([`crate::h2::grpc`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcSpan {
    /// The span name.
    pub name: Text,
    /// Span status ERROR.
    pub error: bool,
    /// The span's RPC attributes (they replace any other protocol
    /// attribute; `error.type` among them replaces HTTP's).
    pub attributes: Vec<(Text, Value<Text>)>,
    /// The decisions the exporter's RPC metrics take as data.
    pub call: RpcCall<Text>,
}

/// What a call's conventions make of it: the span's parts that differ by
/// protocol (the span path adds those every span has: ids, kind, times,
/// the peer's port, the trace).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanParts {
    /// The span kind, when the call's conventions decide it (a messaging
    /// call's: PRODUCER, CONSUMER or CLIENT by its operation type);
    /// `None`: the traced process's side (SERVER or CLIENT).
    pub kind: Option<SpanKind>,
    /// The span name.
    pub name: Text,
    /// Span status ERROR.
    pub error: bool,
    /// `server.address` and `server.port`.
    pub server_address: Option<Text>,
    pub server_port: u16,
    /// `network.peer.address`.
    pub peer_address: Text,
    /// Whether the span is exported, and counted in the metrics (a route's
    /// settings may keep either).
    pub export_trace: bool,
    pub export_metrics: bool,
    /// Attributes beside those its call carries.
    pub attributes: Vec<(Text, Value<Text>)>,
    /// Spans it links to (a messaging call's producers, from the trace
    /// contexts its messages carried), at most [`ipc_schema::MAX_LINKS`].
    pub links: Vec<SpanLink>,
    /// What it was, as the span carries it.
    pub call: ipc_schema::Call<Text>,
}

impl SpanParts {
    /// A call a client made to `conn`'s peer, its server (a database's, a
    /// broker's): named `name`, failed when `error`, exported and counted,
    /// nothing besides its call (`kind` and `links` as [`SpanParts`] says).
    #[inline]
    pub fn to_peer(conn: &Conn, addrs: &mut Addrs, name: Text, error: bool, call: ipc_schema::Call<Text>) -> SpanParts {
        let peer_ip = addrs.text(&conn.peer);
        SpanParts {
            kind: None,
            name,
            error,
            server_address: Some(peer_ip.clone()),
            server_port: conn.peer.port,
            peer_address: peer_ip,
            export_trace: true,
            export_metrics: true,
            attributes: Vec::new(),
            links: Vec::new(),
            call,
        }
    }
}

/// Addresses whose text form is remembered.
pub const ADDRS: usize = 4096;

/// Addresses as text, each formatted once (the same few peers send most
/// requests; formatting is costly) and shared by the spans that name it
/// (a clone is a reference count). Bounded: past [`ADDRS`] it starts over.
#[derive(Default)]
pub struct Addrs {
    texts: HashMap<(bool, u128), Arc<str>>,
}

impl Addrs {
    /// `a`'s address (not its port) as text.
    pub fn text(&mut self, a: &SockAddr) -> Text {
        if let Some(s) = self.texts.get(&(a.v6, a.ip)) {
            return Text::Shared(s.clone());
        }
        let s: Arc<str> = a.ip_addr().to_string().into();
        if self.texts.len() >= ADDRS {
            self.texts.clear();
        }
        self.texts.insert((a.v6, a.ip), s.clone());
        Text::Shared(s)
    }
}
