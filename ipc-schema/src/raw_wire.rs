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
//!                             bin(processes) bin(event*) bin(h2*) ]
//! processes = count(process) process*
//! process   = uint(pid) u64le(proc_start_ns) str(comm) opt(exe_name)
//!             opt(exe_path) opt(env_service_name) opt(env_resource_attributes)
//!             opt(container_id)
//! event     = u8(flags) u32le(pid) u32le(tid) u32le(fd) u64le(proc_start_ns)
//!             u64le(conn_id) u32le(seq) u64le(start_mono_ns) u64le(end_mono_ns)
//!             u16le(status) addr(local) addr(peer) u32le(request_len)
//!             [u8(links) [u64le(parent conn_id) u32le(parent seq)] (links 1)
//!                        [trace id (16 bytes, big-endian) u64le(span id)]
//!                                                      (links 2: propagated)
//!             ]                                            (flag links)
//!             (links 4: made unlinked while its thread served: no bytes)
//!             u32le(length) request
//!   flags:  1 client, 2 links, 4 truncated, 8 orphan, 16 tls, 32 h2c,
//!           64 local is IPv6, 128 peer is IPv6
//! h2        = u8(flags) u32le(pid) u32le(tid) u32le(fd) u64le(proc_start_ns)
//!             u64le(conn_id) u64le(mono_ns) uint(caller conn_id, 0: none)
//!             u8(db) [u64le(parent conn_id) u32le(parent seq)] (db 2)
//!             addr(local) addr(peer) u32le(length) pieces
//!   db:     0 not a database's, 1 a database's, 2 with a parent,
//!           4 unlinked
//!   flags:  1 client, 2 send, 4 start, 8 close, 16 tls, 32 upgrade,
//!           64 local is IPv6, 128 peer is IPv6
//! addr      = 16 bytes (the address, network order) u16le(port)
//! ```
//! (`count`, `str`, `opt`, `uint` as in [`crate::span_wire`].) Fixed-width
//! fields: a record is mostly copied, not encoded.
//!
//! Reading treats the bytes as hostile: a batch off a socket is checked
//! whole when it is decoded (every record's lengths against what is left,
//! every string for UTF-8, nothing trailing), so reading its records later
//! cannot fail. Field lists are destructured exhaustively on both sides: a
//! field added to [`RawEvent`] or [`RawH2`] does not compile until it is
//! here.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::raw::{DbLinks, ProcessInfo, RawBatch, RawEvent, RawH2, Role, SockAddr};
use crate::wire::{check, put_opt, put_str, put_uint, Reader, Section, WireError};

const EV_CLIENT: u8 = 1;
const EV_LINKS: u8 = 2;
const LINK_PARENT: u8 = 1;
const LINK_PROPAGATED: u8 = 2;
const LINK_UNLINKED: u8 = 4;
const EV_TRUNCATED: u8 = 4;
const EV_ORPHAN: u8 = 8;
const EV_TLS: u8 = 16;
const EV_H2C: u8 = 32;
const LOCAL_V6: u8 = 64;
const PEER_V6: u8 = 128;

const H2_CLIENT: u8 = 1;
const H2_SEND: u8 = 2;
const H2_START: u8 = 4;
const H2_CLOSE: u8 = 8;
const H2_TLS: u8 = 16;
const H2_UPGRADE: u8 = 32;
const DB_ON: u8 = 1;
const DB_PARENT: u8 = 2;
const DB_UNLINKED: u8 = 4;

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

fn role_bit(role: Role, client: u8) -> u8 {
    bit(role == Role::Client, client)
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

/// Appends one HTTP/1 event.
pub(crate) fn write_event<B: AsRef<[u8]>>(ev: &RawEvent<B>, out: &mut Vec<u8>) {
    let RawEvent {
        role,
        pid,
        tid,
        fd,
        proc_start_ns,
        conn_id,
        seq,
        parent,
        start_mono_ns,
        end_mono_ns,
        status,
        local,
        peer,
        request_len,
        truncated,
        orphan,
        request,
        tls,
        h2c,
        unlinked,
        propagated,
    } = ev;
    let links = bit(parent.is_some(), LINK_PARENT) | bit(propagated.is_some(), LINK_PROPAGATED) | bit(*unlinked, LINK_UNLINKED);
    let flags = role_bit(*role, EV_CLIENT)
        | bit(links != 0, EV_LINKS)
        | bit(*truncated, EV_TRUNCATED)
        | bit(*orphan, EV_ORPHAN)
        | bit(*tls, EV_TLS)
        | bit(*h2c, EV_H2C)
        | bit(local.v6, LOCAL_V6)
        | bit(peer.v6, PEER_V6);
    out.push(flags);
    out.extend_from_slice(&pid.to_le_bytes());
    out.extend_from_slice(&tid.to_le_bytes());
    out.extend_from_slice(&fd.to_le_bytes());
    out.extend_from_slice(&proc_start_ns.to_le_bytes());
    out.extend_from_slice(&conn_id.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&start_mono_ns.to_le_bytes());
    out.extend_from_slice(&end_mono_ns.to_le_bytes());
    out.extend_from_slice(&status.to_le_bytes());
    put_addr(out, local);
    put_addr(out, peer);
    out.extend_from_slice(&request_len.to_le_bytes());
    if links != 0 {
        out.push(links);
    }
    if let Some((conn, seq)) = parent {
        out.extend_from_slice(&conn.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
    }
    if let Some((trace, span)) = propagated {
        out.extend_from_slice(&trace.to_be_bytes());
        out.extend_from_slice(&span.to_le_bytes());
    }
    put_bytes(out, request.as_ref());
}

/// Appends one HTTP/2 record.
pub(crate) fn write_h2<B: AsRef<[u8]>>(r: &RawH2<B>, out: &mut Vec<u8>) {
    let RawH2 { role, pid, tid, fd, proc_start_ns, conn_id, mono_ns, send, start, close, tls, upgrade, caller, db, local, peer, pieces } =
        r;
    let flags = role_bit(*role, H2_CLIENT)
        | bit(*send, H2_SEND)
        | bit(*start, H2_START)
        | bit(*close, H2_CLOSE)
        | bit(*tls, H2_TLS)
        | bit(*upgrade, H2_UPGRADE)
        | bit(local.v6, LOCAL_V6)
        | bit(peer.v6, PEER_V6);
    out.push(flags);
    out.extend_from_slice(&pid.to_le_bytes());
    out.extend_from_slice(&tid.to_le_bytes());
    out.extend_from_slice(&fd.to_le_bytes());
    out.extend_from_slice(&proc_start_ns.to_le_bytes());
    out.extend_from_slice(&conn_id.to_le_bytes());
    out.extend_from_slice(&mono_ns.to_le_bytes());
    put_uint(out, caller.unwrap_or(0));
    match db {
        None => out.push(0),
        Some(DbLinks { parent, unlinked }) => {
            out.push(DB_ON | bit(parent.is_some(), DB_PARENT) | bit(*unlinked, DB_UNLINKED));
            if let Some((conn, seq)) = parent {
                out.extend_from_slice(&conn.to_le_bytes());
                out.extend_from_slice(&seq.to_le_bytes());
            }
        }
    }
    put_addr(out, local);
    put_addr(out, peer);
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

fn role(flags: u8, client: u8) -> Role {
    if flags & client != 0 {
        Role::Client
    } else {
        Role::Server
    }
}

/// Reads one HTTP/1 event, borrowing its bytes.
pub(crate) fn read_event<'a>(rd: &mut Reader<'a>) -> Result<RawEvent<&'a [u8]>, WireError> {
    let flags = rd.u8("event flags")?;
    let pid = rd.u32le("pid")?;
    let tid = rd.u32le("tid")?;
    let fd = rd.u32le("fd")? as i32;
    let proc_start_ns = rd.u64le("proc_start_ns")?;
    let conn_id = rd.u64le("conn_id")?;
    let seq = rd.u32le("seq")?;
    let start_mono_ns = rd.u64le("start_mono_ns")?;
    let end_mono_ns = rd.u64le("end_mono_ns")?;
    let status = rd.u16le("status")?;
    let local = rd.addr(flags & LOCAL_V6 != 0, "local")?;
    let peer = rd.addr(flags & PEER_V6 != 0, "peer")?;
    let request_len = rd.u32le("request_len")?;
    let links = if flags & EV_LINKS != 0 { rd.u8("links")? } else { 0 };
    let parent = if links & LINK_PARENT != 0 { Some((rd.u64le("parent")?, rd.u32le("parent")?)) } else { None };
    let propagated = if links & LINK_PROPAGATED != 0 {
        Some((u128::from_be_bytes(rd.fixed::<16>("propagated")?), rd.u64le("propagated")?))
    } else {
        None
    };
    let request = rd.record_bytes("request")?;
    Ok(RawEvent {
        role: role(flags, EV_CLIENT),
        pid,
        tid,
        fd,
        proc_start_ns,
        conn_id,
        seq,
        parent,
        start_mono_ns,
        end_mono_ns,
        status,
        local,
        peer,
        request_len,
        truncated: flags & EV_TRUNCATED != 0,
        orphan: flags & EV_ORPHAN != 0,
        request,
        tls: flags & EV_TLS != 0,
        h2c: flags & EV_H2C != 0,
        unlinked: links & LINK_UNLINKED != 0,
        propagated,
    })
}

/// Reads one HTTP/2 record, borrowing its pieces.
pub(crate) fn read_h2<'a>(rd: &mut Reader<'a>) -> Result<RawH2<&'a [u8]>, WireError> {
    let flags = rd.u8("h2 flags")?;
    let pid = rd.u32le("pid")?;
    let tid = rd.u32le("tid")?;
    let fd = rd.u32le("fd")? as i32;
    let proc_start_ns = rd.u64le("proc_start_ns")?;
    let conn_id = rd.u64le("conn_id")?;
    let mono_ns = rd.u64le("mono_ns")?;
    let caller: u64 = rd.int("caller")?;
    let db = match rd.u8("db")? {
        0 => None,
        b if b & !(DB_ON | DB_PARENT | DB_UNLINKED) != 0 || b & DB_ON == 0 => return Err(WireError::Range { field: "db" }),
        b => Some(DbLinks {
            parent: if b & DB_PARENT != 0 { Some((rd.u64le("db parent")?, rd.u32le("db parent")?)) } else { None },
            unlinked: b & DB_UNLINKED != 0,
        }),
    };
    let local = rd.addr(flags & LOCAL_V6 != 0, "local")?;
    let peer = rd.addr(flags & PEER_V6 != 0, "peer")?;
    let pieces = rd.record_bytes("pieces")?;
    Ok(RawH2 {
        role: role(flags, H2_CLIENT),
        pid,
        tid,
        fd,
        proc_start_ns,
        conn_id,
        mono_ns,
        send: flags & H2_SEND != 0,
        start: flags & H2_START != 0,
        close: flags & H2_CLOSE != 0,
        tls: flags & H2_TLS != 0,
        upgrade: flags & H2_UPGRADE != 0,
        caller: (caller != 0).then_some(caller),
        db,
        local,
        peer,
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
        let mut t = serializer.serialize_tuple(5)?;
        t.serialize_element(&self.mono_to_unix_ns)?;
        t.serialize_element(&self.epoch)?;
        t.serialize_element(serde_bytes::Bytes::new(&processes))?;
        t.serialize_element(serde_bytes::Bytes::new(&self.events.bytes))?;
        t.serialize_element(serde_bytes::Bytes::new(&self.h2.bytes))?;
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
        let processes = read_processes(&processes).map_err(de::Error::custom)?;
        let events = Section { count: check(&events, read_event).map_err(de::Error::custom)?, bytes: events };
        let h2 = Section { count: check(&h2, read_h2).map_err(de::Error::custom)?, bytes: h2 };
        Ok(RawBatch { mono_to_unix_ns, epoch, processes, events, h2 })
    }
}

impl<'de> Deserialize<'de> for RawBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawBatch, D::Error> {
        deserializer.deserialize_tuple(5, BatchVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::tests::{sample_batch, sample_event, sample_h2};
    use crate::{decode, encode, Body, Component, Envelope, Producer};

    fn envelope(batch: RawBatch) -> Vec<u8> {
        encode(&Envelope::new(Producer { component: Component::ProbeLoader, instance: 1 }, 1, Body::Raw(batch))).unwrap()
    }

    #[test]
    fn propagated_ids_round_trip_with_and_without_a_parent() {
        let propagated = Some((0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c_u128, 0xb7ad_6b71_6920_3331_u64));
        for parent in [None, Some((7, 3))] {
            let ev = RawEvent { role: Role::Client, parent, propagated, ..sample_event() };
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
        assert_eq!(got.events().count() + got.h2().count(), 0);
        assert_eq!(got, b);
    }
}
