//! ZeroMQ over ipc:// between ringtail's processes.
//!
//! In the pure-Rust `zeromq` crate only SUB reconnects by itself, and its
//! back-off grows to 30 s, so a subscription also rebuilds its socket
//! whenever its producer has been silent for a few heartbeats: a restarted
//! peer is found again within seconds, whichever side restarted.
//!
//! Every socket is bounded against its peer (issue 12): the largest message
//! it accepts (a PUB receives only handshakes and subscriptions; an ack
//! subscription only acks), its send queue (the replay window, and its share
//! of [`SEND_QUEUE_BYTES`]), the subscriptions it keeps, and who may be on
//! the other end: `SO_PEERCRED` must show this process's uid, root, or
//! [`Access::peer`]. A refused peer is closed before any byte is read and
//! counted in `ringtail_ipc_refused_peers_total{socket,reason}`. A
//! subscription connects only to a socket file that is a socket (a symlink
//! there is not followed) bound by whom it expects
//! ([`Access::owner_allowed`]), through a descriptor of that file
//! (`/proc/self/fd/N`), so that a name replaced in a directory its peer owns
//! cannot send it elsewhere (`reason="socket_file"`); messages a PUB drops
//! for a subscriber whose queue is full in
//! `ringtail_ipc_send_queue_full_total{socket}` (the replay resends them).
//!
//! And against the peers together (issue 26: the actors' uid passes the
//! credential check, and the loader is root): a bound socket keeps at most
//! [`MAX_CONNECTIONS`] connections open (`reason="connections"` for the
//! next ones, closed as soon as accepted), each must finish its handshake
//! within [`HANDSHAKE_TIMEOUT`] (`reason="handshake_timeout"`), a failed
//! accept (out of descriptors) pauses the listener instead of spinning
//! (`ringtail_ipc_accept_failed_total{socket}`), and all subscribers'
//! queues together hold about [`SEND_QUEUE_BYTES`] at most, each its share:
//! subscribers that never read cannot grow the process nor starve the
//! others.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use ipc_schema::{decode, decode_ack, Ack, DecodeError, Envelope, Producer};
use runtime_kit::counters::Registry;
use runtime_kit::shutdown::Shutdown;
use tokio::sync::mpsc;
use zeromq::{LimitEvent, PeerCred, PubSocket, Socket, SocketOptions, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use crate::protocol::WINDOW;
use crate::{IpcError, SILENCE};

/// Who may connect to a bound socket file (connecting needs write access),
/// and who may be on the other end of a socket, bound or connected.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    /// File mode, e.g. 0o660.
    pub mode: u32,
    /// Group to give the file, e.g. the actors' group.
    pub gid: Option<u32>,
    /// Owner to give the file.
    pub uid: Option<u32>,
    /// The peer's uid when it is not this process's, e.g. the actors' uid
    /// for the loader. Root is always allowed (it can reach any process
    /// anyway); anyone else is refused.
    pub peer: Option<u32>,
}

impl Access {
    /// Owner (and group, if set) only; peers of this process's uid (or root).
    pub fn private() -> Self {
        Access { mode: 0o600, gid: None, uid: None, peer: None }
    }

    /// Whether a socket file owned by `uid` may be connected to: one bound
    /// by the named peer when there is one (root's own sockets are not what
    /// a connection to the actors is for), else by this uid or root.
    pub fn owner_allowed(&self, uid: u32) -> bool {
        match self.peer {
            Some(peer) => uid == peer,
            None => uid == 0 || uid == euid(),
        }
    }

    /// Whether a peer with these credentials may talk to the socket.
    pub fn allows(&self, cred: &PeerCred) -> bool {
        cred.uid == 0 || cred.uid == euid() || Some(cred.uid) == self.peer
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// What a PUB receives: the handshake and subscriptions, nothing else.
const PUB_INBOUND_BYTES: usize = 256;
/// Messages queued per subscriber: the replay window, plus heartbeats.
const SEND_QUEUE: usize = WINDOW as usize + 64;
/// ringtail subscribes to everything, once: room for a few.
const SUBSCRIPTIONS: (usize, usize) = (4, 64);
/// Connections a bound socket keeps open at once. Each has one consumer
/// (one connection, two for a moment while it resubscribes); the rest is
/// room for a restart overlapping a dying connection.
pub const MAX_CONNECTIONS: usize = 8;
/// Time an accepted peer has for its greeting and READY (ringtail's own
/// take milliseconds; the connecting side gives up after 2 s too).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes all subscribers' send queues of one PUB socket share (each its
/// share: this divided by the subscribers when a message is queued; with
/// at most [`MAX_CONNECTIONS`] subscribers, all together hold at most this
/// times 1 + 1/2 + … + 1/8, ~87 MiB). The replay window's batches are shared
/// with the producer's kept buffer, so what this bounds is what stalled
/// subscribers pin after the producer let go of it: a full window of
/// typical raw batches for one consumer, beyond which it gets drops that
/// the protocol resends.
pub const SEND_QUEUE_BYTES: usize = 32 << 20;

/// How often a line a peer's behaviour repeats is said at most.
const SAY_EVERY: Duration = Duration::from_secs(10);

/// Which end of which stream a socket is: sets its message limit.
#[derive(Debug, Clone, Copy)]
enum Role {
    Publisher,
    Data,
    Acks,
}

impl Role {
    fn max_message(self) -> usize {
        match self {
            Role::Publisher => PUB_INBOUND_BYTES,
            Role::Data => ipc_schema::MAX_MESSAGE_BYTES,
            Role::Acks => ipc_schema::MAX_ACK_BYTES,
        }
    }
}

/// The label a socket's counters carry: its file name (made once per socket).
fn socket_label(path: &Path) -> &'static str {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "unnamed".to_owned());
    Box::leak(name.into_boxed_str())
}

fn options(role: Role, access: Access, socket: &'static str, registry: &Registry) -> SocketOptions {
    let refused = |reason| registry.counter("ringtail_ipc_refused_peers_total", &[("socket", socket), ("reason", reason)]);
    let (uid, too_large, subscriptions) = (refused("uid"), refused("message_too_large"), refused("subscriptions"));
    let (connections, handshake) = (refused("connections"), refused("handshake_timeout"));
    let queue_full = registry.counter("ringtail_ipc_send_queue_full_total", &[("socket", socket)]);
    // A peer's junk, one a message: counted, and logged at most once per
    // 10 s (as every drop), never once a message (a peer fills no log).
    let unexpected = registry.drops("ringtail_ipc_rejected_total", "unexpected_from_subscriber");
    let accept_failed = registry.counter("ringtail_ipc_accept_failed_total", &[("socket", socket)]);
    let mut o = SocketOptions::default();
    // Batches are tens to hundreds of KiB: read in chunks up to 256 KiB
    // (each socket keeps its largest chunk: bigger costs resident memory).
    o.read_buffer(16 * 1024, 256 * 1024, 2)
        .connect_timeout(Duration::from_secs(2))
        .max_message_size(role.max_message())
        .send_queue_capacity(SEND_QUEUE)
        .send_queue_bytes(SEND_QUEUE_BYTES)
        .max_connections(MAX_CONNECTIONS)
        .handshake_timeout(HANDSHAKE_TIMEOUT)
        .subscription_limit(SUBSCRIPTIONS.0, SUBSCRIPTIONS.1)
        .peer_filter(std::sync::Arc::new(move |cred: &PeerCred| access.allows(cred)))
        .limit_hook(std::sync::Arc::new(move |event: &LimitEvent| match event {
            LimitEvent::PeerRefused { cred } => {
                uid.inc();
                tracing::debug!(socket, ?cred, "peer refused");
            }
            LimitEvent::MessageTooLarge { declared, limit } => {
                too_large.inc();
                tracing::debug!(socket, declared, limit, "peer disconnected: message too large");
            }
            LimitEvent::SubscriptionRefused => subscriptions.inc(),
            LimitEvent::UnexpectedMessage { .. } => unexpected.add(1),
            LimitEvent::SendQueueFull | LimitEvent::FanoutQueueFull => queue_full.inc(),
            LimitEvent::ConnectionRefused { limit } => {
                connections.inc();
                tracing::debug!(socket, limit, "connection refused: too many open");
            }
            LimitEvent::HandshakeTimeout { after } => {
                handshake.inc();
                tracing::debug!(socket, ?after, "peer closed: no handshake in time");
            }
            LimitEvent::AcceptFailed { kind } => {
                accept_failed.inc();
                // Every 100 ms at most (the listener pauses): say it now and then.
                if accept_failed.get() % 100 == 1 {
                    tracing::warn!(socket, ?kind, failed = accept_failed.get(), "accept failed; pausing the listener");
                }
            }
            _ => {}
        }));
    o
}

/// Binds a PUB socket at `path`, replacing a stale socket file, and applies
/// `access` to the file and to its peers.
pub async fn bind_pub(path: &Path, access: Access, registry: &Registry) -> Result<PubSocket, IpcError> {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::debug!(path = %path.display(), "removed stale socket file"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(IpcError::Unlink { path: path.to_owned(), source }),
    }
    let endpoint = ipc_schema::endpoints::ipc(path);
    let mut socket = PubSocket::with_options(options(Role::Publisher, access, socket_label(path), registry));
    socket.bind(&endpoint).await.map_err(|source| IpcError::Bind { endpoint: endpoint.clone(), source })?;
    use std::os::unix::fs::PermissionsExt;
    let perm = |source| IpcError::Permissions { path: path.to_owned(), source };
    std::os::unix::fs::chown(path, access.uid, access.gid).map_err(perm)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode)).map_err(perm)?;
    Ok(socket)
}

/// Sends one already-encoded message.
pub async fn send(socket: &mut PubSocket, endpoint: &str, bytes: Bytes) -> Result<(), IpcError> {
    socket.send(ZmqMessage::from(bytes)).await.map_err(|source| IpcError::Send { endpoint: endpoint.to_owned(), source })
}

/// Subscribes to everything published at `path` (by a peer `access`
/// allows), delivering decoded envelopes into a channel of `capacity`
/// messages (a full channel pushes back on the socket; the producer's replay
/// covers what its PUB drops).
///
/// Bad messages are counted in `ringtail_ipc_rejected_total{reason}` and
/// skipped; a codec error from a dying peer is counted and survived.
pub fn subscribe(path: PathBuf, access: Access, capacity: usize, registry: &Registry, shutdown: Shutdown) -> mpsc::Receiver<Envelope> {
    spawn_subscription(path, Role::Data, access, capacity, registry, shutdown, decode)
}

/// Subscribes to a consumer's acks: only an [`Ack`] of at most
/// [`ipc_schema::MAX_ACK_BYTES`] bytes gets through (the size is checked
/// before decoding, and a larger frame disconnects the peer before anything
/// is allocated for it); anything else is counted in
/// `ringtail_ipc_rejected_total{reason}` and dropped. This is all the
/// privileged loader reads from the unprivileged actors.
pub fn subscribe_acks(
    path: PathBuf,
    access: Access,
    capacity: usize,
    registry: &Registry,
    shutdown: Shutdown,
) -> mpsc::Receiver<(Producer, Ack)> {
    spawn_subscription(path, Role::Acks, access, capacity, registry, shutdown, decode_ack)
}

fn spawn_subscription<T: Send + 'static>(
    path: PathBuf,
    role: Role,
    access: Access,
    capacity: usize,
    registry: &Registry,
    mut shutdown: Shutdown,
    decode: fn(&[u8]) -> Result<T, DecodeError>,
) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel(capacity);
    let endpoint = ipc_schema::endpoints::ipc(&path);
    let received = registry.counter("ringtail_ipc_messages_received_total", &[]);
    let reconnects = registry.counter("ringtail_ipc_resubscribes_total", &[]);
    let too_large = registry.drops("ringtail_ipc_rejected_total", "too_large");
    let version = registry.drops("ringtail_ipc_rejected_total", "version");
    let malformed = registry.drops("ringtail_ipc_rejected_total", "malformed");
    let unexpected = registry.drops("ringtail_ipc_rejected_total", "unexpected_message");
    let codec = registry.drops("ringtail_ipc_rejected_total", "codec");
    let label = socket_label(&path);
    let refused_file = registry.counter("ringtail_ipc_refused_peers_total", &[("socket", label), ("reason", "socket_file")]);
    let registry = registry.clone();
    tokio::spawn(async move {
        let mut attempts = 0u64;
        let mut ever_connected = false;
        let mut said_subscribed = None;
        loop {
            if shutdown.is_fired() {
                return;
            }
            // The socket file, checked and held open for as long as this
            // socket lives: connecting (and the SUB's own reconnects) go
            // through the descriptor, never through a name someone may
            // have replaced (a symlink in the actors' own directory).
            let file = match runtime_kit::files::open_socket(&path, |uid| access.owner_allowed(uid)) {
                Ok(file) => file,
                Err(error) => {
                    attempts += 1;
                    let say = attempts == 1 || attempts.is_multiple_of(150);
                    if !error.is_not_found() {
                        refused_file.inc();
                        if say {
                            tracing::warn!(%endpoint, error = %error, event = "ipc_socket_file_refused", "socket file refused: not connecting");
                        }
                    } else if say {
                        tracing::info!(%endpoint, %error, "waiting for publisher");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                        _ = shutdown.fired() => return,
                    }
                }
            };
            let through = ipc_schema::endpoints::ipc(&runtime_kit::files::fd_path(std::os::fd::AsFd::as_fd(&file)));
            let mut socket = SubSocket::with_options(options(role, access, label, &registry));
            let connected = tokio::select! {
                r = socket.connect(&through) => r,
                _ = shutdown.fired() => return,
            };
            if let Err(error) = connected {
                attempts += 1;
                if attempts == 1 || attempts.is_multiple_of(150) {
                    tracing::info!(%endpoint, %error, "waiting for publisher");
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                    _ = shutdown.fired() => return,
                }
            }
            if socket.subscribe("").await.is_err() {
                continue;
            }
            attempts = 0;
            if ever_connected {
                reconnects.inc();
            }
            ever_connected = true;
            // A publisher that sends junk makes this loop subscribe again and
            // again: said the first time, then at most once per 10 s
            // (counted: ringtail_ipc_resubscribes_total).
            if said_subscribed.is_none_or(|t: std::time::Instant| t.elapsed() >= SAY_EVERY) {
                tracing::info!(%endpoint, event = "subscribed", resubscribes = reconnects.get(), "subscribed");
                said_subscribed = Some(std::time::Instant::now());
            }
            let mut codec_in_a_row = 0;
            loop {
                let next = tokio::select! {
                    m = tokio::time::timeout(SILENCE, socket.recv()) => m,
                    _ = shutdown.fired() => return,
                };
                let msg = match next {
                    Err(_) => {
                        tracing::info!(%endpoint, "publisher silent; resubscribing");
                        break;
                    }
                    Ok(Err(error)) => {
                        // A peer dying mid-frame shows up as one codec error.
                        codec.add(1);
                        codec_in_a_row += 1;
                        tracing::debug!(%endpoint, %error, "receive error");
                        if codec_in_a_row > 3 {
                            break;
                        }
                        continue;
                    }
                    Ok(Ok(msg)) => msg,
                };
                codec_in_a_row = 0;
                received.inc();
                let Some(frame) = msg.get(0) else {
                    malformed.add(1);
                    continue;
                };
                match decode(frame) {
                    Ok(value) => {
                        if tx.send(value).await.is_err() {
                            return; // the consumer is gone
                        }
                    }
                    Err(DecodeError::TooLarge { .. }) => too_large.add(1),
                    Err(DecodeError::Version { .. }) => version.add(1),
                    Err(DecodeError::NotAck { .. }) => unexpected.add(1),
                    Err(_) => malformed.add(1),
                }
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::{encode, Ack, Body, Component, HealthReport, Producer};

    fn value(r: &Registry, name: &str, reason: &str) -> f64 {
        r.report()
            .points
            .iter()
            .filter(|p| p.name == name && p.labels.iter().any(|(k, v)| k == "reason" && v == reason))
            .map(|p| p.value)
            .sum()
    }

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ringtail-ipc-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Sends `messages` (the one that should get through last) again and
    /// again until something arrives: subscribing takes a moment, and
    /// what comes before it is lost.
    async fn send_until<T>(publisher: &mut PubSocket, messages: &[Vec<u8>], rx: &mut mpsc::Receiver<T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                for m in messages {
                    send(publisher, "test", Bytes::from(m.clone())).await.unwrap();
                }
                if let Ok(Some(got)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
                    return got;
                }
            }
        })
        .await
        .expect("a message got through")
    }

    #[test]
    fn peers_are_this_uid_root_or_the_named_peer() {
        let cred = |uid| PeerCred { pid: None, uid, gid: uid };
        let me = euid();
        let stranger = (1..).find(|u| *u != me && *u != 4242).unwrap();
        let private = Access::private();
        assert!(private.allows(&cred(me)) && private.allows(&cred(0)));
        assert!(!private.allows(&cred(stranger)));
        let loader = Access { peer: Some(4242), ..Access::private() };
        assert!(loader.allows(&cred(4242)) && !loader.allows(&cred(stranger)));
        // Socket files: the named peer's only; else ours or root's.
        assert!(loader.owner_allowed(4242) && !loader.owner_allowed(0) && !loader.owner_allowed(stranger));
        assert!(private.owner_allowed(me) && private.owner_allowed(0) && !private.owner_allowed(stranger));
    }

    #[tokio::test]
    async fn a_symlink_at_the_socket_path_is_not_followed() {
        let dir = dir("symlink");
        let real = dir.join("real.sock");
        let link = dir.join("link.sock");
        let _ = std::fs::remove_file(&link);
        let registry = Registry::new(Component::ProbeLoader, 1);
        let mut publisher = bind_pub(&real, Access::private(), &registry).await.unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let (trigger, shutdown) = runtime_kit::shutdown::channel();
        let mut rx = subscribe(link.clone(), Access::private(), 8, &registry, shutdown);
        let refused = || {
            registry
                .report()
                .points
                .iter()
                .filter(|p| p.name == "ringtail_ipc_refused_peers_total")
                .filter(|p| p.labels.iter().any(|(k, v)| k == "socket" && v == "link.sock"))
                .filter(|p| p.labels.iter().any(|(k, v)| k == "reason" && v == "socket_file"))
                .map(|p| p.value)
                .sum::<f64>()
        };
        let msg = encode(&Envelope::new(
            Producer { component: Component::SpanActor, instance: 7 },
            1,
            Body::Ack(Ack { for_instance: 1, received: 2, upto: 2 }),
        ))
        .unwrap();
        tokio::time::timeout(Duration::from_secs(10), async {
            while refused() < 2.0 {
                send(&mut publisher, "test", Bytes::from(msg.clone())).await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the symlink was refused, again at the next attempt");
        assert!(rx.try_recv().is_err(), "a message came through the symlink");
        trigger.fire();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn malformed_messages_are_counted_and_skipped() {
        let dir = dir("sub");
        let path = dir.join("t.sock");
        let registry = Registry::new(Component::SpanActor, 1);
        let mut publisher = bind_pub(&path, Access::private(), &registry).await.unwrap();
        let (trigger, shutdown) = runtime_kit::shutdown::channel();
        let mut rx = subscribe(path.clone(), Access::private(), 8, &registry, shutdown);
        let good = Envelope::new(
            Producer { component: Component::ProbeLoader, instance: 7 },
            1,
            Body::Ack(Ack { for_instance: 1, received: 2, upto: 2 }),
        );
        let mut bad_version = encode(&good).unwrap();
        // Schema version 99 (position 1: after the array header).
        bad_version[1] = 0x63;
        let got =
            send_until(&mut publisher, &[b"not msgpack".to_vec(), vec![0x91, 0xc1], bad_version, encode(&good).unwrap()], &mut rx).await;
        assert_eq!(got, good);
        assert!(value(&registry, "ringtail_ipc_rejected_total", "malformed") >= 2.0);
        assert!(value(&registry, "ringtail_ipc_rejected_total", "version") >= 1.0);
        trigger.fire();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn the_ack_subscription_takes_only_small_acks() {
        let dir = dir("acks");
        let path = dir.join("a.sock");
        let registry = Registry::new(Component::ProbeLoader, 1);
        let mut publisher = bind_pub(&path, Access::private(), &registry).await.unwrap();
        let (trigger, shutdown) = runtime_kit::shutdown::channel();
        let mut rx = subscribe_acks(path.clone(), Access::private(), 8, &registry, shutdown);
        let me = Producer { component: Component::SpanActor, instance: 7 };
        let ack = Ack { for_instance: 1, received: 2, upto: 2 };
        let good = encode(&Envelope::new(me, 0, Body::Ack(ack))).unwrap();
        let health = HealthReport { component: Component::SpanActor, instance: 7, points: Vec::new() };
        let not_ack = encode(&Envelope::new(me, 0, Body::Health(health))).unwrap();
        let got = send_until(&mut publisher, &[not_ack.clone(), good.clone()], &mut rx).await;
        assert_eq!(got, (me, ack));
        assert!(value(&registry, "ringtail_ipc_rejected_total", "unexpected_message") >= 1.0);
        // A larger message is cut at the wire: the publisher is disconnected
        // before anything is allocated for it, and found again.
        let huge = vec![0x90; ipc_schema::MAX_ACK_BYTES + 1];
        let refused = |r: &Registry| value(r, "ringtail_ipc_refused_peers_total", "message_too_large");
        tokio::time::timeout(Duration::from_secs(10), async {
            while refused(&registry) < 1.0 {
                send(&mut publisher, "test", Bytes::from(huge.clone())).await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the huge ack was refused at the wire");
        while rx.try_recv().is_ok() {}
        let got = send_until(&mut publisher, &[good], &mut rx).await;
        assert_eq!(got, (me, ack));
        trigger.fire();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
