//! The wire layout of a [`RawBatch`]: written and read by hand.
//!
//! Every request passes through a raw batch (the loader writes it, the
//! span-actor reads it), and serde's generic msgpack path cost the loader an
//! owned copy and an encode of each record and the span-actor a visitor per
//! field and an allocation per record. A batch therefore keeps its records
//! in this layout from the moment they are pushed: the loader appends each
//! kernel record to it, the envelope carries it as three msgpack `bin`s, and
//! the span-actor reads records that borrow their bytes from it.
//!
//! ```text
//! batch     = msgpack array [ int(mono_to_unix_ns) uint(epoch)
//!                             bin(processes) bin(event*) bin(h2*) bin(stream*) ]
//! processes = count(process) process*
//! process   = uint(pid) u64le(proc_start_ns) str(comm) opt(exe_name)
//!             opt(exe_path) opt(env_service_name) opt(env_resource_attributes)
//!             opt(container_id)
//! conn      = u8(flags) u32le(pid) u32le(tid) u32le(fd) u64le(proc_start_ns)
//!             u64le(conn_id) addr(local) addr(peer)
//!   flags:  1 client, 2 tls, 4 local is IPv6, 8 peer is IPv6
//! event     = conn u8(flags) u32le(seq) u64le(start_mono_ns) u64le(end_mono_ns)
//!             u16le(status) u32le(request_len)
//!             [u8(links) [u64le(parent conn_id) u32le(parent seq)] (links 1)
//!                        [trace id (16 bytes, big-endian) u64le(span id)]
//!                                                      (links 2: propagated)
//!             ]                                            (flag links)
//!             (links 4: made unlinked while its thread served: no bytes)
//!             [trace id (16 bytes) u64be(span id) u64be(parent span id, 0: none)]
//!                                          (links 8: the kernel's ids, probe.carrier)
//!             u32le(length) request
//!   flags:  1 links, 2 truncated, 4 orphan, 8 h2c
//! h2        = conn u8(flags) u64le(mono_ns) uint(caller conn_id, 0: none)
//!             u32le(length) pieces
//!   flags:  1 send, 2 start, 4 close, 8 upgrade
//! stream    = conn u8(flags) u64le(mono_ns)
//!             [u64le(parent conn_id) u32le(parent seq)] (flag parent)
//!             u32le(length) pieces
//!   flags:  1 send, 2 start, 4 close, 8 parent, 16 unlinked
//! addr      = 16 bytes (the address, network order) u16le(port)
//! ```
//! (`count`, `str`, `opt`, `uint` as in [`crate::span_wire`].) Fixed-width
//! fields: a record is mostly copied, not encoded.
//!
//! Reading treats the bytes as hostile: a batch off a socket is checked
//! whole when it is decoded (every record's lengths against what is left,
//! every string for UTF-8, nothing trailing), so reading its records later
//! cannot fail; a flag bit no writer sets is refused. Field lists are
//! destructured exhaustively on both sides: a field added to [`ConnHead`],
//! [`RawEvent`], [`RawH2`] or [`RawStream`] does not compile until it is
//! here.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::raw::{ConnHead, Links, ProcessInfo, RawBatch, RawEvent, RawH2, RawStream, Role, SockAddr};
use crate::wire::{check, put_opt, put_str, put_uint, Reader, Section, WireError};

const CONN_CLIENT: u8 = 1;
const CONN_TLS: u8 = 2;
const LOCAL_V6: u8 = 4;
const PEER_V6: u8 = 8;
const CONN_FLAGS: u8 = CONN_CLIENT | CONN_TLS | LOCAL_V6 | PEER_V6;

const EV_LINKS: u8 = 1;
const EV_TRUNCATED: u8 = 2;
const EV_ORPHAN: u8 = 4;
const EV_H2C: u8 = 8;
const EV_FLAGS: u8 = EV_LINKS | EV_TRUNCATED | EV_ORPHAN | EV_H2C;
const LINK_PARENT: u8 = 1;
const LINK_PROPAGATED: u8 = 2;
const LINK_UNLINKED: u8 = 4;
const LINK_KERNEL_IDS: u8 = 8;
const LINK_FLAGS: u8 = LINK_PARENT | LINK_PROPAGATED | LINK_UNLINKED | LINK_KERNEL_IDS;

/// A syscall record's flags (h2, stream), then each kind's own.
const IO_SEND: u8 = 1;
const IO_START: u8 = 2;
const IO_CLOSE: u8 = 4;
const H2_UPGRADE: u8 = 8;
const H2_FLAGS: u8 = IO_SEND | IO_START | IO_CLOSE | H2_UPGRADE;
const STREAM_PARENT: u8 = 8;
const STREAM_UNLINKED: u8 = 16;
const STREAM_FLAGS: u8 = IO_SEND | IO_START | IO_CLOSE | STREAM_PARENT | STREAM_UNLINKED;

/// The fewest bytes a process takes (a one-byte pid, its start, five empty
/// strings or absent options).
const MIN_PROCESS: usize = 1 + 8 + 6;

fn bit(on: bool, flag: u8) -> u8 {
    if on {
        flag
    } else {
        0
    }
}

fn put_addr(out: &mut Vec<u8>, a: &SockAddr) {
    out.extend_from_slice(&a.bytes());
    out.extend_from_slice(&a.port.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // A record's bytes come from one kernel record (a few KiB at most); the
    // batch holding it is bounded by `MAX_MESSAGE_BYTES`.
    out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&b[..b.len().min(u32::MAX as usize)]);
}

/// Appends the connection's header every record starts with.
fn write_conn(c: &ConnHead, out: &mut Vec<u8>) {
    let ConnHead { role, pid, tid, fd, proc_start_ns, conn_id, local, peer, tls } = c;
    out.push(bit(*role == Role::Client, CONN_CLIENT) | bit(*tls, CONN_TLS) | bit(local.v6, LOCAL_V6) | bit(peer.v6, PEER_V6));
    out.extend_from_slice(&pid.to_le_bytes());
    out.extend_from_slice(&tid.to_le_bytes());
    out.extend_from_slice(&fd.to_le_bytes());
    out.extend_from_slice(&proc_start_ns.to_le_bytes());
    out.extend_from_slice(&conn_id.to_le_bytes());
    put_addr(out, local);
    put_addr(out, peer);
}

fn put_parent(out: &mut Vec<u8>, parent: &Option<(u64, u32)>) {
    if let Some((conn, seq)) = parent {
        out.extend_from_slice(&conn.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
    }
}

/// Appends one HTTP/1 event.
pub(crate) fn write_event<B: AsRef<[u8]>>(ev: &RawEvent<B>, out: &mut Vec<u8>) {
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
        request,
        h2c,
        unlinked,
        propagated,
        kernel_ids,
    } = ev;
    let links = bit(parent.is_some(), LINK_PARENT)
        | bit(propagated.is_some(), LINK_PROPAGATED)
        | bit(*unlinked, LINK_UNLINKED)
        | bit(kernel_ids.is_some(), LINK_KERNEL_IDS);
    write_conn(conn, out);
    out.push(bit(links != 0, EV_LINKS) | bit(*truncated, EV_TRUNCATED) | bit(*orphan, EV_ORPHAN) | bit(*h2c, EV_H2C));
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&start_mono_ns.to_le_bytes());
    out.extend_from_slice(&end_mono_ns.to_le_bytes());
    out.extend_from_slice(&status.to_le_bytes());
    out.extend_from_slice(&request_len.to_le_bytes());
    if links != 0 {
        out.push(links);
    }
    put_parent(out, parent);
    if let Some((trace, span)) = propagated {
        out.extend_from_slice(&trace.to_be_bytes());
        out.extend_from_slice(&span.to_le_bytes());
    }
    if let Some((trace, span, parent)) = kernel_ids {
        out.extend_from_slice(&trace.to_be_bytes());
        out.extend_from_slice(&span.to_be_bytes());
        out.extend_from_slice(&parent.to_be_bytes());
    }
    put_bytes(out, request.as_ref());
}

/// Appends one HTTP/2 record.
pub(crate) fn write_h2<B: AsRef<[u8]>>(r: &RawH2<B>, out: &mut Vec<u8>) {
    let RawH2 { conn, mono_ns, send, start, close, upgrade, caller, pieces } = r;
    write_conn(conn, out);
    out.push(bit(*send, IO_SEND) | bit(*start, IO_START) | bit(*close, IO_CLOSE) | bit(*upgrade, H2_UPGRADE));
    out.extend_from_slice(&mono_ns.to_le_bytes());
    put_uint(out, caller.unwrap_or(0));
    put_bytes(out, pieces.as_ref());
}

/// Appends one byte-stream record.
pub(crate) fn write_stream<B: AsRef<[u8]>>(r: &RawStream<B>, out: &mut Vec<u8>) {
    let RawStream { conn, mono_ns, send, start, close, links: Links { parent, unlinked }, pieces } = r;
    write_conn(conn, out);
    out.push(
        bit(*send, IO_SEND)
            | bit(*start, IO_START)
            | bit(*close, IO_CLOSE)
            | bit(parent.is_some(), STREAM_PARENT)
            | bit(*unlinked, STREAM_UNLINKED),
    );
    out.extend_from_slice(&mono_ns.to_le_bytes());
    put_parent(out, parent);
    put_bytes(out, pieces.as_ref());
}

fn write_processes(ps: &[ProcessInfo], out: &mut Vec<u8>) {
    put_uint(out, ps.len() as u64);
    for p in ps {
        let ProcessInfo { pid, proc_start_ns, comm, exe_name, exe_path, env_service_name, env_resource_attributes, container_id } = p;
        put_uint(out, u64::from(*pid));
        out.extend_from_slice(&proc_start_ns.to_le_bytes());
        put_str(out, comm);
        put_opt(out, exe_name.as_deref());
        put_opt(out, exe_path.as_deref());
        put_opt(out, env_service_name.as_deref());
        put_opt(out, env_resource_attributes.as_deref());
        put_opt(out, container_id.as_deref());
    }
}

impl<'a> Reader<'a> {
    fn addr(&mut self, v6: bool, field: &'static str) -> Result<SockAddr, WireError> {
        let ip = self.fixed::<16>(field)?;
        let port = self.u16le(field)?;
        Ok(SockAddr::from_bytes(v6, ip, port))
    }

    fn record_bytes(&mut self, field: &'static str) -> Result<&'a [u8], WireError> {
        let n = self.u32le(field)? as usize;
        self.take(n, field)
    }
}

impl Reader<'_> {
    /// A flags byte, refused if a bit outside `known` is set.
    fn flags(&mut self, known: u8, field: &'static str) -> Result<u8, WireError> {
        let f = self.u8(field)?;
        if f & !known != 0 {
            return Err(WireError::Range { field });
        }
        Ok(f)
    }

    fn parent(&mut self, on: bool) -> Result<Option<(u64, u32)>, WireError> {
        Ok(if on { Some((self.u64le("parent")?, self.u32le("parent")?)) } else { None })
    }
}

/// Reads the connection's header every record starts with.
fn read_conn(rd: &mut Reader<'_>) -> Result<ConnHead, WireError> {
    let flags = rd.flags(CONN_FLAGS, "conn flags")?;
    Ok(ConnHead {
        role: if flags & CONN_CLIENT != 0 { Role::Client } else { Role::Server },
        pid: rd.u32le("pid")?,
        tid: rd.u32le("tid")?,
        fd: rd.u32le("fd")? as i32,
        proc_start_ns: rd.u64le("proc_start_ns")?,
        conn_id: rd.u64le("conn_id")?,
        local: rd.addr(flags & LOCAL_V6 != 0, "local")?,
        peer: rd.addr(flags & PEER_V6 != 0, "peer")?,
        tls: flags & CONN_TLS != 0,
    })
}

/// Reads one HTTP/1 event, borrowing its bytes.
pub(crate) fn read_event<'a>(rd: &mut Reader<'a>) -> Result<RawEvent<&'a [u8]>, WireError> {
    let conn = read_conn(rd)?;
    let flags = rd.flags(EV_FLAGS, "event flags")?;
    let seq = rd.u32le("seq")?;
    let start_mono_ns = rd.u64le("start_mono_ns")?;
    let end_mono_ns = rd.u64le("end_mono_ns")?;
    let status = rd.u16le("status")?;
    let request_len = rd.u32le("request_len")?;
    let links = if flags & EV_LINKS != 0 { rd.flags(LINK_FLAGS, "links")? } else { 0 };
    let parent = rd.parent(links & LINK_PARENT != 0)?;
    let propagated = if links & LINK_PROPAGATED != 0 {
        Some((u128::from_be_bytes(rd.fixed::<16>("propagated")?), rd.u64le("propagated")?))
    } else {
        None
    };
    let kernel_ids = if links & LINK_KERNEL_IDS != 0 {
        let trace = u128::from_be_bytes(rd.fixed::<16>("kernel trace id")?);
        let span = u64::from_be_bytes(rd.fixed::<8>("kernel span id")?);
        Some((trace, span, u64::from_be_bytes(rd.fixed::<8>("kernel parent id")?)))
    } else {
        None
    };
    let request = rd.record_bytes("request")?;
    Ok(RawEvent {
        conn,
        seq,
        parent,
        start_mono_ns,
        end_mono_ns,
        status,
        request_len,
        truncated: flags & EV_TRUNCATED != 0,
        orphan: flags & EV_ORPHAN != 0,
        request,
        h2c: flags & EV_H2C != 0,
        unlinked: links & LINK_UNLINKED != 0,
        propagated,
        kernel_ids,
    })
}

/// Reads one HTTP/2 record, borrowing its pieces.
pub(crate) fn read_h2<'a>(rd: &mut Reader<'a>) -> Result<RawH2<&'a [u8]>, WireError> {
    let conn = read_conn(rd)?;
    let flags = rd.flags(H2_FLAGS, "h2 flags")?;
    let mono_ns = rd.u64le("mono_ns")?;
    let caller: u64 = rd.int("caller")?;
    let pieces = rd.record_bytes("pieces")?;
    Ok(RawH2 {
        conn,
        mono_ns,
        send: flags & IO_SEND != 0,
        start: flags & IO_START != 0,
        close: flags & IO_CLOSE != 0,
        upgrade: flags & H2_UPGRADE != 0,
        caller: (caller != 0).then_some(caller),
        pieces,
    })
}

/// Reads one byte-stream record, borrowing its pieces.
pub(crate) fn read_stream<'a>(rd: &mut Reader<'a>) -> Result<RawStream<&'a [u8]>, WireError> {
    let conn = read_conn(rd)?;
    let flags = rd.flags(STREAM_FLAGS, "stream flags")?;
    let mono_ns = rd.u64le("mono_ns")?;
    let parent = rd.parent(flags & STREAM_PARENT != 0)?;
    let pieces = rd.record_bytes("pieces")?;
    Ok(RawStream {
        conn,
        mono_ns,
        send: flags & IO_SEND != 0,
        start: flags & IO_START != 0,
        close: flags & IO_CLOSE != 0,
        links: Links { parent, unlinked: flags & STREAM_UNLINKED != 0 },
        pieces,
    })
}

fn read_processes(bytes: &[u8]) -> Result<Vec<ProcessInfo>, WireError> {
    let mut rd = Reader::new(bytes);
    let n = rd.count("processes", MIN_PROCESS)?;
    let mut ps = Vec::with_capacity(n);
    for _ in 0..n {
        ps.push(ProcessInfo {
            pid: rd.int("pid")?,
            proc_start_ns: rd.u64le("proc_start_ns")?,
            comm: rd.str("comm")?,
            exe_name: rd.opt("exe_name")?,
            exe_path: rd.opt("exe_path")?,
            env_service_name: rd.opt("env_service_name")?,
            env_resource_attributes: rd.opt("env_resource_attributes")?,
            container_id: rd.opt("container_id")?,
        });
    }
    rd.end()?;
    Ok(ps)
}

impl Serialize for RawBatch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut processes = Vec::with_capacity(16 + 96 * self.processes.len());
        write_processes(&self.processes, &mut processes);
        let mut t = serializer.serialize_tuple(6)?;
        t.serialize_element(&self.mono_to_unix_ns)?;
        t.serialize_element(&self.epoch)?;
        t.serialize_element(serde_bytes::Bytes::new(&processes))?;
        t.serialize_element(serde_bytes::Bytes::new(&self.events.bytes))?;
        t.serialize_element(serde_bytes::Bytes::new(&self.h2.bytes))?;
        t.serialize_element(serde_bytes::Bytes::new(&self.streams.bytes))?;
        t.end()
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = RawBatch;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a raw batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawBatch, A::Error> {
        let mono_to_unix_ns: i64 = seq.next_element()?.ok_or_else(|| de::Error::missing_field("mono_to_unix_ns"))?;
        let epoch: u64 = seq.next_element()?.ok_or_else(|| de::Error::missing_field("epoch"))?;
        let mut bytes = |what: &'static str| -> Result<Vec<u8>, A::Error> {
            Ok(seq.next_element::<serde_bytes::ByteBuf>()?.ok_or_else(|| de::Error::missing_field(what))?.into_vec())
        };
        let processes = bytes("processes")?;
        let events = bytes("events")?;
        let h2 = bytes("h2")?;
        let streams = bytes("streams")?;
        let processes = read_processes(&processes).map_err(de::Error::custom)?;
        let events = Section { count: check(&events, read_event).map_err(de::Error::custom)?, bytes: events };
        let h2 = Section { count: check(&h2, read_h2).map_err(de::Error::custom)?, bytes: h2 };
        let streams = Section { count: check(&streams, read_stream).map_err(de::Error::custom)?, bytes: streams };
        Ok(RawBatch { mono_to_unix_ns, epoch, processes, events, h2, streams })
    }
}

impl<'de> Deserialize<'de> for RawBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawBatch, D::Error> {
        deserializer.deserialize_tuple(6, BatchVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::tests::{sample_batch, sample_event, sample_h2, sample_stream};
    use crate::{decode, encode, Body, Component, Envelope, Producer};

    fn envelope(batch: RawBatch) -> Vec<u8> {
        encode(&Envelope::new(Producer { component: Component::ProbeLoader, instance: 1 }, 1, Body::Raw(batch))).unwrap()
    }

    #[test]
    fn propagated_ids_round_trip_with_and_without_a_parent() {
        let propagated = Some((0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c_u128, 0xb7ad_6b71_6920_3331_u64));
        for parent in [None, Some((7, 3))] {
            let ev = RawEvent { conn: ConnHead { role: Role::Client, ..sample_event().conn }, parent, propagated, ..sample_event() };
            let mut one = Vec::new();
            write_event(&ev, &mut one);
            let mut rd = Reader::new(&one);
            assert_eq!(read_event(&mut rd).unwrap().to_owned_event(), ev);
            for n in 0..one.len() {
                assert!(check(&one[..n], read_event).is_err() || n == 0, "cut at {n}");
            }
        }
    }

    #[test]
    fn a_record_cut_anywhere_but_between_records_is_refused() {
        let b = sample_batch();
        let section = &b.events.bytes;
        let mut one = Vec::new();
        write_event(&sample_event(), &mut one);
        for n in 0..section.len() {
            let ok = check(&section[..n], read_event);
            assert_eq!(ok.is_ok(), n == 0 || n == one.len(), "events cut at {n} of {}: {ok:?}", section.len());
        }
        let mut one = Vec::new();
        write_h2(&sample_h2(), &mut one);
        for n in 1..one.len() {
            assert!(check(&b.h2.bytes[..n], read_h2).is_err(), "h2 cut at {n}");
        }
        let mut one = Vec::new();
        write_stream(&sample_stream(), &mut one);
        for n in 1..one.len() {
            assert!(check(&b.streams.bytes[..n], read_stream).is_err(), "stream cut at {n}");
        }
        let mut ps = Vec::new();
        write_processes(&b.processes, &mut ps);
        for n in 0..ps.len() {
            assert!(read_processes(&ps[..n]).is_err(), "processes cut at {n}");
        }
        let mut trailing = ps.clone();
        trailing.push(0);
        assert_eq!(read_processes(&trailing), Err(WireError::Trailing { left: 1 }));
    }

    #[test]
    fn every_prefix_of_a_message_is_refused() {
        let bytes = envelope(sample_batch());
        assert!(decode(&bytes).is_ok());
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "a message cut at {n} of {} was accepted", bytes.len());
        }
    }

    #[test]
    fn a_flag_no_writer_sets_is_refused() {
        let mut one = Vec::new();
        write_stream(&sample_stream(), &mut one);
        assert!(check(&one, read_stream).is_ok());
        // the conn header's flags, then the stream's (after the 45-byte header)
        for (at, known) in [(0, CONN_FLAGS), (1 + 4 + 4 + 4 + 8 + 8 + 18 + 18, STREAM_FLAGS)] {
            let mut bad = one.clone();
            bad[at] |= !known;
            assert!(check(&bad, read_stream).is_err(), "unknown flags at {at} accepted");
        }
    }

    #[test]
    fn a_huge_declared_length_allocates_nothing() {
        let mut out = Vec::new();
        write_event(&sample_event(), &mut out);
        // the request's length is the four bytes before the request
        let at = out.len() - sample_event().request.len() - 4;
        out[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(check(&out, read_event), Err(WireError::Truncated { field: "request" }));
        let mut ps = Vec::new();
        put_uint(&mut ps, 1 << 62);
        assert_eq!(read_processes(&ps), Err(WireError::Count { field: "processes" }));
    }

    #[test]
    fn a_bad_process_name_is_refused() {
        let mut b = sample_batch();
        b.processes[0].comm = "\u{7f}".into();
        let mut bytes = envelope(b);
        let at = bytes.iter().position(|&c| c == 0x7f).unwrap();
        bytes[at] = 0xff;
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn an_empty_batch_round_trips() {
        let b = RawBatch::with_capacity(1024);
        let env = decode(&envelope(b.clone())).unwrap();
        let Body::Raw(got) = env.body else { panic!("not a raw batch") };
        assert!(got.is_empty());
        assert_eq!(got.events().count() + got.h2().count() + got.streams().count(), 0);
        assert_eq!(got, b);
    }
}
