//! The messaging metrics of the OpenTelemetry messaging conventions
//! (semconv `docs/messaging/messaging-metrics.md`, development status): the
//! span-actor reads messaging calls off the wire ([`crate::MsgCall`] on a
//! span), the exporter records each call's duration in
//! `messaging.client.operation.duration` and counts its messages in
//! `messaging.client.sent.messages` or `messaging.client.consumed.messages`.
//! One definition, read by both; and the names of the values the
//! span-actor writes.

/// `messaging.client.operation.duration`: a histogram, in seconds.
pub mod duration {
    /// Instrument name.
    pub const NAME: &str = "messaging.client.operation.duration";
    /// UCUM unit.
    pub const UNIT: &str = "s";
    /// Instrument description.
    pub const DESCRIPTION: &str = "Duration of messaging operation initiated by a producer or consumer client.";
    /// The conventions' advised bucket boundaries, in seconds.
    pub const BUCKETS: [f64; 14] = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
    /// Nanoseconds per second.
    pub const NS_PER_UNIT: f64 = 1e9;
}

/// `messaging.client.sent.messages`: a counter of the messages a producer
/// handed to the broker (a `send` call's).
pub mod sent {
    /// Instrument name.
    pub const NAME: &str = "messaging.client.sent.messages";
    /// UCUM unit (an annotation: a count of messages).
    pub const UNIT: &str = "{message}";
    /// Instrument description.
    pub const DESCRIPTION: &str = "Number of messages producer attempted to send to the broker.";
}

/// `messaging.client.consumed.messages`: a counter of the messages a
/// consumer took from the broker (a `receive` call's).
pub mod consumed {
    /// Instrument name.
    pub const NAME: &str = "messaging.client.consumed.messages";
    /// UCUM unit (an annotation: a count of messages).
    pub const UNIT: &str = "{message}";
    /// Instrument description.
    pub const DESCRIPTION: &str = "Number of messages that were delivered to the application.";
}

/// The `messaging.system` values ringtail reads: the registry's names
/// (`kafka`, `rabbitmq`); MQTT and NATS are not in its list, which is
/// open: the conventions say to use the system's own name then.
pub mod system {
    pub const KAFKA: &str = "kafka";
    pub const RABBITMQ: &str = "rabbitmq";
    pub const NATS: &str = "nats";
    pub const MQTT: &str = "mqtt";
}

/// The `messaging.operation.type` values (the registry's).
pub mod op_type {
    /// Messages handed to the broker: a PRODUCER span, counted in
    /// `messaging.client.sent.messages`.
    pub const SEND: &str = "send";
    /// Messages taken from the broker: a CONSUMER span, counted in
    /// `messaging.client.consumed.messages`.
    pub const RECEIVE: &str = "receive";
    /// Messages settled (acknowledged, committed): a CLIENT span.
    pub const SETTLE: &str = "settle";
    /// A message created, not yet sent: a PRODUCER span.
    pub const CREATE: &str = "create";
    /// A message processed: a CONSUMER span (not seen on the wire).
    pub const PROCESS: &str = "process";
}
