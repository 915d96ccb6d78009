//! The Kafka protocol, client side: [`KafkaConn`].
//!
//! # Layout
//! ```text
//! request  = i32 len, i16 api_key, i16 api_version, i32 correlation_id,
//!            nullable_string client_id (i16 length, even when flexible),
//!            [tagged_fields: flexible versions], body
//! response = i32 len, i32 correlation_id, [tagged_fields: flexible
//!            versions but ApiVersions'], body
//! flexible = compact strings/arrays/bytes (unsigned varint length + 1,
//!            0: null), tagged fields after each struct
//! batch    = i64 base_offset, i32 batch_length, i32 leader_epoch,
//!            i8 magic (2), u32 crc, i16 attributes (bits 0-2: codec),
//!            i32 last_offset_delta, i64 first_ts, i64 max_ts,
//!            i64 producer_id, i16 producer_epoch, i32 base_sequence,
//!            i32 record_count, records (compressed: one blob)
//! record   = varint len, i8 attrs, varlong ts_delta, varint offset_delta,
//!            varint key_len, key, varint value_len, value,
//!            varint header_count, (varint key_len, key, varint len, value)*
//! ```
//! A response answers the request with its correlation id; a broker
//! answers a connection's requests in order, so a response to a later
//! request means the earlier ones went unanswered (a Produce with
//! `acks=0` expects none and is not waited for).
//!
//! # Calls
//! - **Produce** v3–v13 → `send` (PRODUCER): topic and partition when the
//!   request has one of each (v13: the topic's id, named if a Metadata
//!   answer on the connection named it, else its 32 hex digits), the
//!   messages' count from the record-batch headers (compressed batches
//!   too: the count is in the header, nothing is decompressed), the
//!   `traceparent` of each uncompressed record's headers, and from the
//!   response the base offset and the first partition error.
//! - **Fetch** v4–v16 → `poll` (receive, CONSUMER), from the response:
//!   one op per response that carried records or an error (empty fetches,
//!   a consumer's long polls, are counted `empty_fetches`); topic and
//!   partition when one of each had records, the first batch's base
//!   offset, the count, the `traceparent`s.
//! - **OffsetCommit** v2–v10 → `commit` (settle): the group, the topic,
//!   partition and offset when one of each, the first error.
//! - **Metadata** v10+ answers are read for topic ids → names (at most
//!   [`MAX_TOPIC_IDS`] per connection); no op.
//! - Every other API (ApiVersions, InitProducerId, FindCoordinator,
//!   JoinGroup, SyncGroup, Heartbeat, ListOffsets, CreateTopics...):
//!   paired by correlation id, no op, counted `other_requests`. They are
//!   the client's housekeeping, not messaging calls of the conventions.
//!
//! Nothing of a record but its batch header and the value of a header
//! keyed `traceparent` (parsed; kept only when valid) is read: never a
//! key, a value, another header.
//!
//! # Desync and resync
//! Every message is framed by its length, so a LOST region inside one is
//! skipped; a header in a LOST region loses the direction's place:
//! - **send**: sends are dropped until a send record that starts with a
//!   plausible request header (a known API key, a version Kafka has, a
//!   correlation id ≥ 0, a client id inside the frame, a frame no longer
//!   than the record): clients write whole requests.
//! - **recv**: recv records are dropped until one starts with a length
//!   and the correlation id of a request still waiting (4 bytes a
//!   payload would have to spell at a record's first byte); the requests
//!   before it are counted `unanswered`.
//!
//! # Memory
//! Two [`Stream`]s, at most [`MAX_PENDING`] pending requests (each an op
//! or nothing), at most [`MAX_TOPIC_IDS`] topic names. Declared lengths
//! only ever bound slices of what was captured: nothing is allocated from
//! them.

use std::collections::VecDeque;

use super::common::{self, R};
use super::{done, name, traceparent, Membership, MsgCounts, MsgOp, MsgSystem, OffsetRange, OpType, Out, MAX_PENDING};
use crate::db::pieces::{self, Piece};
use crate::db::stream::{Frame, Msg, Stream};

/// Topic ids remembered per connection (from Metadata answers); past it
/// the oldest is forgotten.
pub const MAX_TOPIC_IDS: usize = 256;

/// Largest API key taken as Kafka's (4.1 has keys up to 92).
const MAX_API_KEY: i16 = 100;

/// Largest API version taken as plausible.
const MAX_API_VERSION: i16 = 30;

/// Elements read of any one array (each is at least a byte, so a cut
/// message ends the loop anyway; this bounds the work on a whole one).
const MAX_ITEMS: usize = 100_000;

const PRODUCE: i16 = 0;
const FETCH: i16 = 1;
const METADATA: i16 = 3;
const OFFSET_COMMIT: i16 = 8;
const JOIN_GROUP: i16 = 11;
const HEARTBEAT: i16 = 12;
const LEAVE_GROUP: i16 = 13;
const SYNC_GROUP: i16 = 14;
const API_VERSIONS: i16 = 18;

/// Kafka's error names by code (0 to 127; -1 is UNKNOWN_SERVER_ERROR).
const ERROR_NAMES: [&str; 128] = [
    "NONE",
    "OFFSET_OUT_OF_RANGE",
    "CORRUPT_MESSAGE",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "INVALID_FETCH_SIZE",
    "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_OR_FOLLOWER",
    "REQUEST_TIMED_OUT",
    "BROKER_NOT_AVAILABLE",
    "REPLICA_NOT_AVAILABLE",
    "MESSAGE_SIZE_TOO_LARGE",
    "STALE_CONTROLLER_EPOCH",
    "OFFSET_METADATA_TOO_LARGE",
    "NETWORK_EXCEPTION",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "NOT_COORDINATOR",
    "INVALID_TOPIC",
    "RECORD_LIST_TOO_LARGE",
    "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "INVALID_REQUIRED_ACKS",
    "ILLEGAL_GENERATION",
    "INCONSISTENT_GROUP_PROTOCOL",
    "INVALID_GROUP_ID",
    "UNKNOWN_MEMBER_ID",
    "INVALID_SESSION_TIMEOUT",
    "REBALANCE_IN_PROGRESS",
    "INVALID_COMMIT_OFFSET_SIZE",
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "INVALID_TIMESTAMP",
    "UNSUPPORTED_SASL_MECHANISM",
    "ILLEGAL_SASL_STATE",
    "UNSUPPORTED_VERSION",
    "TOPIC_ALREADY_EXISTS",
    "INVALID_PARTITIONS",
    "INVALID_REPLICATION_FACTOR",
    "INVALID_REPLICATION_ASSIGNMENT",
    "INVALID_CONFIG",
    "NOT_CONTROLLER",
    "INVALID_REQUEST",
    "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    "POLICY_VIOLATION",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "DUPLICATE_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "INVALID_TXN_STATE",
    "INVALID_PRODUCER_ID_MAPPING",
    "INVALID_TRANSACTION_TIMEOUT",
    "CONCURRENT_TRANSACTIONS",
    "TRANSACTION_COORDINATOR_FENCED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "SECURITY_DISABLED",
    "OPERATION_NOT_ATTEMPTED",
    "KAFKA_STORAGE_ERROR",
    "LOG_DIR_NOT_FOUND",
    "SASL_AUTHENTICATION_FAILED",
    "UNKNOWN_PRODUCER_ID",
    "REASSIGNMENT_IN_PROGRESS",
    "DELEGATION_TOKEN_AUTH_DISABLED",
    "DELEGATION_TOKEN_NOT_FOUND",
    "DELEGATION_TOKEN_OWNER_MISMATCH",
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    "DELEGATION_TOKEN_EXPIRED",
    "INVALID_PRINCIPAL_TYPE",
    "NON_EMPTY_GROUP",
    "GROUP_ID_NOT_FOUND",
    "FETCH_SESSION_ID_NOT_FOUND",
    "INVALID_FETCH_SESSION_EPOCH",
    "LISTENER_NOT_FOUND",
    "TOPIC_DELETION_DISABLED",
    "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH",
    "UNSUPPORTED_COMPRESSION_TYPE",
    "STALE_BROKER_EPOCH",
    "OFFSET_NOT_AVAILABLE",
    "MEMBER_ID_REQUIRED",
    "PREFERRED_LEADER_NOT_AVAILABLE",
    "GROUP_MAX_SIZE_REACHED",
    "FENCED_INSTANCE_ID",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    "ELECTION_NOT_NEEDED",
    "NO_REASSIGNMENT_IN_PROGRESS",
    "GROUP_SUBSCRIBED_TO_TOPIC",
    "INVALID_RECORD",
    "UNSTABLE_OFFSET_COMMIT",
    "THROTTLING_QUOTA_EXCEEDED",
    "PRODUCER_FENCED",
    "RESOURCE_NOT_FOUND",
    "DUPLICATE_RESOURCE",
    "UNACCEPTABLE_CREDENTIAL",
    "INCONSISTENT_VOTER_SET",
    "INVALID_UPDATE_VERSION",
    "FEATURE_UPDATE_FAILED",
    "PRINCIPAL_DESERIALIZATION_FAILURE",
    "SNAPSHOT_NOT_FOUND",
    "POSITION_OUT_OF_RANGE",
    "UNKNOWN_TOPIC_ID",
    "DUPLICATE_BROKER_REGISTRATION",
    "BROKER_ID_NOT_REGISTERED",
    "INCONSISTENT_TOPIC_ID",
    "INCONSISTENT_CLUSTER_ID",
    "TRANSACTIONAL_ID_NOT_FOUND",
    "FETCH_SESSION_TOPIC_ID_ERROR",
    "INELIGIBLE_REPLICA",
    "NEW_LEADER_ELECTED",
    "OFFSET_MOVED_TO_TIERED_STORAGE",
    "FENCED_MEMBER_EPOCH",
    "UNRELEASED_INSTANCE_ID",
    "UNSUPPORTED_ASSIGNOR",
    "STALE_MEMBER_EPOCH",
    "MISMATCHED_ENDPOINT_TYPE",
    "UNSUPPORTED_ENDPOINT_TYPE",
    "UNKNOWN_CONTROLLER_ID",
    "UNKNOWN_SUBSCRIPTION_ID",
    "TELEMETRY_TOO_LARGE",
    "INVALID_REGISTRATION",
    "TRANSACTION_ABORTABLE",
    "INVALID_RECORD_STATE",
    "SHARE_SESSION_NOT_FOUND",
    "INVALID_SHARE_SESSION_EPOCH",
    "FENCED_STATE_EPOCH",
    "INVALID_VOTER_KEY",
    "DUPLICATE_VOTER",
    "VOTER_NOT_FOUND",
];

/// `error.type` of a Kafka error code (`None`: no error).
pub fn error_name(code: i16) -> Option<&'static str> {
    match code {
        0 => None,
        -1 => Some("UNKNOWN_SERVER_ERROR"),
        c => Some(usize::try_from(c).ok().and_then(|c| ERROR_NAMES.get(c).copied()).unwrap_or("_OTHER")),
    }
}

/// Whether an API's `version` uses the flexible encoding (compact
/// strings, tagged fields), for the APIs whose bodies are read.
fn flexible(api: i16, version: i16) -> bool {
    match api {
        PRODUCE => version >= 9,
        FETCH => version >= 12,
        METADATA => version >= 9,
        OFFSET_COMMIT => version >= 8,
        JOIN_GROUP => version >= 6,
        HEARTBEAT | LEAVE_GROUP | SYNC_GROUP => version >= 4,
        _ => false,
    }
}

/// The request header at the head of `b`, if it is a plausible one (see
/// the module doc's send resync), and the frame's length: `(api key,
/// version, correlation id, frame length)`.
fn plausible_request(b: &[u8]) -> Option<(i16, i16, i32, u64)> {
    let mut r = R::new(b);
    let len = r.i32()?;
    let api = r.i16()?;
    let version = r.i16()?;
    let corr = r.i32()?;
    let client = r.i16()?;
    let ok = len >= 10
        && (0..=MAX_API_KEY).contains(&api)
        && (0..=MAX_API_VERSION).contains(&version)
        && corr >= 0
        && client >= -1
        && i32::from(client) <= len - 10;
    ok.then(|| (api, version, corr, len as u64 + 4))
}

/// Whether `b` starts with a whole plausible Kafka request (for
/// [`super::detect`]: the first send of a connection).
pub fn is_request_start(b: &[u8]) -> bool {
    plausible_request(b).is_some_and(|(.., len)| len <= b.len() as u64)
}

/// Kafka's fields besides the big-endian numbers.
trait KafkaFields<'a> {
    /// An unsigned varint (at most 10 bytes).
    fn uvarint(&mut self) -> Option<u64>;
    /// A zigzag varint.
    fn varint(&mut self) -> Option<i64>;
    /// A length: compact (uvarint, +1) or classic (`wide`: i32, else
    /// i16); `Some(None)` for null.
    fn len(&mut self, flex: bool, wide: bool) -> Option<Option<usize>>;
    /// A (nullable) string's bytes.
    fn string(&mut self, flex: bool) -> Option<Option<&'a [u8]>>;
    /// A (nullable) bytes or records field: its captured bytes (cut at
    /// the end of what was captured) and its declared length.
    fn bytes(&mut self, flex: bool) -> Option<(&'a [u8], usize)>;
    /// An array's element count (`None` read as 0), bounded.
    fn count(&mut self, flex: bool) -> Option<usize>;
    /// Skips a flexible struct's tagged fields.
    fn tags(&mut self, flex: bool) -> Option<()>;
    /// A topic id.
    fn uuid(&mut self) -> Option<[u8; 16]>;
}

impl<'a> KafkaFields<'a> for R<'a> {
    fn uvarint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn varint(&mut self) -> Option<i64> {
        let u = self.uvarint()?;
        Some((u >> 1) as i64 ^ -((u & 1) as i64))
    }

    fn len(&mut self, flex: bool, wide: bool) -> Option<Option<usize>> {
        let n: i64 = if flex {
            i64::try_from(self.uvarint()?).ok()? - 1
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        match n {
            -1 => Some(None),
            n if n < 0 => None,
            n => Some(Some(usize::try_from(n).ok()?)),
        }
    }

    fn string(&mut self, flex: bool) -> Option<Option<&'a [u8]>> {
        match self.len(flex, false)? {
            None => Some(None),
            Some(n) => Some(Some(self.take(n)?)),
        }
    }

    fn bytes(&mut self, flex: bool) -> Option<(&'a [u8], usize)> {
        let Some(n) = self.len(flex, true)? else { return Some((&[], 0)) };
        let avail = self.b.len() - self.at;
        Some((self.take(n.min(avail))?, n))
    }

    fn count(&mut self, flex: bool) -> Option<usize> {
        Some(self.len(flex, true)?.unwrap_or(0).min(MAX_ITEMS))
    }

    fn tags(&mut self, flex: bool) -> Option<()> {
        if flex {
            let n = self.uvarint()?;
            for _ in 0..n.min(MAX_ITEMS as u64) {
                self.uvarint()?;
                let size = usize::try_from(self.uvarint()?).ok()?;
                self.take(size)?;
            }
        }
        Some(())
    }

    fn uuid(&mut self) -> Option<[u8; 16]> {
        self.arr()
    }
}

/// A topic, as the wire names it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Topic {
    Name(String),
    Id([u8; 16]),
}

/// What a call's topics and partitions came to: one of each, or more.
#[derive(Debug, Default)]
struct Scope {
    topic: Option<Topic>,
    many_topics: bool,
    partition: Option<i32>,
    many_partitions: bool,
    /// The first partition's offset (Produce: base offset; Fetch: first
    /// batch's base offset; commit: the committed offset).
    offset: Option<i64>,
    error: Option<&'static str>,
}

impl Scope {
    fn topic(&mut self, t: Topic) {
        match &self.topic {
            None => self.topic = Some(t),
            Some(o) if *o != t => self.many_topics = true,
            Some(_) => {}
        }
    }

    fn partition(&mut self, p: i32, offset: Option<i64>) {
        match self.partition {
            None => {
                self.partition = Some(p);
                self.offset = offset;
            }
            Some(o) if o != p => self.many_partitions = true,
            Some(_) => {}
        }
    }

    /// The call's bytes were cut here: if more of its topics or
    /// partitions may follow unseen (`last` false), none is its one.
    fn cut(&mut self, last: bool) {
        if !last {
            self.many_topics = true;
            self.many_partitions = true;
        }
    }

    fn error(&mut self, code: i16) {
        if self.error.is_none() {
            self.error = error_name(code);
        }
    }
}

/// A v2 record batch's header bytes after base offset and length.
const BATCH_HEADER_REST: usize = 49;

/// Messages counted in record data, and their trace contexts.
#[derive(Debug, Default)]
struct Batches {
    count: u64,
    /// Every batch header was seen (the data was not cut by a LOST
    /// region, and every batch was of magic 2).
    known: bool,
    /// The first batch's base offset.
    base_offset: Option<i64>,
    /// The offsets of the data batches seen (control batches, a
    /// transaction's markers, left out): the first one's base offset and
    /// past the last one's last offset (a fetch's); the offsets they take,
    /// all together (a produce's: its batches' base offsets are the
    /// client's, 0, and the broker gives them consecutive offsets).
    offsets: Option<(i64, i64)>,
    spanned: u64,
}

impl Batches {
    /// Adds one partition's batches `b` to a call's. `cut`: that
    /// partition's data was cut short, so nothing after it in the call
    /// was captured — the call's topics and partitions and its count are
    /// known only if it was the call's `last`. Returns `cut` (the caller
    /// stops reading there).
    fn add(&mut self, b: &Batches, cut: bool, last: bool, scope: &mut Scope) -> bool {
        self.count += b.count;
        self.known &= b.known;
        if cut {
            scope.cut(last);
            self.known &= last;
        }
        cut
    }
}

/// Reads record data, `declared` bytes long on the wire of which `data`
/// was captured: batch headers for counts; uncompressed records'
/// `traceparent` headers. A batch whose header was seen is counted even
/// if its records were not; the count is known when every batch's header
/// was (the last one's end is the data's). `fetched`: a broker may end a
/// fetch's data with a partial batch, which the client drops: not
/// counted.
fn read_batches(data: &[u8], declared: usize, fetched: bool, op: &mut MsgOp, counts: &mut MsgCounts) -> Batches {
    let whole = data.len() == declared;
    let mut out = Batches { count: 0, known: true, base_offset: None, offsets: None, spanned: 0 };
    let mut r = R::new(data);
    while r.at < data.len() {
        let start = r.at;
        let head = (|| {
            let base = r.i64()?;
            let len = r.i32()?;
            r.take(4)?; // leader epoch
            let magic = r.i8()?;
            Some((base, len, magic))
        })();
        let Some((base, len, magic)) = head else {
            // A header cut: by the capture, or the broker's partial batch.
            out.known &= whole && fetched;
            break;
        };
        // A v2 batch's length covers its 49 header bytes after the first
        // 12; less is not a batch.
        let Some(len) = usize::try_from(len).ok().filter(|l| magic != 2 || *l >= BATCH_HEADER_REST) else {
            out.known = false;
            break;
        };
        let end = start.saturating_add(12).saturating_add(len);
        if magic != 2 {
            // Message sets of magic 0/1: not counted.
            out.known = false;
            if end > data.len() {
                break;
            }
            r.at = end;
            continue;
        }
        let rest = (|| {
            r.take(4)?; // crc
            let attributes = r.i16()?;
            let last_delta = r.i32()?;
            r.take(8 + 8 + 8 + 2 + 4)?;
            let n = r.i32()?;
            Some((attributes, last_delta, n))
        })();
        let Some((attributes, last_delta, n)) = rest else {
            out.known &= whole && fetched;
            break;
        };
        if end > data.len() && whole && fetched {
            // The broker's partial last batch.
            break;
        }
        out.base_offset.get_or_insert(base);
        out.count += u64::try_from(n).unwrap_or(0);
        // (a control batch, bit 5, holds a marker, no message)
        let past = u32::try_from(last_delta).ok().and_then(|d| base.checked_add(i64::from(d) + 1));
        if let (false, Some(past)) = (attributes & 0x20 != 0, past) {
            let first = out.offsets.map_or(base, |(f, _)| f);
            out.offsets = Some((first, past.max(out.offsets.map_or(past, |(_, p)| p))));
            out.spanned = out.spanned.saturating_add(u64::from(last_delta.unsigned_abs()) + 1);
        }
        if attributes & 7 == 0 {
            let records = &data[r.at.min(data.len())..end.min(data.len())];
            read_trace_headers(records, n, op, counts);
        }
        if end > data.len() {
            out.known &= whole || end == declared;
            break;
        }
        r.at = end;
    }
    out
}

/// The `traceparent` header of each of `n` uncompressed records.
fn read_trace_headers(records: &[u8], n: i32, op: &mut MsgOp, counts: &mut MsgCounts) {
    let mut r = R::new(records);
    for _ in 0..n.clamp(0, MAX_ITEMS as i32) {
        let one = (|| {
            let len = usize::try_from(r.varint()?).ok()?;
            let end = r.at.checked_add(len)?;
            let mut rec = R::new(r.b.get(r.at..end.min(r.b.len()))?);
            r.at = end;
            rec.take(1)?; // attributes
            rec.varint()?; // timestamp delta
            rec.varint()?; // offset delta
            for _ in 0..2 {
                // key, value: skipped, never read.
                let n = rec.varint()?;
                if n > 0 {
                    rec.take(usize::try_from(n).ok()?)?;
                }
            }
            let headers = rec.varint()?;
            for _ in 0..headers.clamp(0, 1000) {
                let klen = usize::try_from(rec.varint()?).ok()?;
                let key = rec.take(klen)?;
                let vlen = rec.varint()?;
                let value = if vlen > 0 { rec.take(usize::try_from(vlen).ok()?)? } else { &[] };
                if key == b"traceparent" {
                    if let Some(tp) = traceparent(value) {
                        op.link(tp, counts);
                    }
                }
            }
            Some(())
        })();
        if one.is_none() || r.at >= r.b.len() {
            return;
        }
    }
}

/// A request awaiting its answer.
#[derive(Debug)]
struct Pending {
    corr: i32,
    api: i16,
    version: i16,
    /// The op, for Produce, Fetch and OffsetCommit.
    op: Option<MsgOp>,
}

/// One Kafka client connection. See the module doc.
#[derive(Debug, Default)]
pub struct KafkaConn {
    send: Stream,
    recv: Stream,
    /// Requests awaiting answers, in the order they were sent.
    pending: VecDeque<Pending>,
    /// Names Metadata answers gave topic ids (Produce v13, Fetch v13+
    /// name topics by id only).
    topics: TopicIds,
}

impl KafkaConn {
    /// Requests awaiting answers.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Approximate bytes held.
    pub fn held_bytes(&self) -> usize {
        self.send.held()
            + self.recv.held()
            + self.pending.iter().map(|p| 64 + p.op.as_ref().map_or(0, |o| std::mem::size_of::<MsgOp>() + o.heap())).sum::<usize>()
            + self.topics.iter().map(|(_, n)| 40 + n.capacity()).sum::<usize>()
    }

    /// Forgets the pending requests (the caller counts them).
    pub(super) fn forget_pending(&mut self) {
        self.pending.clear();
    }

    /// Both directions lose their place (records went by unseen, or the
    /// connection is followed from mid-way).
    pub(super) fn lose_place(&mut self, _counts: &mut MsgCounts) {
        self.send.desync();
        self.recv.desync();
    }

    /// One record (its pieces valid, GAP pieces taken off).
    pub(super) fn feed(&mut self, send: bool, ts: u64, bytes: &[u8], out: &mut Out<'_>, counts: &mut MsgCounts) {
        let stream = if send { &self.send } else { &self.recv };
        if stream.desynced() && !self.resync(send, bytes, counts) {
            return;
        }
        let stream = if send { &mut self.send } else { &mut self.recv };
        let frame = |h: &[u8]| {
            let Some(len) = h.get(..4) else { return Frame::Need };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            let min = if send { 10 } else { 4 };
            if len < min {
                Frame::Bad
            } else {
                Frame::Len(len as u64 + 4)
            }
        };
        common::drain(stream, bytes, frame, counts, |m, counts| {
            if send {
                on_request(&mut self.pending, &self.topics, m, ts, out, counts);
            } else {
                on_response(&mut self.pending, &mut self.topics, m, ts, out, counts);
            }
            true
        });
    }

    /// Whether a record of a desynced direction starts at a boundary the
    /// module doc's rules prove; restarts the stream if so.
    fn resync(&mut self, send: bool, bytes: &[u8], counts: &mut MsgCounts) -> bool {
        let total: u64 = pieces::pieces(bytes)
            .flatten()
            .map(|p| match p {
                Piece::Bytes(b) => b.len() as u64,
                Piece::Lost(n) => u64::from(n),
            })
            .sum();
        let head = match pieces::pieces(bytes).next() {
            Some(Ok(Piece::Bytes(b))) => b,
            _ => return false,
        };
        let ok = if send {
            plausible_request(head).is_some_and(|(.., len)| len <= total)
        } else {
            let mut r = R::new(head);
            match (r.i32(), r.i32()) {
                (Some(len), Some(corr)) if len >= 4 => match self.pending.iter().position(|p| p.corr == corr) {
                    Some(i) => {
                        counts.unanswered += i as u64;
                        self.pending.drain(..i);
                        true
                    }
                    None => false,
                },
                _ => false,
            }
        };
        if ok {
            counts.resync += 1;
            if send {
                self.send.restart();
            } else {
                self.recv.restart();
            }
        }
        ok
    }
}

/// Topic id → name, oldest first.
type TopicIds = VecDeque<([u8; 16], String)>;

/// A topic's name: its own, or its id's from a Metadata answer, else the
/// id's 32 hex digits.
fn topic_name(topics: &TopicIds, t: Topic) -> String {
    match t {
        Topic::Name(n) => n,
        Topic::Id(id) => match topics.iter().find(|(i, _)| *i == id) {
            Some((_, n)) => n.clone(),
            None => id.iter().map(|b| format!("{b:02x}")).collect(),
        },
    }
}

/// A request: its header, then (Produce, OffsetCommit) its body.
fn on_request(pending: &mut VecDeque<Pending>, topics: &TopicIds, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) {
    let mut r = R::new(m.bytes);
    let header = (|| {
        r.take(4)?;
        let api = r.i16()?;
        let version = r.i16()?;
        let corr = r.i32()?;
        let client = r.string(false)?;
        Some((api, version, corr, client))
    })();
    let Some((api, version, corr, client)) = header else {
        counts.bad_messages += 1;
        return;
    };
    let flex = flexible(api, version);
    if matches!(api, JOIN_GROUP | HEARTBEAT | LEAVE_GROUP | SYNC_GROUP) {
        // (the group's name, what the client's polls are for: a note, no call)
        let group = r.tags(flex).and_then(|_| r.string(flex)).flatten();
        if let Some(group) = group.filter(|g| !g.is_empty()) {
            let mut note = MsgOp::new(MsgSystem::Kafka, None, "group", ts);
            note.client_id = client.map(|c| super::name(c, counts));
            note.consumer_group = Some(super::name(group, counts));
            note.membership = Some(if api == LEAVE_GROUP { Membership::Left } else { Membership::Member });
            done(out, note);
        }
    }
    let op = match api {
        PRODUCE if (3..=13).contains(&version) => Some(MsgOp::new(MsgSystem::Kafka, Some(OpType::Send), "send", ts)),
        FETCH if (4..=16).contains(&version) => Some(MsgOp::new(MsgSystem::Kafka, Some(OpType::Receive), "poll", ts)),
        OFFSET_COMMIT if (2..=10).contains(&version) => Some(MsgOp::new(MsgSystem::Kafka, Some(OpType::Settle), "commit", ts)),
        PRODUCE | FETCH | OFFSET_COMMIT => {
            counts.unsupported_versions += 1;
            None
        }
        _ => None,
    };
    let mut acks0 = false;
    let op = op.and_then(|mut op| {
        op.send_bytes = m.len;
        op.client_id = client.map(|c| super::name(c, counts));
        let body = (|| {
            r.tags(flex)?;
            match api {
                PRODUCE => {
                    let (scope, b, acks) = read_produce(&mut r, version, flex, topics, &mut op, counts);
                    acks0 = acks == Some(0);
                    set_scope(&mut op, scope, &b, topics);
                }
                OFFSET_COMMIT => {
                    let scope = read_commit(&mut r, version, flex, &mut op, counts);
                    set_scope(&mut op, scope, &Batches::default(), topics);
                }
                _ => {}
            }
            Some(())
        })();
        if body.is_none() && m.whole {
            counts.bad_messages += 1;
            return None;
        }
        Some(op)
    });
    if acks0 {
        // No answer will come: the call ends with its send (and its
        // messages' offsets are never known).
        if let Some(mut op) = op {
            op.ranges.clear();
            done(out, op);
        }
        return;
    }
    if pending.len() >= MAX_PENDING {
        pending.pop_front();
        counts.too_many_pending += 1;
        counts.unanswered += 1;
    }
    pending.push_back(Pending { corr, api, version, op });
}

/// Topic, partition and offset of `scope` onto `op` (when one of each),
/// and the count of `b` when it is known.
fn set_scope(op: &mut MsgOp, scope: Scope, b: &Batches, topics: &TopicIds) {
    if !scope.many_topics {
        op.destination = scope.topic.map(|t| topic_name(topics, t));
    }
    if !scope.many_partitions && !scope.many_topics {
        op.partition = scope.partition;
        op.offset = op.offset.or(scope.offset);
    }
    if b.known && op.op_type != Some(OpType::Settle) {
        op.message_count = u32::try_from(b.count).ok();
    }
    op.error_type = op.error_type.or(scope.error);
}

/// A topic's name or id.
fn read_topic(r: &mut R<'_>, by_id: bool, flex: bool, counts: &mut MsgCounts) -> Option<Topic> {
    if by_id {
        Some(Topic::Id(r.uuid()?))
    } else {
        Some(Topic::Name(r.string(flex)?.map(|n| name(n, counts)).unwrap_or_default()))
    }
}

/// Produce request body: `(scope, batches, acks)`; what was read before
/// the bytes ran out stays. Data cut by the capture (its LOST middle)
/// ends the reading: the count and the scope stay known only when the
/// cut data was the request's last partition.
fn read_produce(
    r: &mut R<'_>,
    version: i16,
    flex: bool,
    topics: &TopicIds,
    op: &mut MsgOp,
    counts: &mut MsgCounts,
) -> (Scope, Batches, Option<i16>) {
    let mut scope = Scope::default();
    let mut all = Batches { known: true, ..Batches::default() };
    let mut acks = None;
    let done = (|| {
        r.string(flex)?; // transactional id
        acks = Some(r.i16()?);
        r.i32()?; // timeout
        let n_topics = r.count(flex)?;
        for t in 0..n_topics {
            let topic = read_topic(r, version >= 13, flex, counts)?;
            scope.topic(topic.clone());
            let partitions = r.count(flex)?;
            for i in 0..partitions {
                let p = r.i32()?;
                let (data, declared) = r.bytes(flex)?;
                let b = read_batches(data, declared, false, op, counts);
                scope.partition(p, None);
                if let Ok(count @ 1..) = u32::try_from(b.spanned) {
                    // (the broker's answer gives the base offset)
                    op.range(OffsetRange { topic: topic_name(topics, topic.clone()), partition: p, base: -1, count }, counts);
                }
                if all.add(&b, data.len() < declared, t + 1 == n_topics && i + 1 == partitions, &mut scope) {
                    return Some(());
                }
                r.tags(flex)?;
            }
            r.tags(flex)?;
        }
        Some(())
    })();
    if done.is_none() {
        scope.cut(false);
        all.known = false;
    }
    (scope, all, acks)
}

/// OffsetCommit request body.
fn read_commit(r: &mut R<'_>, version: i16, flex: bool, op: &mut MsgOp, counts: &mut MsgCounts) -> Scope {
    let mut scope = Scope::default();
    let _ = (|| {
        op.consumer_group = r.string(flex)?.map(|g| name(g, counts));
        r.i32()?; // generation
        r.string(flex)?; // member id
        if version >= 7 {
            r.string(flex)?; // group instance id
        }
        if (2..=4).contains(&version) {
            r.i64()?; // retention
        }
        for _ in 0..r.count(flex)? {
            scope.topic(read_topic(r, version >= 10, flex, counts)?);
            for _ in 0..r.count(flex)? {
                let p = r.i32()?;
                let offset = r.i64()?;
                scope.partition(p, Some(offset));
                if version >= 6 {
                    r.i32()?; // leader epoch
                }
                r.string(flex)?; // metadata: skipped
                r.tags(flex)?;
            }
            r.tags(flex)?;
        }
        Some(())
    })();
    scope
}

/// A response: paired by correlation id, then read.
fn on_response(pending: &mut VecDeque<Pending>, topics: &mut TopicIds, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) {
    let mut r = R::new(m.bytes);
    let Some(corr) = r.take(4).and_then(|_| r.i32()) else {
        counts.bad_messages += 1;
        return;
    };
    let Some(i) = pending.iter().position(|p| p.corr == corr) else {
        counts.unpaired_answers += 1;
        return;
    };
    counts.unanswered += i as u64;
    pending.drain(..i);
    let Some(p) = pending.pop_front() else { return };
    let flex = flexible(p.api, p.version) && p.api != API_VERSIONS;
    let Some(mut op) = p.op else {
        if p.api == METADATA && p.version >= 10 {
            let _ = r.tags(flex).and_then(|_| read_metadata(&mut r, p.version, topics, counts));
        }
        counts.other_requests += 1;
        return;
    };
    op.end_ns = ts.max(op.start_ns);
    op.recv_bytes = m.len;
    let read = (|| {
        r.tags(flex)?;
        match p.api {
            PRODUCE => {
                let scope = read_produce_response(&mut r, p.version, flex, topics, &mut op.ranges, counts);
                op.error_type = scope.error;
                if op.partition.is_some() && !scope.many_partitions && !scope.many_topics {
                    // -1: no offset (acks=0 brokers, errors).
                    op.offset = scope.offset.filter(|o| *o >= 0);
                }
            }
            FETCH => {
                let (scope, b) = read_fetch_response(&mut r, p.version, flex, topics, &mut op, counts);
                if b.count == 0 && scope.error.is_none() && b.known {
                    return Some(false);
                }
                set_scope(&mut op, scope, &b, topics);
            }
            OFFSET_COMMIT => {
                let mut scope = Scope::default();
                let _ = read_commit_response(&mut r, p.version, flex, &mut scope);
                op.error_type = scope.error;
            }
            _ => {}
        }
        Some(true)
    })();
    // (a partition the answer gave no offset, or whose answer was not read:
    // its messages' offsets are unknown)
    op.ranges.retain(|r| r.base >= 0);
    match read {
        Some(true) => done(out, op),
        Some(false) => counts.empty_fetches += 1,
        None if m.whole => counts.bad_messages += 1,
        None => done(out, op),
    }
}

/// Produce response: the partitions' errors and base offsets (onto the
/// request's `ranges` of the same topic and partition, when the
/// partition's write succeeded).
fn read_produce_response(
    r: &mut R<'_>,
    version: i16,
    flex: bool,
    topics: &TopicIds,
    ranges: &mut [OffsetRange],
    counts: &mut MsgCounts,
) -> Scope {
    let mut scope = Scope::default();
    let _ = (|| {
        for _ in 0..r.count(flex)? {
            let topic = read_topic(r, version >= 13, flex, counts)?;
            let name = (!ranges.is_empty()).then(|| topic_name(topics, topic.clone()));
            scope.topic(topic);
            for _ in 0..r.count(flex)? {
                let p = r.i32()?;
                let code = r.i16()?;
                let base = r.i64()?;
                scope.partition(p, Some(base));
                scope.error(code);
                if code == 0 && base >= 0 {
                    if let Some(range) = ranges.iter_mut().find(|r| r.base < 0 && r.partition == p && Some(&r.topic) == name.as_ref()) {
                        range.base = base;
                    }
                }
                r.i64()?; // log append time
                if version >= 5 {
                    r.i64()?; // log start offset
                }
                if version >= 8 {
                    for _ in 0..r.count(flex)? {
                        r.i32()?;
                        r.string(flex)?; // error message: never kept
                        r.tags(flex)?;
                    }
                    r.string(flex)?;
                }
                r.tags(flex)?;
            }
            r.tags(flex)?;
        }
        Some(())
    })();
    scope
}

/// Fetch response: topics, partitions, record data (cut as in
/// [`read_produce`]).
fn read_fetch_response(
    r: &mut R<'_>,
    version: i16,
    flex: bool,
    topics: &TopicIds,
    op: &mut MsgOp,
    counts: &mut MsgCounts,
) -> (Scope, Batches) {
    let mut scope = Scope::default();
    let mut all = Batches { known: true, ..Batches::default() };
    let done = (|| {
        r.i32()?; // throttle
        if version >= 7 {
            scope.error(r.i16()?);
            r.i32()?; // session id
        }
        let n_topics = r.count(flex)?;
        for t in 0..n_topics {
            let topic = read_topic(r, version >= 13, flex, counts)?;
            let partitions = r.count(flex)?;
            for i in 0..partitions {
                let p = r.i32()?;
                let code = r.i16()?;
                scope.error(code);
                r.take(8 + 8)?; // high watermark, last stable offset
                if version >= 5 {
                    r.i64()?; // log start offset
                }
                if let Some(n) = r.len(flex, true)? {
                    for _ in 0..n.min(MAX_ITEMS) {
                        r.take(16)?;
                        r.tags(flex)?;
                    }
                }
                if version >= 11 {
                    r.i32()?; // preferred read replica
                }
                let (data, declared) = r.bytes(flex)?;
                let b = read_batches(data, declared, true, op, counts);
                if b.count > 0 || !b.known {
                    scope.topic(topic.clone());
                    scope.partition(p, b.base_offset);
                }
                if let Some((first, past)) = b.offsets.filter(|(first, _)| *first >= 0) {
                    if let Ok(count @ 1..) = u32::try_from(past.saturating_sub(first)) {
                        op.range(OffsetRange { topic: topic_name(topics, topic.clone()), partition: p, base: first, count }, counts);
                    }
                }
                if all.add(&b, data.len() < declared, t + 1 == n_topics && i + 1 == partitions, &mut scope) {
                    return Some(());
                }
                r.tags(flex)?;
            }
            r.tags(flex)?;
        }
        Some(())
    })();
    if done.is_none() {
        scope.cut(false);
        all.known = false;
    }
    (scope, all)
}

/// OffsetCommit response: the first error.
fn read_commit_response(r: &mut R<'_>, version: i16, flex: bool, scope: &mut Scope) -> Option<()> {
    if version >= 3 {
        r.i32()?;
    }
    for _ in 0..r.count(flex)? {
        if version >= 10 {
            r.uuid()?;
        } else {
            r.string(flex)?;
        }
        for _ in 0..r.count(flex)? {
            r.i32()?;
            scope.error(r.i16()?);
            r.tags(flex)?;
        }
        r.tags(flex)?;
    }
    Some(())
}

/// Metadata response (v10+): topic ids and their names.
fn read_metadata(r: &mut R<'_>, version: i16, topics: &mut TopicIds, counts: &mut MsgCounts) -> Option<()> {
    let flex = flexible(METADATA, version);
    r.i32()?; // throttle
    for _ in 0..r.count(flex)? {
        r.i32()?;
        r.string(flex)?;
        r.i32()?;
        r.string(flex)?;
        r.tags(flex)?;
    }
    r.string(flex)?; // cluster id
    r.i32()?; // controller
    for _ in 0..r.count(flex)? {
        r.i16()?;
        let topic = r.string(flex)?;
        let id = r.uuid()?;
        if let Some(t) = topic {
            if id != [0; 16] && !topics.iter().any(|(i, _)| *i == id) {
                if topics.len() >= MAX_TOPIC_IDS {
                    topics.pop_front();
                }
                topics.push_back((id, name(t, counts)));
            }
        }
        r.i8()?; // internal
        for _ in 0..r.count(flex)? {
            r.take(2 + 4 + 4 + 4)?;
            for _ in 0..3 {
                let n = r.count(flex)?;
                r.take(n.checked_mul(4)?)?;
            }
            r.tags(flex)?;
        }
        r.i32()?; // authorized operations
        r.tags(flex)?;
    }
    Some(())
}

#[cfg(test)]
mod tests;
