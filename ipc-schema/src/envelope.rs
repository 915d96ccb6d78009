//! The envelope around every message, and its bounded codec.

use serde::{Deserialize, Serialize};

use crate::{Component, HealthReport, RawBatch, SpanBatch, MAX_ACK_BYTES, MAX_MESSAGE_BYTES, SCHEMA_VERSION};

/// Who sent a message: the component and which start of it. `instance` is
/// random per process start, so a receiver can tell a restarted peer (whose
/// sequence numbers begin again) from a replay of the one it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Producer {
    pub component: Component,
    pub instance: u64,
}

/// Every message on every socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always [`SCHEMA_VERSION`] when produced by this build.
    pub version: u16,
    pub producer: Producer,
    /// Per producer instance, from 1, one per data message; replays repeat it.
    pub seq: u64,
    /// The lowest seq the producer still keeps for replay: everything below
    /// it is settled, so a consumer need not wait for it.
    pub floor: u64,
    pub body: Body,
}

/// What a message carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Body {
    Raw(RawBatch),
    Spans(SpanBatch),
    Health(HealthReport),
    Ack(Ack),
}

/// "I have received everything up to `received` and finished with everything
/// up to `upto`": the only thing that flows uphill. The producer may send
/// more (flow control) and forget what is finished; it acts on nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// The instance of the producer being acknowledged; an ack for another
    /// instance (a previous life of that producer) is ignored.
    pub for_instance: u64,
    /// Every data message of that instance up to this seq has arrived.
    pub received: u64,
    /// Every data message up to this seq is fully handled; 0 = none yet.
    /// The first ack of a consumer instance also means "I am here and
    /// subscribed: send me what you hold".
    pub upto: u64,
}

impl Envelope {
    /// An envelope of this build's schema version (floor 0).
    pub fn new(producer: Producer, seq: u64, body: Body) -> Self {
        Envelope { version: SCHEMA_VERSION, producer, seq, floor: 0, body }
    }
}

/// Why bytes off a socket were not a message we accept.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("message of {len} bytes exceeds the {limit}-byte limit")]
    TooLarge { len: usize, limit: usize },
    #[error("schema version {found} is not the supported version {expected}")]
    Version { found: u64, expected: u16 },
    #[error("message is not a msgpack envelope")]
    Malformed {
        #[source]
        source: rmp_serde::decode::Error,
    },
    #[error("message header is not a msgpack envelope")]
    Header,
    #[error("message is a {found}, not an ack")]
    NotAck { found: &'static str },
}

/// Why a message could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("msgpack encoding failed")]
    Msgpack {
        #[source]
        source: rmp_serde::encode::Error,
    },
    #[error("encoded message of {len} bytes exceeds the {limit}-byte limit")]
    TooLarge { len: usize, limit: usize },
}

/// Encodes an envelope as msgpack (structs as arrays: compact and fast).
pub fn encode(env: &Envelope) -> Result<Vec<u8>, EncodeError> {
    // Sized up front: growing a large batch's buffer copies it again and again.
    let hint = match &env.body {
        Body::Raw(b) => 128 + b.record_bytes() + 128 * b.processes.len(),
        Body::Spans(b) => 128 + b.span_bytes() + 160 * b.resources.len(),
        Body::Health(h) => 64 + 96 * h.points.len(),
        Body::Ack(_) => 48,
    };
    let mut bytes = Vec::with_capacity(hint);
    rmp_serde::encode::write(&mut bytes, env).map_err(|source| EncodeError::Msgpack { source })?;
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(EncodeError::TooLarge { len: bytes.len(), limit: MAX_MESSAGE_BYTES });
    }
    Ok(bytes)
}

/// Decodes an envelope that must be an [`Ack`]: what a producer accepts
/// from its consumer. The size is checked against [`MAX_ACK_BYTES`] before
/// any byte is parsed, so a hostile peer cannot make the privileged loader
/// allocate or parse anything large; any other body is refused.
pub fn decode_ack(bytes: &[u8]) -> Result<(Producer, Ack), DecodeError> {
    if bytes.len() > MAX_ACK_BYTES {
        return Err(DecodeError::TooLarge { len: bytes.len(), limit: MAX_ACK_BYTES });
    }
    let env = decode(bytes)?;
    match env.body {
        Body::Ack(ack) => Ok((env.producer, ack)),
        other => Err(DecodeError::NotAck { found: other.kind() }),
    }
}

impl Body {
    /// The variant's name, for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Body::Raw(_) => "raw batch",
            Body::Spans(_) => "span batch",
            Body::Health(_) => "health report",
            Body::Ack(_) => "ack",
        }
    }
}

/// Decodes an envelope, checking size and version before the body. Never
/// panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<Envelope, DecodeError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(DecodeError::TooLarge { len: bytes.len(), limit: MAX_MESSAGE_BYTES });
    }
    // The version is the first element of the envelope array: look at it
    // first so that a future layout is reported as such, not as garbage.
    let mut rd = bytes;
    let n = rmp::decode::read_array_len(&mut rd).map_err(|_| DecodeError::Header)?;
    if n == 0 {
        return Err(DecodeError::Header);
    }
    let found: u64 = rmp::decode::read_int(&mut rd).map_err(|_| DecodeError::Header)?;
    if found != u64::from(SCHEMA_VERSION) {
        return Err(DecodeError::Version { found, expected: SCHEMA_VERSION });
    }
    rmp_serde::from_slice(bytes).map_err(|source| DecodeError::Malformed { source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::MetricPoint;

    fn producer() -> Producer {
        Producer { component: Component::SpanActor, instance: 0xdead_beef }
    }

    #[test]
    fn ack_round_trips() {
        let env = Envelope::new(producer(), 0, Body::Ack(Ack { for_instance: 7, received: 43, upto: 42 }));
        assert_eq!(decode(&encode(&env).unwrap()).unwrap(), env);
    }

    #[test]
    fn health_round_trips() {
        let report = HealthReport {
            component: Component::ProbeLoader,
            instance: 3,
            points: vec![MetricPoint::counter("ringtail_events_total", &[("kind", "http")], 9)],
        };
        let env = Envelope::new(producer(), 5, Body::Health(report));
        assert_eq!(decode(&encode(&env).unwrap()).unwrap(), env);
    }

    #[test]
    fn other_version_is_reported_as_such() {
        let mut env = Envelope::new(producer(), 1, Body::Ack(Ack { for_instance: 1, received: 1, upto: 1 }));
        env.version = SCHEMA_VERSION + 1;
        let err = decode(&encode(&env).unwrap()).unwrap_err();
        assert!(matches!(err, DecodeError::Version { found, .. } if found == u64::from(SCHEMA_VERSION) + 1));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [&b""[..], b"\x00", b"\x91", b"\x94\x01\xc1", b"hello world", &[0xdc, 0xff, 0xff]] {
            assert!(decode(bytes).is_err(), "{bytes:?}");
        }
        // Every prefix of a valid message fails cleanly too.
        let env = Envelope::new(producer(), 1, Body::Ack(Ack { for_instance: 1, received: 1, upto: 1 }));
        let good = encode(&env).unwrap();
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err());
        }
    }

    #[test]
    fn acks_only_and_small() {
        let ack = Ack { for_instance: u64::MAX, received: u64::MAX, upto: u64::MAX };
        let env = Envelope::new(producer(), 0, Body::Ack(ack));
        let bytes = encode(&env).unwrap();
        assert!(bytes.len() <= MAX_ACK_BYTES, "the largest ack fits: {}", bytes.len());
        assert_eq!(decode_ack(&bytes).unwrap(), (producer(), ack));
        let health = HealthReport { component: Component::SpanActor, instance: 1, points: Vec::new() };
        let other = encode(&Envelope::new(producer(), 0, Body::Health(health))).unwrap();
        assert!(matches!(decode_ack(&other), Err(DecodeError::NotAck { found: "health report" })));
        let big = vec![0u8; MAX_ACK_BYTES + 1];
        assert!(matches!(decode_ack(&big), Err(DecodeError::TooLarge { limit: MAX_ACK_BYTES, .. })));
        for cut in 0..bytes.len() {
            assert!(decode_ack(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn oversized_is_refused_before_parsing() {
        let big = vec![0u8; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(decode(&big), Err(DecodeError::TooLarge { .. })));
    }
}
