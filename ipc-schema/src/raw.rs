//! Requests as the kernel saw them: published by `probe-loader`.
//!
//! A [`RawBatch`] keeps its records in their wire layout
//! ([`crate::raw_wire`]): the loader writes each kernel record straight into
//! it, and the span-actor reads [`RawEvent`]s and [`RawH2`]s that borrow the
//! captured bytes from it, so a record costs neither side an allocation.

use serde::{Deserialize, Serialize};

use crate::raw_wire;
use crate::wire::{Records, Section};

/// Which side of the connection the traced process was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// The process received the request and sent the response.
    Server,
    /// The process sent the request and received the response.
    Client,
}

/// An IPv4 or IPv6 endpoint. `ip` holds the address bytes in network order
/// as a big-endian u128 (one msgpack `bin`, not sixteen integers); IPv4
/// addresses use the first 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SockAddr {
    pub v6: bool,
    pub ip: u128,
    pub port: u16,
}

impl SockAddr {
    /// From address bytes as the kernel stores them.
    pub fn from_bytes(v6: bool, bytes: [u8; 16], port: u16) -> Self {
        SockAddr { v6, ip: u128::from_be_bytes(bytes), port }
    }

    /// The address bytes.
    pub fn bytes(&self) -> [u8; 16] {
        self.ip.to_be_bytes()
    }

    /// The address as a standard library value.
    pub fn ip_addr(&self) -> std::net::IpAddr {
        if self.v6 {
            let v6 = std::net::Ipv6Addr::from(self.bytes());
            // v4-mapped addresses (dual-stack sockets) read best as IPv4.
            match v6.to_ipv4_mapped() {
                Some(v4) => std::net::IpAddr::V4(v4),
                None => std::net::IpAddr::V6(v6),
            }
        } else {
            let b = self.bytes();
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]))
        }
    }
}

/// The connection a kernel record is of, and the process and thread whose
/// syscall made it: what every record starts with, whatever its protocol
/// (the kernel's `struct conn_head`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnHead {
    /// Which side of the connection the traced process is on.
    pub role: Role,
    /// Process id (tgid) and thread id of the syscall.
    pub pid: u32,
    pub tid: u32,
    /// The socket's fd in that process; -1 when the syscall gave none.
    pub fd: i32,
    /// Start time of the process (CLOCK_BOOTTIME ns): with `pid`, names a
    /// process even after its pid is reused.
    pub proc_start_ns: u64,
    /// Connection number, unique for the life of one loader instance.
    pub conn_id: u64,
    /// The traced process's end of the connection.
    pub local: SockAddr,
    /// The other end.
    pub peer: SockAddr,
    /// The connection is TLS: the bytes are the plaintext the TLS library
    /// handed over (an HTTP span's `url.scheme` is `https`).
    pub tls: bool,
}

/// One HTTP/1.x request/response exchange, or (with `orphan`) a response
/// whose request was pipelined behind an earlier one on the same connection.
/// `B` holds the captured bytes: owned (`Vec<u8>`, the default) where an
/// event is made by hand, borrowed (`&[u8]`) where it is read from a batch
/// or a kernel record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent<B = Vec<u8>> {
    /// The connection, and the thread that handled the request.
    pub conn: ConnHead,
    /// Request number on the connection, from 1.
    pub seq: u32,
    /// For a client request made while the same thread served a request
    /// (and no other): that server request's (conn_id, seq). For a server
    /// request sent by a client request on this host (the other end of the
    /// same TCP connection): that client request's (conn_id, seq).
    pub parent: Option<(u64, u32)>,
    /// CLOCK_MONOTONIC ns: request began to arrive (server) or was sent (client).
    pub start_mono_ns: u64,
    /// CLOCK_MONOTONIC ns: the response began.
    pub end_mono_ns: u64,
    /// Response status code.
    pub status: u16,
    /// Request bytes seen before the response began (may exceed `request`).
    pub request_len: u32,
    /// More request bytes arrived than were captured.
    pub truncated: bool,
    /// A response with no request of its own in the kernel: pipelining.
    pub orphan: bool,
    /// The first request bytes: request line, headers, maybe body.
    pub request: B,
    /// A `101` answering an `Upgrade: h2c` request: no span of its own; the
    /// connection goes on as HTTP/2 (its next [`RawH2`] has `upgrade`) and
    /// this request is its stream 1.
    pub h2c: bool,
    /// A client request made by a thread that was serving a server request
    /// and not linked to it (the kernel could not tell which it served):
    /// the span-actor links it where its own `traceparent` is one a server
    /// request of the same process carried in (a proxy forwarding it).
    pub unlinked: bool,
    /// A client request into which the kernel wrote a `traceparent`
    /// (`probe.propagate`): the trace id and span id it carries, which are
    /// the client span's (the server it called names that span as its
    /// parent).
    pub propagated: Option<(u128, u64)>,
    /// `probe.carrier`: the span's trace id, span id and parent span id (0:
    /// none) as the kernel decided them at the request's start (and, for a
    /// call made while serving, carried to the next host): final, over
    /// every other way spans connect.
    pub kernel_ids: Option<(u128, u64, u64)>,
}

/// What the kernel saw of one send or receive on an HTTP/2 connection: the
/// frame pieces in `pieces`, as the kernel wrote them (`H2P_*` tags of
/// probe-loader's `bpf/ringtail.h`; the span-actor parses them, as hostile
/// bytes). With `close`, the connection ended and `pieces` is empty. `B`
/// as in [`RawEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawH2<B = Vec<u8>> {
    /// The connection (its role `Server` if the process received the
    /// client preface), and the syscall's thread.
    pub conn: ConnHead,
    /// CLOCK_MONOTONIC ns when the syscall completed.
    pub mono_ns: u64,
    /// The traced process wrote these bytes (else it read them).
    pub send: bool,
    /// The connection's first record: the client preface was in it, or
    /// (with `upgrade`) the `101` of an `Upgrade: h2c`.
    pub start: bool,
    /// The connection closed.
    pub close: bool,
    /// With `start`: HTTP/2 after a `101` to `Upgrade: h2c`; stream 1's
    /// request is the [`RawEvent`] with `h2c` before it.
    pub upgrade: bool,
    /// The client connection on this host that opened this one (the other
    /// end of the same TCP connection: the kernel's same-host join), when
    /// known; each stream's server span joins that connection's client
    /// stream of the same id.
    pub caller: Option<u64>,
    /// The frame pieces (at most the kernel's `H2_DATA_LEN` bytes).
    pub pieces: B,
}

/// What the kernel saw of one send or receive on a connection of a
/// protocol that is not HTTP (a configured port's: databases, brokers):
/// the syscall's bytes as `pieces` (`PIECE_MORE`, `PIECE_LOST`,
/// `PIECE_GAP` of probe-loader's `bpf/ringtail.h`: its head, how many
/// bytes went by unseen, its tail, and the bytes of records the ring had
/// no room for). Which protocol it speaks is the span-actor's to tell; the
/// process is the client. With `close`, the connection ended and `pieces`
/// is empty. `B` as in [`RawEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawStream<B = Vec<u8>> {
    /// The connection, and the syscall's thread.
    pub conn: ConnHead,
    /// CLOCK_MONOTONIC ns when the syscall completed.
    pub mono_ns: u64,
    /// The traced process wrote these bytes (else it read them).
    pub send: bool,
    /// The connection's first record (its first bytes are in it).
    pub start: bool,
    /// The connection closed.
    pub close: bool,
    /// What a send says of the server request its thread was serving.
    pub links: Links,
    /// The pieces (at most the kernel's `STREAM_DATA_LEN` bytes).
    pub pieces: B,
}

/// What a call's send says of the server request its thread was serving,
/// by the rules of a client request's [`RawEvent::parent`] and
/// [`RawEvent::unlinked`] (a receive says nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Links {
    /// That server request's (conn_id, seq).
    pub parent: Option<(u64, u32)>,
    /// The thread was serving and was not linked.
    pub unlinked: bool,
}

/// What is known about a traced process, sent with every batch that has
/// events of it (a receiver that restarted learns it again at once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub proc_start_ns: u64,
    /// Kernel command name (15 characters at most); always known.
    pub comm: String,
    /// Basename of the executable, when /proc could tell.
    pub exe_name: Option<String>,
    /// Full path of the executable, when /proc could tell.
    pub exe_path: Option<String>,
    /// `OTEL_SERVICE_NAME` from the process environment, when readable.
    pub env_service_name: Option<String>,
    /// `OTEL_RESOURCE_ATTRIBUTES` from the process environment, when readable.
    pub env_resource_attributes: Option<String>,
    /// The id of the container the process runs in (`container.id`), from
    /// its cgroups; None outside containers.
    pub container_id: Option<String>,
}

/// A batch of events from one loader instance. The records are kept in
/// their wire layout, a section a kind: [`RawBatch::push_event`],
/// [`RawBatch::push_h2`] and [`RawBatch::push_stream`] append,
/// [`RawBatch::events`], [`RawBatch::h2`] and [`RawBatch::streams`] read
/// each kind back in the order they were pushed (a batch that came off a socket was checked
/// whole when it was decoded).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawBatch {
    /// Add to a CLOCK_MONOTONIC time to get Unix-epoch ns (measured by the
    /// loader when the batch was cut, so replays convert the same way).
    pub mono_to_unix_ns: i64,
    /// The capture epoch: random, fixed when the probes were loaded and
    /// pinned with them, so the same for every loader instance that reads
    /// the same ring. Span and trace ids derive from it (and the request), so
    /// an event read again after a loader restart makes the same span, which
    /// the exporter's dedup drops. 0: none (ids derive from the loader's
    /// instance).
    pub epoch: u64,
    pub processes: Vec<ProcessInfo>,
    /// HTTP/1 events.
    pub(crate) events: Section,
    /// HTTP/2 records, in the order the kernel wrote them.
    pub(crate) h2: Section,
    /// Byte-stream records, in the order the kernel wrote them.
    pub(crate) streams: Section,
}

impl RawBatch {
    /// An empty batch whose record buffer holds `bytes` before it grows.
    pub fn with_capacity(bytes: usize) -> RawBatch {
        RawBatch { events: Section { bytes: Vec::with_capacity(bytes), count: 0 }, ..RawBatch::default() }
    }

    /// A batch of these records, in this order (where records are made by
    /// hand: tests, benches).
    pub fn of(
        mono_to_unix_ns: i64,
        epoch: u64,
        processes: Vec<ProcessInfo>,
        events: &[RawEvent],
        h2: &[RawH2],
        streams: &[RawStream],
    ) -> RawBatch {
        let mut b = RawBatch { mono_to_unix_ns, epoch, processes, ..RawBatch::default() };
        events.iter().for_each(|e| b.push_event(e));
        h2.iter().for_each(|r| b.push_h2(r));
        streams.iter().for_each(|r| b.push_stream(r));
        b
    }

    /// Appends an HTTP/1 event.
    pub fn push_event<B: AsRef<[u8]>>(&mut self, ev: &RawEvent<B>) {
        raw_wire::write_event(ev, &mut self.events.bytes);
        self.events.count += 1;
    }

    /// Appends an HTTP/2 record.
    pub fn push_h2<B: AsRef<[u8]>>(&mut self, r: &RawH2<B>) {
        raw_wire::write_h2(r, &mut self.h2.bytes);
        self.h2.count += 1;
    }

    /// Appends a byte-stream record.
    pub fn push_stream<B: AsRef<[u8]>>(&mut self, r: &RawStream<B>) {
        raw_wire::write_stream(r, &mut self.streams.bytes);
        self.streams.count += 1;
    }

    /// The HTTP/1 events, borrowing their captured bytes from the batch.
    pub fn events(&self) -> impl Iterator<Item = RawEvent<&[u8]>> + '_ {
        Records::new(&self.events, raw_wire::read_event)
    }

    /// The HTTP/2 records, borrowing their pieces from the batch.
    pub fn h2(&self) -> impl Iterator<Item = RawH2<&[u8]>> + '_ {
        Records::new(&self.h2, raw_wire::read_h2)
    }

    /// The byte-stream records, borrowing their pieces from the batch.
    pub fn streams(&self) -> impl Iterator<Item = RawStream<&[u8]>> + '_ {
        Records::new(&self.streams, raw_wire::read_stream)
    }

    /// How many HTTP/1 events.
    pub fn event_count(&self) -> usize {
        self.events.count
    }

    /// How many HTTP/2 records.
    pub fn h2_count(&self) -> usize {
        self.h2.count
    }

    /// How many byte-stream records.
    pub fn stream_count(&self) -> usize {
        self.streams.count
    }

    /// How many records of every kind.
    pub fn len(&self) -> usize {
        self.events.count + self.h2.count + self.streams.count
    }

    /// True when the batch has no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes the records take.
    pub fn record_bytes(&self) -> usize {
        self.events.bytes.len() + self.h2.bytes.len() + self.streams.bytes.len()
    }
}

impl<B: AsRef<[u8]>> RawEvent<B> {
    /// The same event, owning its bytes.
    pub fn to_owned_event(&self) -> RawEvent {
        self.with_request(self.request.as_ref().to_vec())
    }

    /// The same event with other captured bytes.
    pub fn with_request<C>(&self, request: C) -> RawEvent<C> {
        let RawEvent {
            conn,
            seq,
            parent,
            start_mono_ns,
            end_mono_ns,
            status,
            request_len,
            truncated,
            orphan,
            request: _,
            h2c,
            unlinked,
            propagated,
            kernel_ids,
        } = *self;
        RawEvent {
            conn,
            seq,
            parent,
            start_mono_ns,
            end_mono_ns,
            status,
            request_len,
            truncated,
            orphan,
            request,
            h2c,
            unlinked,
            propagated,
            kernel_ids,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{decode, encode, Body, Component, Envelope, Producer};

    pub(crate) fn sample_conn() -> ConnHead {
        ConnHead {
            role: Role::Server,
            pid: 42,
            tid: 43,
            fd: 7,
            proc_start_ns: 1_000,
            conn_id: 9,
            local: SockAddr::from_bytes(false, [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8000),
            peer: SockAddr::from_bytes(true, [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 51000),
            tls: false,
        }
    }

    pub(crate) fn sample_event() -> RawEvent {
        RawEvent {
            conn: sample_conn(),
            seq: 2,
            parent: Some((3, 1)),
            start_mono_ns: 10,
            end_mono_ns: 20,
            status: 404,
            request_len: 600,
            truncated: true,
            orphan: false,
            h2c: false,
            unlinked: false,
            propagated: None,
            kernel_ids: None,
            request: b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
        }
    }

    fn client_conn() -> ConnHead {
        ConnHead { role: Role::Client, pid: u32::MAX, tid: 44, fd: -1, proc_start_ns: u64::MAX, conn_id: 10, tls: true, ..sample_conn() }
    }

    pub(crate) fn sample_h2() -> RawH2 {
        RawH2 {
            conn: client_conn(),
            mono_ns: 30,
            send: true,
            start: true,
            close: false,
            upgrade: false,
            caller: None,
            pieces: vec![1, 0, 0, 4, 4, 0, 0, 0, 0, 0],
        }
    }

    pub(crate) fn sample_stream() -> RawStream {
        RawStream {
            conn: ConnHead { conn_id: 11, ..client_conn() },
            mono_ns: 40,
            send: true,
            start: true,
            close: false,
            links: Links { parent: Some((7, 2)), unlinked: false },
            pieces: vec![2, 4, 0, b'P', b'I', b'N', b'G'],
        }
    }

    pub(crate) fn sample_batch() -> RawBatch {
        let mut batch = RawBatch {
            mono_to_unix_ns: 1_700_000_000_000_000_000,
            processes: vec![ProcessInfo {
                pid: 42,
                proc_start_ns: 1_000,
                comm: "python3".into(),
                exe_name: Some("python3.11".into()),
                exe_path: Some("/usr/bin/python3.11".into()),
                env_service_name: None,
                env_resource_attributes: Some("team=ü".into()),
                container_id: Some("3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a".into()),
            }],
            epoch: u64::MAX,
            ..RawBatch::default()
        };
        let ev = sample_event();
        batch.push_event(&ev);
        batch.push_h2(&sample_h2());
        // every flag, an empty request, no parent
        batch.push_event(&RawEvent {
            conn: ConnHead { role: Role::Client, tls: true, fd: -1, ..sample_conn() },
            parent: None,
            truncated: false,
            orphan: true,
            h2c: true,
            unlinked: true,
            propagated: None,
            kernel_ids: None,
            request: Vec::new(),
            ..ev.clone()
        });
        batch.push_h2(&RawH2 {
            conn: ConnHead { role: Role::Server, tls: false, ..client_conn() },
            send: false,
            start: false,
            close: true,
            upgrade: true,
            caller: Some(0x1234_5678_9abc),
            pieces: Vec::new(),
            ..sample_h2()
        });
        batch.push_stream(&sample_stream());
        batch.push_stream(&RawStream {
            send: false,
            start: false,
            close: true,
            links: Links { parent: None, unlinked: true },
            pieces: Vec::new(),
            ..sample_stream()
        });
        batch
    }

    #[test]
    fn raw_batch_round_trips() {
        let batch = sample_batch();
        let env = Envelope::new(Producer { component: Component::ProbeLoader, instance: 1 }, 1, Body::Raw(batch.clone()));
        let back = decode(&encode(&env).unwrap()).unwrap();
        assert_eq!(back, env);
        let Body::Raw(got) = back.body else { panic!("not a raw batch") };
        let events: Vec<RawEvent> = got.events().map(|e| e.to_owned_event()).collect();
        assert_eq!(events, batch.events().map(|e| e.to_owned_event()).collect::<Vec<_>>());
        assert_eq!(events.len(), 2);
        assert_eq!(events[0], sample_event());
        assert!(events[1].orphan && events[1].h2c && events[1].conn.tls && events[1].parent.is_none() && events[1].conn.fd == -1);
        let h2: Vec<RawH2<&[u8]>> = got.h2().collect();
        assert_eq!(h2.len(), 2);
        assert_eq!(h2[0].pieces, &sample_h2().pieces[..]);
        assert_eq!(h2[0].conn, sample_h2().conn);
        assert!(h2[1].close && h2[1].upgrade && h2[1].conn.role == Role::Server && !h2[1].send && !h2[1].conn.tls);
        assert_eq!((h2[0].caller, h2[1].caller), (None, Some(0x1234_5678_9abc)));
        let streams: Vec<RawStream<&[u8]>> = got.streams().collect();
        assert_eq!(streams.len(), 2);
        assert_eq!(
            (streams[0].conn, streams[0].links, streams[0].pieces),
            (sample_stream().conn, sample_stream().links, &sample_stream().pieces[..])
        );
        assert!(streams[1].close && !streams[1].send && streams[1].links == Links { parent: None, unlinked: true });
        assert_eq!((got.event_count(), got.h2_count(), got.stream_count(), got.len()), (2, 2, 2, 6));
    }

    #[test]
    fn v4_mapped_addresses_read_as_v4() {
        let mut ip = [0u8; 16];
        ip[10] = 0xff;
        ip[11] = 0xff;
        ip[12..].copy_from_slice(&[10, 0, 0, 1]);
        let a = SockAddr::from_bytes(true, ip, 1);
        assert_eq!(a.ip_addr().to_string(), "10.0.0.1");
    }
}
