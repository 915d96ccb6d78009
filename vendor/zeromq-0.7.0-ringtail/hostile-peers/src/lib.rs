//! Hostile local peers for the vendored zeromq (`vendor/zeromq-0.7.0-ringtail`):
//! what any local process can send to a socket ringtail binds or connects to,
//! written as raw bytes on a real Unix socket, and what the socket's owner
//! must survive. The tests are in `tests/hostile_peers.rs`.
//!
//! # Layout
//! - [`zmtp`]: ZMTP 3.0 handshake and frames, written by hand so that they can
//!   lie (a frame declaring 2^60 bytes).
//! - [`Recorder`]: a `SocketOptions::limit_hook` that counts every
//!   [`LimitEvent`].
//! - [`garbage`]: reproducible bytes that are no protocol at all.
//! - [`rss_bytes`], [`wait_until`]: what the tests measure and how they wait
//!   (for a condition, with a deadline).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use zeromq::{LimitEvent, LimitHook, PeerCred};

/// Raw ZMTP 3.0 bytes (RFC 23), as a peer would send them.
pub mod zmtp {
    /// The 64-byte greeting: signature, version 3.0, mechanism NULL, as-client.
    pub fn greeting() -> [u8; 64] {
        let mut g = [0u8; 64];
        g[0] = 0xff;
        g[9] = 0x7f;
        g[10] = 3;
        g[12..16].copy_from_slice(b"NULL");
        g
    }

    /// A READY command announcing `socket_type` (e.g. "SUB").
    pub fn ready(socket_type: &str) -> Vec<u8> {
        let mut body = vec![5];
        body.extend_from_slice(b"READY");
        body.push(11);
        body.extend_from_slice(b"Socket-Type");
        // A socket type name is a few bytes: the cast cannot truncate.
        body.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
        body.extend_from_slice(socket_type.as_bytes());
        let mut frame = vec![0x04, body.len() as u8];
        frame.extend_from_slice(&body);
        frame
    }

    /// One short message frame (at most 255 bytes), with the MORE flag if `more`.
    pub fn frame(body: &[u8], more: bool) -> Vec<u8> {
        assert!(body.len() <= 255, "short frames only");
        let mut frame = vec![u8::from(more), body.len() as u8];
        frame.extend_from_slice(body);
        frame
    }

    /// A long frame header (flags with the LONG bit) declaring `declared` bytes.
    /// `command` sets the COMMAND bit (a handshake frame).
    pub fn long_header(command: bool, declared: u64) -> [u8; 9] {
        let mut header = [0u8; 9];
        header[0] = 0x02 | if command { 0x04 } else { 0 };
        header[1..].copy_from_slice(&declared.to_be_bytes());
        header
    }

    /// A SUBSCRIBE message for `topic`, as a SUB sends it to a PUB.
    pub fn subscribe(topic: &[u8]) -> Vec<u8> {
        let mut body = vec![1];
        body.extend_from_slice(topic);
        frame(&body, false)
    }
}

/// What a [`Recorder`] saw, by kind.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// `LimitEvent::MessageTooLarge`: peers disconnected for a declared size.
    pub too_large: u64,
    /// `LimitEvent::SendQueueFull`: PUB messages dropped for one subscriber.
    pub send_queue_full: u64,
    /// `LimitEvent::FanoutQueueFull`: PUB messages dropped before fan-out.
    pub fanout_queue_full: u64,
    /// `LimitEvent::SubscriptionRefused`: subscriptions beyond the bound.
    pub subscriptions_refused: u64,
    /// `LimitEvent::PeerRefused`: the credentials of every refused peer.
    pub refused: Vec<Option<PeerCred>>,
    /// `LimitEvent::ConnectionRefused`: connections closed beyond the cap.
    pub connections_refused: u64,
    /// `LimitEvent::HandshakeTimeout`: peers closed for a slow handshake.
    pub handshake_timeouts: u64,
    /// `LimitEvent::UnexpectedMessage`: messages a peer had no business
    /// sending (to a PUB: anything but a subscription), ignored.
    pub unexpected: u64,
    /// `LimitEvent::AcceptFailed`: failed accepts (each followed by a pause).
    pub accept_failed: u64,
}

impl Recorded {
    /// Messages dropped, whichever queue was full.
    pub fn dropped(&self) -> u64 {
        self.send_queue_full + self.fanout_queue_full
    }
}

/// Counts every [`LimitEvent`] a socket reports.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Recorded>>);

impl Recorder {
    /// The hook to give to `SocketOptions::limit_hook`.
    pub fn hook(&self) -> LimitHook {
        let recorded = self.0.clone();
        Arc::new(move |event: &LimitEvent| {
            let mut r = recorded.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                LimitEvent::MessageTooLarge { .. } => r.too_large += 1,
                LimitEvent::SendQueueFull => r.send_queue_full += 1,
                LimitEvent::FanoutQueueFull => r.fanout_queue_full += 1,
                LimitEvent::SubscriptionRefused => r.subscriptions_refused += 1,
                LimitEvent::PeerRefused { cred } => r.refused.push(*cred),
                LimitEvent::ConnectionRefused { .. } => r.connections_refused += 1,
                LimitEvent::HandshakeTimeout { .. } => r.handshake_timeouts += 1,
                LimitEvent::AcceptFailed { .. } => r.accept_failed += 1,
                LimitEvent::UnexpectedMessage { .. } => r.unexpected += 1,
                _ => {}
            }
        })
    }

    /// A copy of what was recorded so far.
    pub fn get(&self) -> Recorded {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// `len` reproducible bytes of garbage (xorshift64 from `seed`).
pub fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// This process's resident memory, from `/proc/self/statm`, after handing
/// the allocator's free pages back (`malloc_trim`): what the sockets hold,
/// not what the allocator kept from messages already freed (that alone
/// varied by 10 MiB between runs of one test).
pub fn rss_bytes() -> u64 {
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe { libc::malloc_trim(0) };
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|field| field.parse().ok()).expect("statm has a resident field");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Waits until `condition` holds, checking every 10 ms; panics naming `what`
/// after `deadline`.
pub async fn wait_until(what: &str, deadline: Duration, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < deadline, "timed out after {deadline:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
