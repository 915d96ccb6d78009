#![recursion_limit = "1024"]

mod async_rt;
mod backend;
mod codec;
mod dealer;
mod endpoint;
mod error;
mod fair_queue;
mod message;
mod r#pub;
mod pull;
mod push;
mod reconnect;
mod rep;
mod req;
mod router;
mod sub;
mod sub_backend;
mod task_handle;
mod transport;
pub mod util;
mod write_queue;
mod xpub;
mod xsub;

#[doc(hidden)]
pub mod __async_rt {
    //! DO NOT USE! PRIVATE IMPLEMENTATION, EXPOSED ONLY FOR INTEGRATION TESTS.
    pub use super::async_rt::*;
}

#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod __bench {
    //! DO NOT USE! PRIVATE IMPLEMENTATION, EXPOSED ONLY FOR BENCHMARKS.
    pub use super::codec::{CodecError, Message, ZmqCodec, ZmqFramedRead};

    use super::backend::{GenericSocketBackend, Peer};
    use super::codec::ZmqFramedWrite;
    use super::r#pub::{PubSocketBackend, Subscriber};
    use super::util::PeerIdentity;
    use super::write_queue::write_message_queue;
    use super::{SocketOptions, SocketType, ZmqMessage, ZmqResult};
    use futures::channel::{mpsc, oneshot};
    use futures::AsyncWrite;
    use parking_lot::Mutex;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    pub use super::fair_queue::FairQueue;

    pub struct BenchRoundRobinBackend {
        backend: GenericSocketBackend,
        receivers: Vec<mpsc::Receiver<Message>>,
    }

    impl BenchRoundRobinBackend {
        pub async fn new(peer_count: usize, queue_capacity: usize) -> Self {
            let backend = GenericSocketBackend::with_options(
                None,
                SocketType::PUSH,
                SocketOptions::default(),
            );
            let mut receivers = Vec::with_capacity(peer_count);

            for peer_index in 0..peer_count {
                let peer_id: PeerIdentity = format!("bench-peer-{peer_index}")
                    .parse()
                    .expect("valid peer identity");
                let (send_queue, recv_queue) = mpsc::channel(queue_capacity);
                backend
                    .peers
                    .upsert_async(peer_id.clone(), Peer { send_queue })
                    .await;
                backend.round_robin.push(peer_id);
                receivers.push(recv_queue);
            }

            Self { backend, receivers }
        }

        pub async fn send_round_robin(&self, message: Message) -> ZmqResult<()> {
            self.backend.send_round_robin(message).await
        }

        pub fn drain_ready(&mut self) -> usize {
            self.receivers
                .iter_mut()
                .filter_map(|receiver| receiver.try_recv().ok())
                .count()
        }
    }

    pub struct BenchPubFanoutBackend {
        backend: Arc<PubSocketBackend>,
        receivers: Vec<mpsc::Receiver<Message>>,
    }

    impl BenchPubFanoutBackend {
        pub async fn new(subscriber_count: usize, subscription: Vec<u8>) -> Self {
            Self::new_with_subscriptions(subscriber_count, vec![subscription]).await
        }

        pub async fn new_with_subscriptions(
            subscriber_count: usize,
            subscriptions: Vec<Vec<u8>>,
        ) -> Self {
            let backend = Arc::new(PubSocketBackend {
                subscribers: scc::HashMap::new(),
                subscriber_count: AtomicUsize::new(0),
                socket_monitor: Mutex::new(None),
                socket_options: Arc::new(SocketOptions::default()),
            });
            let mut receivers = Vec::with_capacity(subscriber_count);

            for subscriber_index in 0..subscriber_count {
                let peer_id: PeerIdentity = format!("bench-sub-{subscriber_index}")
                    .parse()
                    .expect("valid peer identity");
                let (send_queue, recv_queue) = mpsc::channel(1024);
                let (stop_sender, _stop_receiver) = oneshot::channel();
                backend
                    .subscribers
                    .upsert_async(
                        peer_id,
                        Subscriber {
                            subscriptions: subscriptions.clone(),
                            send_queue,
                            queued_bytes: Default::default(),
                            _subscription_coro_stop: stop_sender,
                        },
                    )
                    .await;
                backend
                    .subscriber_count
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                receivers.push(recv_queue);
            }

            Self { backend, receivers }
        }

        pub async fn fanout_message(&self, message: ZmqMessage) {
            self.backend.fanout_message(message).await;
        }

        pub fn drain_ready(&mut self) -> usize {
            self.receivers
                .iter_mut()
                .filter_map(|receiver| receiver.try_recv().ok())
                .count()
        }
    }

    pub fn zmq_framed_read<T>(inner: T) -> ZmqFramedRead
    where
        T: futures::AsyncRead + Unpin + Send + Sync + 'static,
    {
        ZmqFramedRead::new(Box::new(inner), Arc::new(SocketOptions::default()))
    }

    pub fn zmq_framed_read_with_options<T>(inner: T, options: Arc<SocketOptions>) -> ZmqFramedRead
    where
        T: futures::AsyncRead + Unpin + Send + Sync + 'static,
    {
        ZmqFramedRead::new(Box::new(inner), options)
    }

    pub fn fair_queue_insert<S, K>(queue: &mut FairQueue<S, K>, key: K, stream: S)
    where
        K: Clone + Eq + std::hash::Hash,
    {
        queue.inner().lock().insert(key, stream);
    }

    pub fn fair_queue<S, K>(block_on_no_clients: bool) -> FairQueue<S, K>
    where
        K: Clone,
    {
        FairQueue::new(block_on_no_clients)
    }

    pub fn message_pop_front(message: &mut ZmqMessage) -> Option<bytes::Bytes> {
        message.pop_front()
    }

    pub async fn write_message_queue_to_writer<W>(
        receiver: mpsc::Receiver<Message>,
        writer: W,
    ) -> Result<(), CodecError>
    where
        W: AsyncWrite + Unpin + Send + Sync + 'static,
    {
        let send_queue = ZmqFramedWrite::new(Box::new(writer), ZmqCodec::new());
        write_message_queue(receiver, send_queue).await
    }
}

pub use crate::dealer::*;
pub use crate::endpoint::{Endpoint, Host, Transport, TryIntoEndpoint};
pub use crate::error::{ZmqError, ZmqResult};
pub use crate::message::*;
pub use crate::pull::*;
pub use crate::push::*;
pub use crate::r#pub::*;
pub use crate::rep::*;
pub use crate::req::*;
pub use crate::router::*;
pub use crate::sub::*;
pub use crate::transport::Listener;
pub use crate::xpub::*;
pub use crate::xsub::*;

use crate::codec::*;
use crate::transport::AcceptStopHandle;
use util::PeerIdentity;

use async_trait::async_trait;
use asynchronous_codec::FramedWrite;
use futures::channel::mpsc;
use futures::{select, FutureExt};
use parking_lot::Mutex;

use std::collections::HashMap;
use std::convert::TryFrom;
use std::fmt::{Debug, Display};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

const COMPATIBILITY_MATRIX: [u8; 121] = [
    // PAIR, PUB, SUB, REQ, REP, DEALER, ROUTER, PULL, PUSH, XPUB, XSUB
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // PAIR
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, // PUB
    0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, // SUB
    0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, // REQ
    0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, // REP
    0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, // DEALER
    0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, // ROUTER
    0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, // PULL
    0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, // PUSH
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, // XPUB
    0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, // XSUB
];

#[allow(clippy::upper_case_acronyms)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(usize)]
pub enum SocketType {
    PAIR = 0,
    PUB = 1,
    SUB = 2,
    REQ = 3,
    REP = 4,
    DEALER = 5,
    ROUTER = 6,
    PULL = 7,
    PUSH = 8,
    XPUB = 9,
    XSUB = 10,
    STREAM = 11,
}

impl SocketType {
    pub const fn as_str(&self) -> &'static str {
        match self {
            SocketType::PAIR => "PAIR",
            SocketType::PUB => "PUB",
            SocketType::SUB => "SUB",
            SocketType::REQ => "REQ",
            SocketType::REP => "REP",
            SocketType::DEALER => "DEALER",
            SocketType::ROUTER => "ROUTER",
            SocketType::PULL => "PULL",
            SocketType::PUSH => "PUSH",
            SocketType::XPUB => "XPUB",
            SocketType::XSUB => "XSUB",
            SocketType::STREAM => "STREAM",
        }
    }

    /// Checks if two sockets are compatible with each other
    /// ```
    /// use zeromq::SocketType;
    /// assert!(SocketType::PUB.compatible(SocketType::SUB));
    /// assert!(SocketType::REQ.compatible(SocketType::REP));
    /// assert!(SocketType::DEALER.compatible(SocketType::ROUTER));
    /// assert!(!SocketType::PUB.compatible(SocketType::REP));
    /// ```
    pub fn compatible(&self, other: SocketType) -> bool {
        let row_index = *self as usize;
        let col_index = other as usize;
        COMPATIBILITY_MATRIX[row_index * 11 + col_index] != 0
    }
}

impl FromStr for SocketType {
    type Err = ZmqError;

    #[inline]
    fn from_str(s: &str) -> Result<Self, ZmqError> {
        Self::try_from(s.as_bytes())
    }
}

impl TryFrom<&[u8]> for SocketType {
    type Error = ZmqError;

    fn try_from(s: &[u8]) -> Result<Self, ZmqError> {
        Ok(match s {
            b"PAIR" => SocketType::PAIR,
            b"PUB" => SocketType::PUB,
            b"SUB" => SocketType::SUB,
            b"REQ" => SocketType::REQ,
            b"REP" => SocketType::REP,
            b"DEALER" => SocketType::DEALER,
            b"ROUTER" => SocketType::ROUTER,
            b"PULL" => SocketType::PULL,
            b"PUSH" => SocketType::PUSH,
            b"XPUB" => SocketType::XPUB,
            b"XSUB" => SocketType::XSUB,
            b"STREAM" => SocketType::STREAM,
            _ => return Err(ZmqError::Other("Unknown socket type")),
        })
    }
}

impl Display for SocketType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug)]
pub enum SocketEvent {
    Connected(Endpoint, PeerIdentity),
    ConnectDelayed,
    ConnectRetried,
    Listening(Endpoint),
    Accepted(Endpoint, PeerIdentity),
    AcceptFailed(ZmqError),
    Closed,
    CloseFailed,
    Disconnected(PeerIdentity),
}

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct SocketOptions {
    pub(crate) peer_id: Option<PeerIdentity>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) read_buffer_initial_size: usize,
    // Shared by read preparation and decoder reservation.
    pub(crate) read_buffer_max_size: usize,
    pub(crate) read_buffer_short_reads: usize,
    // ringtail: limits a hostile peer cannot exceed (see `max_message_size`).
    pub(crate) max_message_size: usize,
    pub(crate) send_queue_capacity: usize,
    pub(crate) max_subscriptions: usize,
    pub(crate) max_subscription_bytes: usize,
    pub(crate) peer_filter: Option<PeerFilter>,
    pub(crate) limit_hook: Option<LimitHook>,
    pub(crate) send_queue_bytes: usize,
    pub(crate) max_connections: usize,
    pub(crate) handshake_timeout: Option<Duration>,
}

/// Default [`SocketOptions::max_message_size`]: 64 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64 << 20;
/// Default [`SocketOptions::send_queue_capacity`], libzmq's default high-water mark.
pub const DEFAULT_SEND_QUEUE_CAPACITY: usize = 1000;
/// Default [`SocketOptions::subscription_limit`]: subscriptions per peer, and their total bytes.
pub const DEFAULT_SUBSCRIPTION_LIMIT: (usize, usize) = (1024, 256 * 1024);
/// Default [`SocketOptions::send_queue_bytes`]: 256 MiB for all peers together.
pub const DEFAULT_SEND_QUEUE_BYTES: usize = 256 << 20;
/// Default [`SocketOptions::max_connections`] per bound endpoint.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default [`SocketOptions::handshake_timeout`] (libzmq's `ZMQ_HANDSHAKE_IVL`).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a listener pauses after a failed accept (e.g. out of file
/// descriptors: the connection stays in the backlog, and accepting again at
/// once would fail again at once, in a loop).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Each part of a message after the first counts this many bytes toward
/// [`SocketOptions::max_message_size`] (its bookkeeping), so that a message of
/// empty parts is bounded too.
pub const MESSAGE_PART_OVERHEAD: usize = 32;

/// Credentials of an ipc peer, read with `SO_PEERCRED` when the connection is
/// accepted or established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id (of the connecting process, or of the process that bound
    /// the listening socket), when the platform reports one.
    pub pid: Option<i32>,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// Decides whether an ipc peer may talk to this socket; see [`SocketOptions::peer_filter`].
pub type PeerFilter = Arc<dyn Fn(&PeerCred) -> bool + Send + Sync>;
/// Told of every [`LimitEvent`]; see [`SocketOptions::limit_hook`].
pub type LimitHook = Arc<dyn Fn(&LimitEvent) + Send + Sync>;

/// What a socket refused or dropped because of one of its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitEvent {
    /// A peer declared a frame that would make its message (or command)
    /// larger than [`SocketOptions::max_message_size`]: it was disconnected
    /// before anything was allocated for that frame.
    MessageTooLarge {
        /// The size the message would have reached, as declared.
        declared: u64,
        /// The limit.
        limit: usize,
    },
    /// A PUB message for one subscriber was dropped: its send queue was full.
    SendQueueFull,
    /// A PUB message was dropped before fan-out: the fan-out queue was full.
    FanoutQueueFull,
    /// A subscription beyond [`SocketOptions::subscription_limit`] was ignored.
    SubscriptionRefused,
    /// A peer was refused by [`SocketOptions::peer_filter`] and closed before
    /// any byte was read from it or written to it. `cred` is `None` when the
    /// credentials could not be read (e.g. a TCP peer).
    PeerRefused {
        /// The refused peer's credentials.
        cred: Option<PeerCred>,
    },
    /// A connection was closed as soon as it was accepted: the endpoint
    /// already had [`SocketOptions::max_connections`] open.
    ConnectionRefused {
        /// The limit.
        limit: usize,
    },
    /// An accepted peer did not finish the ZMTP handshake (greeting and
    /// READY) within [`SocketOptions::handshake_timeout`]: it was closed.
    HandshakeTimeout {
        /// The limit.
        after: Duration,
    },
    /// A peer sent a message this socket does not expect (to a PUB:
    /// anything but a one-part subscribe or unsubscribe): it was ignored.
    /// `what` names the rule it broke (`parts`, `empty`, `first_byte`).
    UnexpectedMessage {
        /// Which rule.
        what: &'static str,
    },
    /// Accepting a connection failed (e.g. `EMFILE`, out of descriptors);
    /// the listener pauses [`ACCEPT_BACKOFF`] before it accepts again.
    AcceptFailed {
        /// What the accept call returned.
        kind: std::io::ErrorKind,
    },
}

impl Default for SocketOptions {
    fn default() -> Self {
        Self {
            peer_id: None,
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            read_buffer_initial_size: 128,
            read_buffer_max_size: 64 * 1024,
            read_buffer_short_reads: 2,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            send_queue_capacity: DEFAULT_SEND_QUEUE_CAPACITY,
            max_subscriptions: DEFAULT_SUBSCRIPTION_LIMIT.0,
            max_subscription_bytes: DEFAULT_SUBSCRIPTION_LIMIT.1,
            peer_filter: None,
            limit_hook: None,
            send_queue_bytes: DEFAULT_SEND_QUEUE_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: Some(DEFAULT_HANDSHAKE_TIMEOUT),
        }
    }
}

impl SocketOptions {
    /// Tunes adaptive receive-buffer sizing for all peers, including accepted
    /// and reconnected peers. Defaults to 128-byte initial reads, a 64 KiB maximum,
    /// and two consecutive short positive reads before shrinking.
    ///
    /// Full reads double the chunk up to `max_size`. Reads below half the current
    /// chunk count toward `short_reads`; a larger positive read resets the count.
    /// Recovery leaves twice the next power of two above the observed read size,
    /// with a floor of twice `initial_size`, capped at the current chunk size.
    /// Frames larger than twice `max_size` reserve one maximum chunk of headroom
    /// to avoid growing shared storage at the frame boundary. This reduces allocation and
    /// initialization traffic for bursty inputs, but can increase the capacity
    /// retained by a single large message. It is not a message-size or memory limit.
    /// Set these values before constructing the socket; they affect receive I/O only.
    /// Recovery is always enabled. Counts refer to transport reads, not packets or messages.
    ///
    /// # Panics
    /// Panics unless `0 < initial_size <= max_size <= isize::MAX / 2` and
    /// `short_reads > 0`. The maximum leaves room for chunk growth and frame headroom.
    ///
    /// ```
    /// use zeromq::{Socket, SocketOptions, SubSocket};
    ///
    /// let mut options = SocketOptions::default();
    /// options.read_buffer(256, 32 * 1024, 3);
    /// let socket = SubSocket::with_options(options);
    /// ```
    pub fn read_buffer(
        &mut self,
        initial_size: usize,
        max_size: usize,
        short_reads: usize,
    ) -> &mut Self {
        assert!(
            initial_size > 0,
            "initial read buffer size must be positive"
        );
        assert!(
            initial_size <= max_size,
            "initial read buffer size exceeds maximum"
        );
        assert!(
            max_size <= isize::MAX as usize / 2,
            "maximum read buffer size exceeds capacity"
        );
        assert!(short_reads > 0, "short read count must be positive");
        self.read_buffer_initial_size = initial_size;
        self.read_buffer_max_size = max_size;
        self.read_buffer_short_reads = short_reads;
        self
    }

    pub fn peer_identity(&mut self, peer_id: PeerIdentity) -> &mut Self {
        self.peer_id = Some(peer_id);
        self
    }

    pub fn connect_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.connect_timeout = Some(timeout);
        self
    }

    pub fn no_connect_timeout(&mut self) -> &mut Self {
        self.connect_timeout = None;
        self
    }

    /// The largest message a peer may send: the sum of its parts' lengths,
    /// each part after the first also counting [`MESSAGE_PART_OVERHEAD`].
    /// ZMTP commands (the handshake) are held to the same limit.
    ///
    /// Checked when a frame's length is read, before anything is reserved for
    /// it: a peer that declares more is disconnected (the read fails with a
    /// codec error, and [`LimitEvent::MessageTooLarge`] is reported).
    /// Defaults to [`DEFAULT_MAX_MESSAGE_SIZE`].
    ///
    /// # Panics
    /// Panics if `bytes` is 0.
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        assert!(bytes > 0, "maximum message size must be positive");
        self.max_message_size = bytes;
        self
    }

    /// How many messages may wait for each peer. A PUB socket drops what
    /// does not fit, for that subscriber only, and reports
    /// [`LimitEvent::SendQueueFull`]; its fan-out queue (messages waiting to
    /// be matched against subscriptions) holds as many and reports
    /// [`LimitEvent::FanoutQueueFull`]. Socket types that wait instead of
    /// dropping (PUSH, DEALER, REQ, ...) wait when their peer's queue is full.
    /// Defaults to [`DEFAULT_SEND_QUEUE_CAPACITY`].
    ///
    /// # Panics
    /// Panics if `messages` is 0.
    pub fn send_queue_capacity(&mut self, messages: usize) -> &mut Self {
        assert!(messages > 0, "send queue capacity must be positive");
        self.send_queue_capacity = messages;
        self
    }

    /// How many subscriptions a PUB or XPUB socket keeps per peer, and how
    /// many bytes they may total. A subscription beyond either is ignored and
    /// reported ([`LimitEvent::SubscriptionRefused`]). Defaults to
    /// [`DEFAULT_SUBSCRIPTION_LIMIT`].
    pub fn subscription_limit(&mut self, count: usize, bytes: usize) -> &mut Self {
        self.max_subscriptions = count;
        self.max_subscription_bytes = bytes;
        self
    }

    /// Checks every ipc connection, accepted (bind side) or established
    /// (connect side), with the peer's `SO_PEERCRED` credentials before any
    /// byte is read or written. A refused peer is closed and reported
    /// ([`LimitEvent::PeerRefused`]); on the connect side, the connect fails
    /// with [`std::io::ErrorKind::PermissionDenied`].
    ///
    /// TCP peers have no credentials: with a filter set, every TCP
    /// connection is refused. Without a filter (the default) everyone is
    /// accepted.
    pub fn peer_filter(&mut self, filter: PeerFilter) -> &mut Self {
        self.peer_filter = Some(filter);
        self
    }

    /// How many bytes of messages the send queues of all peers of a PUB
    /// socket share. Each peer may hold its share (this divided by the
    /// peers connected when a message is queued), at least one message: a
    /// peer that never reads cannot take the others' share. A peer keeps
    /// what it queued while there were fewer peers, so `n` peers that never
    /// read hold at most this times (1 + 1/2 + … + 1/n), whenever they
    /// stopped reading; [`SocketOptions::max_connections`] bounds `n`. What
    /// does not fit is dropped for that peer and reported
    /// ([`LimitEvent::SendQueueFull`]).
    /// Defaults to [`DEFAULT_SEND_QUEUE_BYTES`].
    ///
    /// # Panics
    /// Panics if `bytes` is 0.
    pub fn send_queue_bytes(&mut self, bytes: usize) -> &mut Self {
        assert!(bytes > 0, "send queue bytes must be positive");
        self.send_queue_bytes = bytes;
        self
    }

    /// How many connections a bound endpoint keeps open at once, from
    /// accept (the handshake included) to close. One more is closed as
    /// soon as it is accepted, before any byte is read or written, and
    /// reported ([`LimitEvent::ConnectionRefused`]). Defaults to
    /// [`DEFAULT_MAX_CONNECTIONS`].
    ///
    /// # Panics
    /// Panics if `connections` is 0.
    pub fn max_connections(&mut self, connections: usize) -> &mut Self {
        assert!(connections > 0, "maximum connections must be positive");
        self.max_connections = connections;
        self
    }

    /// How long an accepted peer has to finish the ZMTP handshake (its
    /// greeting and READY): then it is closed and reported
    /// ([`LimitEvent::HandshakeTimeout`]), so that peers that connect and
    /// never speak do not hold connections. The connecting side is bounded
    /// by [`SocketOptions::connect_timeout`]. Defaults to
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`].
    pub fn handshake_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.handshake_timeout = Some(timeout);
        self
    }

    /// Called (on the socket's tasks: keep it short) for every message
    /// dropped and every peer or subscription refused by a limit.
    pub fn limit_hook(&mut self, hook: LimitHook) -> &mut Self {
        self.limit_hook = Some(hook);
        self
    }

    pub(crate) fn report(&self, event: LimitEvent) {
        if let Some(hook) = &self.limit_hook {
            hook(&event);
        }
    }
}

#[async_trait]
pub trait MultiPeerBackend: SocketBackend {
    /// This should not be public..
    /// Find a better way of doing this
    async fn peer_connected(self: Arc<Self>, peer_id: &PeerIdentity, io: FramedIo);

    fn peer_disconnected(&self, peer_id: &PeerIdentity);
}

pub trait SocketBackend: Send + Sync {
    fn socket_type(&self) -> SocketType;
    /// Shared, immutable options used by every connection of this socket.
    fn socket_options(&self) -> &Arc<SocketOptions>;
    fn shutdown(&self);
    fn monitor(&self) -> &Mutex<Option<mpsc::Sender<SocketEvent>>>;
}

#[async_trait]
pub trait SocketRecv {
    async fn recv(&mut self) -> ZmqResult<ZmqMessage>;
}

#[async_trait]
pub trait SocketSend {
    /// Sends one message according to the socket type's send policy.
    ///
    /// For sockets backed by internal writer queues, `Ok(())` means the
    /// message has entered the local send path. It does not mean the message
    /// has been flushed to the transport, received by the peer, or processed by
    /// the peer.
    ///
    /// PUB sockets may drop messages according to PUB slow-subscriber policy.
    /// Non-PUB queued backends still apply backpressure when the selected peer
    /// queue is full.
    async fn send(&mut self, message: ZmqMessage) -> ZmqResult<()>;
}

/// Marker trait that express the fact that only certain types of sockets might be used
/// in [proxy] function as a capture parameter
pub trait CaptureSocket: SocketSend {}

enum BindTarget {
    Endpoint(Endpoint),
    Listener(Listener),
}

async fn bind_inner<S>(socket: &mut S, target: BindTarget) -> ZmqResult<Endpoint>
where
    S: Socket,
{
    let backend = socket.backend();
    let callback_backend = backend.clone();
    let callback = move |result: ZmqResult<(FramedIo, Endpoint)>| {
        let backend = callback_backend.clone();
        async move {
            let result = match result {
                Ok((io, endpoint)) => util::peer_accepted(io, backend.clone())
                    .await
                    .map(|peer_id| (endpoint, peer_id)),
                Err(error) => Err(error),
            };

            match result {
                Ok((endpoint, peer_id)) => {
                    if let Some(monitor) = backend.monitor().lock().as_mut() {
                        let _ = monitor.try_send(SocketEvent::Accepted(endpoint, peer_id));
                    }
                }
                Err(error) => {
                    if let Some(monitor) = backend.monitor().lock().as_mut() {
                        let _ = monitor.try_send(SocketEvent::AcceptFailed(error));
                    }
                }
            }
        }
    };

    let options = Arc::clone(backend.socket_options());
    let (endpoint, stop_handle) = match target {
        BindTarget::Endpoint(endpoint) => {
            transport::begin_accept(endpoint, options, callback).await?
        }
        BindTarget::Listener(listener) => {
            transport::begin_accept_listener(listener, options, callback).await?
        }
    };

    if let Some(monitor) = backend.monitor().lock().as_mut() {
        let _ = monitor.try_send(SocketEvent::Listening(endpoint.clone()));
    }
    socket.binds().insert(endpoint.clone(), stop_handle);
    Ok(endpoint)
}

#[allow(clippy::empty_line_after_outer_attr)]
#[async_trait]
pub trait Socket: Sized + Send {
    fn new() -> Self {
        Self::with_options(SocketOptions::default())
    }

    fn with_options(options: SocketOptions) -> Self;

    fn backend(&self) -> Arc<dyn MultiPeerBackend>;

    /// Binds to the endpoint and starts a coroutine to accept new connections
    /// on it.
    ///
    /// Returns the endpoint resolved to the exact bound location if applicable
    /// (port # resolved, for example).
    async fn bind(&mut self, endpoint: &str) -> ZmqResult<Endpoint> {
        let endpoint = TryIntoEndpoint::try_into(endpoint)?;
        bind_inner(self, BindTarget::Endpoint(endpoint)).await
    }

    /// Adopts an already-bound transport listener and starts accepting new
    /// connections on it.
    ///
    /// The socket takes ownership of the listener. The listener remains bound
    /// until the returned endpoint is unbound or the socket is closed. Both
    /// blocking and nonblocking standard-library listeners are accepted.
    ///
    /// # Examples
    /// ```no_run
    /// use zeromq::{RouterSocket, Socket};
    ///
    /// # async fn example() -> zeromq::ZmqResult<()> {
    /// let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    /// let mut socket = RouterSocket::new();
    /// let endpoint = socket.bind_listener(listener).await?;
    /// println!("listening on {endpoint}");
    /// # Ok(())
    /// # }
    /// ```
    async fn bind_listener(&mut self, listener: impl Into<Listener> + Send) -> ZmqResult<Endpoint> {
        bind_inner(self, BindTarget::Listener(listener.into())).await
    }

    fn binds(&mut self) -> &mut HashMap<Endpoint, AcceptStopHandle>;

    /// Unbinds the endpoint, blocking until the associated endpoint is no
    /// longer in use
    ///
    /// # Errors
    /// May give a `ZmqError::NoSuchBind` if `endpoint` isn't bound. May also
    /// give any other zmq errors encountered when attempting to disconnect
    async fn unbind(&mut self, endpoint: Endpoint) -> ZmqResult<()> {
        let stop_handle = self.binds().remove(&endpoint);
        let stop_handle = stop_handle.ok_or(ZmqError::NoSuchBind(endpoint))?;
        stop_handle.0.shutdown().await
    }

    /// Unbinds all bound endpoints, blocking until finished.
    async fn unbind_all(&mut self) -> Vec<ZmqError> {
        let mut errs = Vec::new();
        let endpoints: Vec<_> = self.binds().keys().cloned().collect();
        for endpoint in endpoints {
            if let Err(err) = self.unbind(endpoint).await {
                errs.push(err);
            }
        }
        errs
    }

    /// Connects to the given endpoint.
    async fn connect(&mut self, endpoint: &str) -> ZmqResult<()> {
        let backend = self.backend();
        let endpoint = TryIntoEndpoint::try_into(endpoint)?;
        let connect_timeout = backend.socket_options().connect_timeout;

        let (socket, endpoint, peer_id) = util::run_with_timeout(connect_timeout, async {
            let (mut socket, endpoint) =
                util::connect_forever(endpoint, Arc::clone(backend.socket_options())).await?;
            let peer_id = util::peer_handshake(&mut socket, backend.clone()).await?;
            Ok((socket, endpoint, peer_id))
        })
        .await?;
        backend.peer_connected(&peer_id, socket).await;

        if let Some(monitor) = self.backend().monitor().lock().as_mut() {
            let _ = monitor.try_send(SocketEvent::Connected(endpoint, peer_id));
        }
        Ok(())
    }

    /// Creates and setups new socket monitor
    ///
    /// Subsequent calls to this method each create a new monitor channel.
    /// Sender side of previous one is dropped.
    fn monitor(&mut self) -> mpsc::Receiver<SocketEvent>;

    // TODO: async fn connections(&self) -> ?

    /// Disconnects from the given endpoint, blocking until finished.
    ///
    /// # Errors
    /// May give a `ZmqError::NoSuchConnection` if `endpoint` isn't connected.
    /// May also give any other zmq errors encountered when attempting to
    /// disconnect
    // TODO: async fn disconnect(&mut self, endpoint: impl TryIntoEndpoint + 'async_trait) ->
    // ZmqResult<()>;

    /// Disconnects all connections, blocking until finished.
    // TODO: async fn disconnect_all(&mut self) -> ZmqResult<()>;

    /// Closes the socket, blocking until all associated binds are closed.
    /// This is equivalent to `drop()`, but with the benefit of blocking until
    /// resources are released, and getting any underlying errors.
    ///
    /// Returns any encountered errors.
    // TODO: Call disconnect_all() when added
    async fn close(mut self) -> Vec<ZmqError> {
        // self.disconnect_all().await?;
        self.unbind_all().await
    }
}

pub async fn proxy<Frontend: SocketSend + SocketRecv, Backend: SocketSend + SocketRecv>(
    mut frontend: Frontend,
    mut backend: Backend,
    mut capture: Option<Box<dyn CaptureSocket>>,
) -> ZmqResult<()> {
    loop {
        select! {
            frontend_mess = frontend.recv().fuse() => {
                match frontend_mess {
                    Ok(message) => {
                        if let Some(capture) = &mut capture {
                            capture.send(message.clone()).await?;
                        }
                        backend.send(message).await?;
                    }
                    Err(e) => {
                        return Err(e);
                    }
                }
            },
            backend_mess = backend.recv().fuse() => {
                match backend_mess {
                    Ok(message) => {
                        if let Some(capture) = &mut capture {
                            capture.send(message.clone()).await?;
                        }
                        frontend.send(message).await?;
                    }
                    Err(e) => {
                        return Err(e);
                    }
                }
            }
        };
    }
}

pub mod prelude {
    //! Re-exports important traits. Consider glob-importing.

    pub use crate::{Socket, SocketRecv, SocketSend, TryIntoEndpoint};
}
