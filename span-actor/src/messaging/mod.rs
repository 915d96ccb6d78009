//! Messaging wire protocols in user space: the kernel's records of a
//! CLIENT's connection to a broker in, one [`MsgOp`] per messaging call
//! out (a PRODUCER span for a send, a CONSUMER span for a receive, under
//! the OpenTelemetry messaging conventions). Pure logic: no I/O, no clock,
//! no global state. Wired into spans as a family of the stream table:
//! see "Wiring" below.
//!
//! The records are the database module's ([`crate::db::pieces`]: the head
//! of each syscall's bytes, a LOST count for its middle, its tail, GAP
//! pieces for records the ring had no room for), and each direction is
//! framed by the same [`crate::db::stream::Stream`]: a message whose
//! length is known survives a LOST region inside it (it comes out cut),
//! a header in a LOST region is a desync, and a protocol recovers only at
//! a boundary it can prove (each module says which).
//!
//! **Nothing secret, ever.** No payload, record key, header value (but a
//! well-formed W3C `traceparent`, parsed), MQTT user property (but
//! `traceparent`), username, password, will message, authentication
//! data, AMQP SASL response or NATS `CONNECT` credential is kept or
//! output. What is kept from the wire is names the conventions ask for
//! (topic, exchange, routing key, subject, client id, consumer group),
//! bounded to [`MAX_NAME`] bytes, and numbers.
//!
//! # Layout
//! - [`kafka`]: the Kafka protocol, client side: Produce, Fetch,
//!   OffsetCommit as ops; Metadata read for topic ids; the rest of the
//!   APIs paired and counted.
//! - [`mqtt`]: MQTT 3.1.1 and 5, client side: PUBLISH both ways with its
//!   QoS 1/2 acknowledgements, SUBSCRIBE/UNSUBSCRIBE, CONNECT's client id.
//! - [`amqp`]: AMQP 0-9-1 (RabbitMQ), client side: frames of multiplexed
//!   channels, `basic.publish` (publisher confirms), `basic.deliver`,
//!   `basic.get`, the client's acks, channel and connection errors.
//! - [`nats`]: the NATS client protocol: PUB/HPUB, MSG/HMSG, SUB/UNSUB,
//!   verbose mode's `+OK`/`-ERR`.
//! - here: [`MsgOp`], [`MsgCounts`], [`MsgSystem`], [`OpType`],
//!   [`detect`], [`detect_server_first`] and [`MsgConn`] (records in, GAP
//!   and TLS handled once); [`judge`], the messaging conventions' span
//!   parts of an op.
//! - `testdata/`: real conversations (kafka-python against the Tansu
//!   broker, paho-mqtt against mosquitto, pika and amqp-tools against
//!   RabbitMQ, nats-py against nats-server), one connection a file, read
//!   by the modules' tests (`kafka/tests.rs`, `mqtt/tests.rs`,
//!   `amqp/tests.rs`, `nats/tests.rs`).
//!
//! # Attributes (checked against the semantic-conventions registry)
//! `messaging.system` ([`MsgSystem::name`]: `kafka`, `rabbitmq`; `mqtt`
//! and `nats` are not in the registry's list, which is open: the
//! conventions say to use the system's own name then),
//! `messaging.operation.type` ([`OpType::name`]), `messaging.operation.name`,
//! `messaging.destination.name`, `messaging.destination.template` (an
//! MQTT or NATS subscription's filter with wildcards),
//! `messaging.destination.partition.id`, `messaging.kafka.offset`,
//! `messaging.rabbitmq.destination.routing_key`,
//! `messaging.rabbitmq.message.delivery_tag`, `messaging.message.body.size`,
//! `messaging.batch.message_count`, `messaging.consumer.group.name`,
//! `messaging.client.id`, `error.type`, and the span kind from
//! [`OpType::kind`]. Each field of [`MsgOp`] names its key.
//!
//! # Memory per connection
//! Two streams of at most [`crate::db::stream::MAX_BUFFERED`] (64 KiB)
//! unparsed bytes each, the requests awaiting answers (at most
//! [`MAX_PENDING`], each an op: a few names of at most [`MAX_NAME`]
//! bytes and at most [`MAX_LINKS`] trace contexts), Kafka's topic-id
//! names (at most `kafka::MAX_TOPIC_IDS`), AMQP's channels and consumers
//! (at most `amqp::MAX_CHANNELS`, `amqp::MAX_CONSUMERS`) and NATS's
//! subscriptions (at most `nats::MAX_SUBS`). [`MsgConn::held_bytes`]
//! counts it; about 2 × 256 KiB (the streams' buffers at their largest
//! capacity) + 256 × 2 KiB + 256 × 300 B ≈ 1.1 MiB for a hostile Kafka
//! connection (AMQP's and NATS's worst cases are below 1.5 MiB: each
//! module's doc), a few KiB for an idle one.
//!
//! # Wiring
//! [`FAMILY`] is this module's entry in [`crate::stream_table::FAMILIES`]:
//! the stream table keeps a [`MsgConn`] per broker connection (picking
//! its system with [`detect_bytes`] (the client's first bytes) or, for a
//! protocol whose server speaks first (NATS), [`detect_server_first`],
//! else [`detect_port`]), feeds it the connection's records, makes each
//! [`MsgOp`] an operation (`operation::Call::Messaging`, linked to the
//! request its send was made for) that [`judge`] makes a span of (of the
//! kind [`OpType::kind`] gives, linked to [`MsgOp::links`]), and adds
//! [`MsgCounts::labelled`] to `ringtail_dropped_events_total`.

pub mod amqp;
mod common;
pub mod groups;
pub mod kafka;
pub mod mqtt;
pub mod nats;
pub mod through;

pub use ipc_schema::SpanKind;
use ipc_schema::{MsgCall, SpanLink, Text};

use crate::db::pieces;
use crate::ids::TraceParent;
use crate::operation::{Addrs, Call, Conn, SpanParts};
use crate::stream_table::{calls_of, Calls, Family, Followed, StreamConn};

/// Calls awaiting an answer kept per connection (past it the oldest is
/// given up: counted `too_many_pending`).
pub const MAX_PENDING: usize = 256;

/// Longest name kept (a topic, client id, consumer group): Kafka's topic
/// names are at most 249 bytes; longer ones are cut (on a UTF-8 boundary)
/// and counted `names_cut`.
pub const MAX_NAME: usize = 255;

/// Trace contexts kept per op (a batch's messages each may carry one;
/// past it they are not kept, counted `links_dropped`).
pub const MAX_LINKS: usize = 16;

/// Partitions' offset ranges kept per op ([`MsgOp::ranges`]; past it they
/// are not kept, counted `ranges_dropped`).
pub const MAX_RANGES: usize = 16;

/// The messages of one Kafka partition a call sent or received: offsets
/// `base .. base + count` (the broker's identity of each message, which
/// links a consumer to its producer with no header:
/// [`through::Producers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRange {
    /// The topic's name (or, named by id and not yet by a Metadata
    /// answer, its id in hex: [`MsgOp::destination`]'s rule).
    pub topic: String,
    pub partition: i32,
    /// The first message's offset (a Produce's: the base offset the broker
    /// answered; until then -1).
    pub base: i64,
    /// Offsets the messages take (a batch's last offset delta + 1, summed).
    pub count: u32,
}

impl OffsetRange {
    /// Past its last offset (`None` if it would overflow).
    pub fn end(&self) -> Option<i64> {
        self.base.checked_add(i64::from(self.count))
    }
}

/// A messaging system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgSystem {
    /// Apache Kafka (and compatible brokers: Redpanda, Tansu...).
    Kafka,
    /// MQTT 3.1.1 or 5.
    Mqtt,
    /// RabbitMQ (AMQP 0-9-1).
    Rabbitmq,
    /// NATS (core protocol).
    Nats,
}

impl MsgSystem {
    /// `messaging.system`.
    pub fn name(self) -> &'static str {
        match self {
            MsgSystem::Kafka => "kafka",
            MsgSystem::Mqtt => "mqtt",
            MsgSystem::Rabbitmq => "rabbitmq",
            MsgSystem::Nats => "nats",
        }
    }
}

/// `messaging.operation.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpType {
    /// Messages handed to the broker (Kafka Produce, an MQTT client's
    /// PUBLISH): a PRODUCER span.
    Send,
    /// Messages the client got from the broker (a Kafka Fetch's records,
    /// a PUBLISH the broker delivered): a CONSUMER span. MQTT's delivery
    /// is pushed, but what the wire shows is the client receiving it;
    /// its processing (`process`) is not seen.
    Receive,
    /// Messages the broker pushed, from their delivery to the client's
    /// settling them, which brackets their processing (an AMQP
    /// `basic.deliver` to a consumer that acknowledges): a CONSUMER span.
    Process,
    /// Messages settled (Kafka OffsetCommit; AMQP `basic.ack`, `nack`,
    /// `reject`): a CLIENT span.
    Settle,
}

impl OpType {
    /// `messaging.operation.type`.
    pub fn name(self) -> &'static str {
        match self {
            OpType::Send => "send",
            OpType::Receive => "receive",
            OpType::Process => "process",
            OpType::Settle => "settle",
        }
    }

    /// The span kind the conventions give it (send: PRODUCER; receive,
    /// process: CONSUMER; settle: CLIENT).
    pub fn kind(self) -> SpanKind {
        match self {
            OpType::Send => SpanKind::Producer,
            OpType::Receive | OpType::Process => SpanKind::Consumer,
            OpType::Settle => SpanKind::Client,
        }
    }
}

/// What a client's request said of its consumer group membership (Kafka's
/// JoinGroup, SyncGroup, Heartbeat: a member; LeaveGroup: no more): an
/// op that is a note, no call and no span, naming the group
/// ([`MsgOp::consumer_group`]) of the client's ([`MsgOp::client_id`])
/// polls, which a Fetch does not name (`Groups` in the transformer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    Member,
    Left,
}

/// One messaging call, in the form its span carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgOp {
    /// `messaging.system`.
    pub system: MsgSystem,
    /// `messaging.operation.type` (`None`: not a messaging operation of
    /// the conventions, e.g. MQTT `subscribe`).
    pub op_type: Option<OpType>,
    /// `messaging.operation.name`: a fixed word (`send`, `poll`,
    /// `commit`, `publish`, `subscribe`...), never from the wire.
    pub op_name: &'static str,
    /// `messaging.destination.name`: the topic, when the call has one
    /// (a Kafka call over several topics has none); RabbitMQ's exchange
    /// (`Some("")`: the default exchange, as its conventions say); a NATS
    /// subject.
    pub destination: Option<String>,
    /// `messaging.destination.template`: an MQTT topic filter with
    /// wildcards (a SUBSCRIBE's).
    pub template: Option<String>,
    /// `messaging.destination.partition.id`: when the call is on one
    /// partition.
    pub partition: Option<i32>,
    /// `messaging.rabbitmq.destination.routing_key`: when not empty.
    pub routing_key: Option<String>,
    /// `messaging.rabbitmq.message.delivery_tag`: a delivery's tag (a
    /// settle's: the tag it names).
    pub delivery_tag: Option<u64>,
    /// `messaging.message.body.size`: a single message's body bytes, from
    /// its declared length (AMQP's content header, NATS's payload length
    /// less its headers); the body itself is never read.
    pub body_size: Option<u64>,
    /// `messaging.kafka.offset`: the first message's offset (Produce: the
    /// base offset the broker assigned; Fetch: the first batch's base
    /// offset; OffsetCommit: the committed offset), one partition only.
    pub offset: Option<i64>,
    /// A membership note, no call ([`Membership`]).
    pub membership: Option<Membership>,
    /// The partitions' offset ranges the call sent (Produce, once answered)
    /// or received (Fetch), at most [`MAX_RANGES`]: Kafka only.
    pub ranges: Vec<OffsetRange>,
    /// `messaging.batch.message_count`: messages in the call, when every
    /// batch header was seen (Kafka: from record-batch headers, compressed
    /// batches included; MQTT: none, a PUBLISH is one message).
    pub message_count: Option<u32>,
    /// `messaging.consumer.group.name` (Kafka OffsetCommit; a NATS queue
    /// group).
    pub consumer_group: Option<String>,
    /// `messaging.client.id`: Kafka's request-header client id, MQTT's
    /// CONNECT client identifier.
    pub client_id: Option<String>,
    /// `error.type`: Kafka's error name (`UNKNOWN_TOPIC_OR_PARTITION`),
    /// MQTT's reason code in decimal (`135`); AMQP's reply-code name
    /// (`NOT_FOUND`); a NATS `-ERR`'s words; `_OTHER` when unknown.
    pub error_type: Option<&'static str>,
    /// MQTT's QoS (0, 1, 2): not an attribute of the conventions, kept
    /// for the caller to decide.
    pub qos: Option<u8>,
    /// The `traceparent`s the messages carried (Kafka record headers,
    /// MQTT 5 user properties), at most [`MAX_LINKS`]: span links.
    pub links: Vec<TraceParent>,
    /// CLOCK_MONOTONIC ns of the record that carried the call's start
    /// (the request's send; a delivered PUBLISH's recv).
    pub start_ns: u64,
    /// ... and of its end (the answer; the client's acknowledgement; the
    /// start itself when nothing answers: QoS 0, Kafka `acks=0`).
    pub end_ns: u64,
    /// Bytes of the request (as framed, LOST bytes included).
    pub send_bytes: u64,
    /// Bytes of the answer.
    pub recv_bytes: u64,
}

impl MsgOp {
    /// A call as far as its start tells.
    pub(crate) fn new(system: MsgSystem, op_type: Option<OpType>, op_name: &'static str, start_ns: u64) -> MsgOp {
        MsgOp {
            system,
            op_type,
            op_name,
            destination: None,
            template: None,
            routing_key: None,
            delivery_tag: None,
            body_size: None,
            partition: None,
            offset: None,
            membership: None,
            ranges: Vec::new(),
            message_count: None,
            consumer_group: None,
            client_id: None,
            error_type: None,
            qos: None,
            links: Vec::new(),
            start_ns,
            end_ns: start_ns,
            send_bytes: 0,
            recv_bytes: 0,
        }
    }

    /// Bytes it holds on the heap (for [`MsgConn::held_bytes`]).
    pub fn heap(&self) -> usize {
        [&self.destination, &self.template, &self.routing_key, &self.consumer_group, &self.client_id]
            .iter()
            .map(|s| s.as_ref().map_or(0, String::capacity))
            .sum::<usize>()
            + self.links.capacity() * std::mem::size_of::<TraceParent>()
            + self.ranges.iter().map(|r| r.topic.capacity()).sum::<usize>()
            + self.ranges.capacity() * std::mem::size_of::<OffsetRange>()
    }

    /// Keeps a trace context the call's messages carried.
    pub(crate) fn link(&mut self, tp: TraceParent, counts: &mut MsgCounts) {
        if self.links.len() < MAX_LINKS {
            self.links.push(tp);
        } else {
            counts.links_dropped += 1;
        }
    }

    /// Keeps a partition's offset range.
    pub(crate) fn range(&mut self, r: OffsetRange, counts: &mut MsgCounts) {
        if self.ranges.len() < MAX_RANGES {
            self.ranges.push(r);
        } else {
            counts.ranges_dropped += 1;
        }
    }
}

/// What the messaging conventions make of an op (a client's, over
/// `conn`): the span kind of its operation type (CLIENT when it has none),
/// named `{operation name} {destination}` where the destination is the
/// template if there is one, else the destination's name (but an empty
/// one: RabbitMQ's default exchange, named `""` in its attribute), else
/// the broker's `address:port` (a Kafka call over several topics; a
/// publish to the default exchange); its
/// `messaging.*` attributes as the parsers decided them, the trace
/// contexts its messages carried as links; the server is its peer.
/// Nothing of a message's payload, key or headers is in an op, so none is
/// in its span.
pub fn judge(op: MsgOp, conn: &Conn, addrs: &mut Addrs) -> SpanParts {
    let MsgOp {
        system,
        op_type,
        op_name,
        destination,
        template,
        partition,
        routing_key,
        delivery_tag,
        body_size,
        offset,
        membership: _,
        ranges: _,
        message_count,
        consumer_group,
        client_id,
        error_type,
        qos: _,
        links,
        start_ns: _,
        end_ns: _,
        send_bytes: _,
        recv_bytes: _,
    } = op;
    let peer_ip = addrs.text(&conn.peer);
    // A NATS request's reply subject (and its client's subscription to
    // them), one a client or a request: no name, no series of its own.
    let temporary = system == MsgSystem::Nats && [&destination, &template].into_iter().flatten().any(|d| d.starts_with(nats::INBOX));
    let name = match template.as_deref().or(destination.as_deref()).filter(|d| !d.is_empty()) {
        _ if temporary => op_name.to_owned(),
        Some(d) => format!("{op_name} {d}"),
        None if peer_ip.contains(':') => format!("{op_name} [{peer_ip}]:{}", conn.peer.port),
        None => format!("{op_name} {peer_ip}:{}", conn.peer.port),
    };
    let call = MsgCall {
        system: Text::Static(system.name()),
        operation_type: op_type.map(|t| Text::Static(t.name())),
        operation_name: Text::Static(op_name),
        destination: destination.map(Text::Owned),
        template: template.map(Text::Owned),
        subscription: None,
        partition: partition.map(|p| Text::Owned(p.to_string())),
        consumer_group: consumer_group.map(Text::Owned),
        client_id: client_id.map(Text::Owned),
        routing_key: routing_key.map(Text::Owned),
        error_type: error_type.map(Text::Static),
        // (only Kafka's parser sets an offset)
        kafka_offset: offset,
        message_count: message_count.map(u64::from),
        body_size,
        delivery_tag,
        temporary,
        anonymous: false,
    };
    let error = call.error_type.is_some();
    SpanParts {
        kind: Some(op_type.map_or(SpanKind::Client, OpType::kind)),
        links: links
            .iter()
            .take(ipc_schema::MAX_LINKS)
            .map(|tp| SpanLink { trace_id: tp.trace_id, span_id: tp.span_id, trace_flags: tp.flags })
            .collect(),
        ..SpanParts::to_peer(conn, addrs, Text::Owned(name), error, ipc_schema::Call::Messaging(call))
    }
}

/// A `traceparent` value from the wire, if it is one.
pub(crate) fn traceparent(b: &[u8]) -> Option<TraceParent> {
    if b.len() > 64 {
        return None;
    }
    crate::ids::parse_traceparent(std::str::from_utf8(b).ok()?)
}

/// A name from the wire, bounded to [`MAX_NAME`] (counted when cut).
pub(crate) fn name(b: &[u8], counts: &mut MsgCounts) -> String {
    if b.len() > MAX_NAME {
        counts.names_cut += 1;
    }
    crate::db::text(b, MAX_NAME)
}

/// What the parsers dropped or could not know, by reason. Reasons are
/// fixed (metric label values); add with [`MsgCounts::add`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MsgCounts {
    /// Records whose pieces were malformed (the connection was given up).
    pub malformed: u64,
    /// Times a direction lost its place.
    pub desync: u64,
    /// Times a direction found its place again at a provable boundary.
    pub resync: u64,
    /// Calls whose request was seen but whose answer never could be paired
    /// (desync, too many pending, closed): no op.
    pub unanswered: u64,
    /// Answers with no request waiting (the request was not seen).
    pub unpaired_answers: u64,
    /// Requests over [`MAX_PENDING`] awaiting answers: the oldest given up.
    pub too_many_pending: u64,
    /// Messages longer than the stream keeps: read from their head, the
    /// rest skipped (their counts may be unknown).
    pub too_large: u64,
    /// Messages that could not be read (a field past its end, a bad
    /// length): no op.
    pub bad_messages: u64,
    /// Kafka requests of APIs that are not messaging calls (ApiVersions,
    /// Metadata, FindCoordinator, JoinGroup, Heartbeat...): paired, no op.
    pub other_requests: u64,
    /// Kafka Fetches that returned no record: no op (a consumer polls all
    /// the time).
    pub empty_fetches: u64,
    /// Kafka API versions outside those read (the request still paired).
    pub unsupported_versions: u64,
    /// Control packets, frames and commands that are no call (MQTT
    /// CONNECT, PINGREQ; AMQP connection and channel methods, heartbeats;
    /// NATS INFO, CONNECT, PING, PONG).
    pub control_packets: u64,
    /// AMQP `basic.get`s the broker answered `get-empty`: no op (a
    /// polling consumer asks all the time).
    pub empty_gets: u64,
    /// AMQP channels past `amqp::MAX_CHANNELS` (the oldest forgotten).
    pub too_many_channels: u64,
    /// Names longer than [`MAX_NAME`], cut.
    pub names_cut: u64,
    /// Trace contexts past [`MAX_LINKS`] on one op.
    pub links_dropped: u64,
    /// Kafka partitions' offset ranges past [`MAX_RANGES`] on one op
    /// (their messages are not linked to their producers).
    pub ranges_dropped: u64,
    /// Records ignored because the connection is TLS (socket bytes are
    /// ciphertext).
    pub ciphertext_records: u64,
    /// Connections given up for good.
    pub given_up: u64,
    /// Calls awaiting answers when a record told of records the kernel's
    /// ring had no room for.
    pub calls_lost: u64,
}

impl MsgCounts {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &MsgCounts) {
        let MsgCounts {
            malformed,
            desync,
            resync,
            unanswered,
            unpaired_answers,
            too_many_pending,
            too_large,
            bad_messages,
            other_requests,
            empty_fetches,
            unsupported_versions,
            control_packets,
            empty_gets,
            too_many_channels,
            names_cut,
            links_dropped,
            ranges_dropped,
            ciphertext_records,
            given_up,
            calls_lost,
        } = *other;
        self.malformed += malformed;
        self.desync += desync;
        self.resync += resync;
        self.unanswered += unanswered;
        self.unpaired_answers += unpaired_answers;
        self.too_many_pending += too_many_pending;
        self.too_large += too_large;
        self.bad_messages += bad_messages;
        self.other_requests += other_requests;
        self.empty_fetches += empty_fetches;
        self.unsupported_versions += unsupported_versions;
        self.control_packets += control_packets;
        self.empty_gets += empty_gets;
        self.too_many_channels += too_many_channels;
        self.names_cut += names_cut;
        self.links_dropped += links_dropped;
        self.ranges_dropped += ranges_dropped;
        self.ciphertext_records += ciphertext_records;
        self.given_up += given_up;
        self.calls_lost += calls_lost;
    }

    /// Adds the counts to `counts`, by [`MsgCounts::labelled`] order (most
    /// records count nothing: then nothing is labelled).
    fn add_to(&self, counts: &mut [u64]) {
        if *self == MsgCounts::default() {
            return;
        }
        for (slot, (_, n)) in counts.iter_mut().zip(self.labelled()) {
            *slot += n;
        }
    }

    /// (label, value) pairs, for `ringtail_dropped_events_total{reason}`
    /// and logs.
    pub fn labelled(&self) -> [(&'static str, u64); 20] {
        [
            ("msg_malformed", self.malformed),
            ("msg_desync", self.desync),
            ("msg_resync", self.resync),
            ("msg_unanswered", self.unanswered),
            ("msg_unpaired_answers", self.unpaired_answers),
            ("msg_too_many_pending", self.too_many_pending),
            ("msg_too_large", self.too_large),
            ("msg_bad_messages", self.bad_messages),
            ("msg_other_requests", self.other_requests),
            ("msg_empty_fetches", self.empty_fetches),
            ("msg_unsupported_versions", self.unsupported_versions),
            ("msg_control_packets", self.control_packets),
            ("msg_empty_gets", self.empty_gets),
            ("msg_too_many_channels", self.too_many_channels),
            ("msg_names_cut", self.names_cut),
            ("msg_links_dropped", self.links_dropped),
            ("msg_ranges_dropped", self.ranges_dropped),
            ("msg_ciphertext_records", self.ciphertext_records),
            ("msg_given_up", self.given_up),
            ("msg_calls_lost", self.calls_lost),
        ]
    }
}

/// Which messaging protocol a client connection speaks, from its first
/// sent bytes where they tell (a Kafka request header of a known API; an
/// MQTT CONNECT; AMQP 0-9-1's protocol header; a NATS `CONNECT {`), else
/// from the broker's default port (9092; 1883; 5672; 4222). A TLS
/// ClientHello says nothing: the port decides (8883 is MQTT over TLS,
/// 5671 AMQP over TLS).
pub fn detect(first_send: &[u8], peer_port: u16) -> Option<MsgSystem> {
    detect_bytes(first_send).or_else(|| detect_port(peer_port))
}

/// [`detect`] by the first sent bytes alone.
pub fn detect_bytes(first_send: &[u8]) -> Option<MsgSystem> {
    if mqtt::is_connect(first_send) {
        return Some(MsgSystem::Mqtt);
    }
    if amqp::is_protocol_header(first_send) {
        return Some(MsgSystem::Rabbitmq);
    }
    if nats::is_connect(first_send) {
        return Some(MsgSystem::Nats);
    }
    if kafka::is_request_start(first_send) {
        return Some(MsgSystem::Kafka);
    }
    None
}

/// [`detect`] by the broker's default port alone.
pub fn detect_port(peer_port: u16) -> Option<MsgSystem> {
    match peer_port {
        9092 | 9093 => Some(MsgSystem::Kafka),
        1883 | 8883 => Some(MsgSystem::Mqtt),
        5672 | 5671 => Some(MsgSystem::Rabbitmq),
        4222 => Some(MsgSystem::Nats),
        _ => None,
    }
}

/// Which messaging protocol a connection speaks from the first bytes its
/// server sent, for protocols whose server speaks first (a NATS server's
/// `INFO {`): a connection's first record may be the client's receive.
pub fn detect_server_first(first_recv: &[u8]) -> Option<MsgSystem> {
    nats::is_info(first_recv).then_some(MsgSystem::Nats)
}

/// The brokers' clients as a family of the stream table
/// ([`crate::stream_table`]): told by [`detect_bytes`] (or, for a server
/// that speaks first, [`detect_server_first`]) else [`detect_port`],
/// followed by a [`MsgConn`], counted by [`MsgCounts::labelled`].
pub const FAMILY: Family = Family {
    by_bytes: |send, recv| detect_bytes(send).or_else(|| recv.and_then(detect_server_first)).map(MsgStream::boxed),
    by_port: |port| detect_port(port).map(MsgStream::boxed),
    reasons: || MsgCounts::default().labelled().iter().map(|(r, _)| *r).collect(),
};

/// Where a connection's finished calls go: the stream table's operations
/// (as the databases' do: no list of the family's own in between).
pub type Out<'a> = Calls<'a>;

/// `op` is finished: onto `out`, boxed (the operation and the span's
/// judge move a pointer, not the call).
#[inline]
pub(crate) fn done(out: &mut Out<'_>, op: MsgOp) {
    out.push(op.start_ns, op.end_ns, Call::Messaging(Box::new(op)));
}

/// A [`MsgConn`] as the stream table follows it.
struct MsgStream {
    conn: MsgConn,
}

impl MsgStream {
    fn boxed(system: MsgSystem) -> Followed {
        Box::new(MsgStream { conn: MsgConn::new(system) })
    }
}

impl StreamConn for MsgStream {
    fn feed(&mut self, send: bool, ts_ns: u64, tls: bool, pieces: &[u8], out: &mut Calls<'_>, counts: &mut [u64]) {
        let mut c = MsgCounts::default();
        self.conn.feed(send, ts_ns, tls, pieces, out, &mut c);
        c.add_to(counts);
    }

    fn joined_midway(&mut self, counts: &mut [u64]) {
        let mut c = MsgCounts::default();
        self.conn.joined_midway(&mut c);
        c.add_to(counts);
    }

    fn close(&mut self, counts: &mut [u64]) {
        let mut c = MsgCounts::default();
        self.conn.close(&mut c);
        c.add_to(counts);
    }

    fn held_bytes(&self) -> usize {
        self.conn.held_bytes()
    }
}

/// The protocol state of one connection.
#[derive(Debug)]
enum Proto {
    Kafka(Box<kafka::KafkaConn>),
    Mqtt(Box<mqtt::MqttConn>),
    Amqp(Box<amqp::AmqpConn>),
    Nats(Box<nats::NatsConn>),
}

/// One client connection to a broker: records in, [`MsgOp`]s out.
#[derive(Debug)]
pub struct MsgConn {
    proto: Proto,
    /// TLS plaintext was seen (or a handshake on the socket): socket
    /// bytes are ciphertext from now on.
    tls_only: bool,
    /// A malformed record made the connection unreadable for good.
    given_up: bool,
    /// A record was seen (a TLS handshake is looked for in the first).
    seen: bool,
}

impl MsgConn {
    /// A connection speaking `system`, followed from its first record.
    pub fn new(system: MsgSystem) -> MsgConn {
        let proto = match system {
            MsgSystem::Kafka => Proto::Kafka(Box::default()),
            MsgSystem::Mqtt => Proto::Mqtt(Box::default()),
            MsgSystem::Rabbitmq => Proto::Amqp(Box::default()),
            MsgSystem::Nats => Proto::Nats(Box::default()),
        };
        MsgConn { proto, tls_only: false, given_up: false, seen: false }
    }

    /// The connection was found mid-way: both directions wait for a
    /// boundary they can prove, as after a desync.
    pub fn joined_midway(&mut self, counts: &mut MsgCounts) {
        self.lose_place(counts);
    }

    fn lose_place(&mut self, counts: &mut MsgCounts) {
        match &mut self.proto {
            Proto::Kafka(c) => c.lose_place(counts),
            Proto::Mqtt(c) => c.lose_place(counts),
            Proto::Amqp(c) => c.lose_place(counts),
            Proto::Nats(c) => c.lose_place(counts),
        }
    }

    /// The system it speaks.
    pub fn system(&self) -> MsgSystem {
        match self.proto {
            Proto::Kafka(_) => MsgSystem::Kafka,
            Proto::Mqtt(_) => MsgSystem::Mqtt,
            Proto::Amqp(_) => MsgSystem::Rabbitmq,
            Proto::Nats(_) => MsgSystem::Nats,
        }
    }

    /// One record: `send` (the client wrote) or not, the time its syscall
    /// completed, whether its bytes are TLS plaintext, and its pieces
    /// ([`pieces`] layout, GAP pieces included). Finished calls are
    /// appended to `out`; what was dropped is added to `counts`.
    pub fn feed(&mut self, send: bool, ts_ns: u64, tls: bool, record: &[u8], out: &mut Out<'_>, counts: &mut MsgCounts) {
        if self.given_up {
            return;
        }
        let Ok((pieces, gap)) = pieces::split_gap(record) else {
            counts.malformed += 1;
            self.given_up = true;
            counts.given_up += 1;
            self.close(counts);
            return;
        };
        if !gap.is_empty() {
            // Records went by unseen: whatever was pending may have been
            // answered in them, and neither direction knows its place.
            counts.calls_lost += self.pending() as u64;
            self.forget_pending();
            self.lose_place(counts);
        }
        let first = !std::mem::replace(&mut self.seen, true);
        if tls {
            self.tls_only = true;
        } else if self.tls_only {
            counts.ciphertext_records += 1;
            return;
        } else if first && matches!(pieces::pieces(pieces).next(), Some(Ok(pieces::Piece::Bytes(b))) if is_tls_handshake(b)) {
            self.tls_only = true;
            counts.ciphertext_records += 1;
            return;
        }
        match &mut self.proto {
            Proto::Kafka(c) => c.feed(send, ts_ns, pieces, out, counts),
            Proto::Mqtt(c) => c.feed(send, ts_ns, pieces, out, counts),
            Proto::Amqp(c) => c.feed(send, ts_ns, pieces, out, counts),
            Proto::Nats(c) => c.feed(send, ts_ns, pieces, out, counts),
        }
    }

    /// [`MsgConn::feed`] with the finished calls as [`MsgOp`]s: the form
    /// the parsers' tests and the fuzz targets read (the stream table
    /// takes them as operations, without this copy).
    pub fn feed_ops(&mut self, send: bool, ts_ns: u64, tls: bool, record: &[u8], ops: &mut Vec<MsgOp>, counts: &mut MsgCounts) {
        let out = calls_of(tls, |out| self.feed(send, ts_ns, tls, record, out, counts));
        ops.extend(out.into_iter().filter_map(|o| match o.call {
            Call::Messaging(op) => Some(*op),
            Call::Http(_) | Call::Db(_) => None,
        }));
    }

    /// The connection closed: calls still awaiting answers are counted
    /// `unanswered` (MQTT QoS 0, an AMQP publish without confirms, a NATS
    /// PUB outside verbose mode need none: nothing is pending).
    pub fn close(&mut self, counts: &mut MsgCounts) {
        counts.unanswered += self.pending() as u64;
        self.forget_pending();
    }

    fn forget_pending(&mut self) {
        match &mut self.proto {
            Proto::Kafka(c) => c.forget_pending(),
            Proto::Mqtt(c) => c.forget_pending(),
            Proto::Amqp(c) => c.forget_pending(),
            Proto::Nats(c) => c.forget_pending(),
        }
    }

    /// Calls awaiting answers.
    pub fn pending(&self) -> usize {
        match &self.proto {
            Proto::Kafka(c) => c.pending(),
            Proto::Mqtt(c) => c.pending(),
            Proto::Amqp(c) => c.pending(),
            Proto::Nats(c) => c.pending(),
        }
    }

    /// Approximate bytes held (buffers, pending calls, names).
    pub fn held_bytes(&self) -> usize {
        match &self.proto {
            Proto::Kafka(c) => c.held_bytes(),
            Proto::Mqtt(c) => c.held_bytes(),
            Proto::Amqp(c) => c.held_bytes(),
            Proto::Nats(c) => c.held_bytes(),
        }
    }
}

/// Whether socket bytes start a TLS handshake record.
fn is_tls_handshake(b: &[u8]) -> bool {
    matches!(b, [0x16, 0x03, 0..=4, _, _, 1 | 2, ..])
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
