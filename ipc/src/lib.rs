//! ringtail's wire protocol, both ways, in one place.
//!
//! Each process binds what it publishes (a PUB socket whose file
//! permissions admit the one peer that should connect) and connects a SUB to
//! what it consumes. Data flows downhill in numbered batches; what flows back
//! up is an [`ipc_schema::Ack`], a fixed tiny shape. A task owns every
//! socket: the processes only talk to these tasks through bounded channels.
//!
//! # Layout
//! - [`socket`]: binding a PUB socket with [`Access`] rights, sending, and
//!   self-healing SUB subscriptions that count and skip what does not
//!   decode (the ack subscription also refuses anything but a small ack).
//! - [`protocol`]: the pure state of the protocol, no sockets:
//!   [`protocol::Outbox`] (a producer's kept buffer: window, backlog,
//!   resend, replay) and [`protocol::InboundSeq`] (a consumer's dedup and
//!   contiguous acks), and when to ack.
//! - [`producer`]: [`Producer`], the task owning a PUB socket and its ack
//!   subscription; it reports each message [`Settled`] (acknowledged, or
//!   dropped and counted) with the caller's tag.
//! - [`consumer`]: [`Consumer`], the task owning a SUB subscription and the
//!   ack socket; it delivers each data message once and acks what the
//!   caller marks done.

pub mod consumer;
pub mod producer;
pub mod protocol;
pub mod socket;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub use consumer::{Consumer, ConsumerOptions, Inbound, MessageId};
pub use producer::{Producer, ProducerOptions, ProducerTask, Settled};
pub use socket::{bind_pub, send, subscribe, Access};

/// How often producers send a heartbeat (health report) on their PUB socket.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A subscription silent this long is rebuilt.
pub const SILENCE: Duration = Duration::from_secs(4);

/// Why a socket could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    #[error("cannot remove stale socket file {path}")]
    Unlink {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot bind {endpoint}")]
    Bind {
        endpoint: String,
        #[source]
        source: zeromq::ZmqError,
    },
    #[error("cannot set owner or mode of {path}")]
    Permissions {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot send on {endpoint}")]
    Send {
        endpoint: String,
        #[source]
        source: zeromq::ZmqError,
    },
    #[error("cannot encode a message")]
    Encode {
        #[source]
        source: ipc_schema::envelope::EncodeError,
    },
    #[error("the task owning {endpoint} has stopped")]
    Closed { endpoint: String },
}
