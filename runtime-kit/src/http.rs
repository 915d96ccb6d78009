//! A minimal HTTP/1.1 GET server for ringtail's own endpoints (Prometheus
//! `/metrics`, pprof). One request per connection, at most
//! [`MAX_CONNECTIONS`] at a time (the next ones wait in the kernel's
//! backlog, first come first served), and each bounded as a whole, not per
//! read: the request head must arrive within [`REQUEST_TIME`] of the
//! accept and the response be taken within [`RESPONSE_TIME`], so a client
//! sending a byte now and then (slow loris) holds its slot 5 s, not
//! forever. An endpoint of [`Peers::RootOrSelf`] (profiling) serves only
//! root and its own uid: the connecting socket's owner is looked up in
//! `/proc/net/tcp` (a loopback peer is in our network namespace) before a
//! byte is read, and anyone else gets a 403 at once. What is refused is
//! counted in `ringtail_http_refused_total{endpoint,reason}`.
//!
//! An accept error (e.g. out of file descriptors) pauses accepting for
//! [`ACCEPT_BACKOFF`] rather than spinning. A port someone else holds
//! ([`listen`]) is said once, loudly, and retried with back-off while the
//! process goes on without the endpoint: another user binding the port
//! first must not keep the component down (it would not get ready, and be
//! restarted again and again).

use std::future::Future;
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::counters::{Counter, Registry};
use crate::shutdown::Shutdown;

/// What a handler answers.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    /// 200 with a body.
    pub fn ok(content_type: &'static str, body: Vec<u8>) -> Self {
        Response { status: 200, content_type, body }
    }

    /// A plain-text error.
    pub fn error(status: u16, msg: &str) -> Self {
        Response { status, content_type: "text/plain; charset=utf-8", body: format!("{msg}\n").into_bytes() }
    }
}

/// Turns a request target (path and query) into a response.
pub type Handler = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = Response> + Send>> + Send + Sync>;

/// Who may use an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peers {
    /// Whoever reaches the address (`/metrics`: scrapers are anyone's).
    Anyone,
    /// Root and this process's own uid (profiling: a profile of a root
    /// process costs it 120 s of SIGPROF and shows what it runs).
    RootOrSelf,
}

/// One HTTP endpoint.
#[derive(Clone)]
pub struct Endpoint {
    /// Its name in logs and in the `endpoint` label (`metrics`, `profiling`).
    pub name: &'static str,
    /// Who may use it.
    pub peers: Peers,
    /// What it answers.
    pub handler: Handler,
}

/// Why an endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}")]
pub struct BindError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds the endpoint's socket (at start-up, so a bad address stops start-up).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr).await.map_err(|source| BindError { addr, source })
}

const MAX_REQUEST: usize = 8192;
/// From accept to the end of the request head, whatever the pace of the bytes.
pub const REQUEST_TIME: Duration = Duration::from_secs(5);
/// For the client to take the whole response.
pub const RESPONSE_TIME: Duration = Duration::from_secs(10);
/// The longest a handler may take (a 120 s CPU profile) plus the two above:
/// no connection outlives it.
const CONNECTION_TIME: Duration = Duration::from_secs(150);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Pause after a failed accept.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// First and longest wait before binding a port someone else holds again.
const REBIND: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// The counters of one endpoint's refusals.
#[derive(Clone)]
struct Refused {
    deadline: Counter,
    peer: Counter,
    too_large: Counter,
}

impl Refused {
    fn new(registry: &Registry, endpoint: &'static str) -> Self {
        let c = |reason| registry.counter("ringtail_http_refused_total", &[("endpoint", endpoint), ("reason", reason)]);
        Refused { deadline: c("deadline"), peer: c("peer"), too_large: c("too_large") }
    }
}

/// Serves `endpoint` on `addr` until shutdown. A port in use (someone else
/// holds it) is not an error: it is logged once (`event="listen_failed"`),
/// counted in `ringtail_http_listen_failed_total{endpoint}`, and bound
/// again after 1 s, 2 s, … 60 s until it is free; any other bind error is.
pub async fn listen(addr: SocketAddr, endpoint: Endpoint, registry: &Registry, shutdown: Shutdown) -> Result<(), BindError> {
    let failed = registry.counter("ringtail_http_listen_failed_total", &[("endpoint", endpoint.name)]);
    let refused = Refused::new(registry, endpoint.name);
    match bind(addr).await {
        Ok(listener) => {
            tracing::info!(endpoint = endpoint.name, bound = %listener.local_addr().unwrap_or(addr), event = "listening", "listening");
            serve_counted(listener, endpoint, refused, shutdown);
            Ok(())
        }
        Err(e) if e.source.kind() == std::io::ErrorKind::AddrInUse => {
            failed.inc();
            tracing::error!(
                endpoint = endpoint.name,
                %addr,
                event = "listen_failed",
                "{addr} is in use by another process: {} is not served until it is free (retrying, every 60 s at most); \
                 whoever holds it answers its clients meanwhile",
                endpoint.name
            );
            tokio::spawn(rebind(addr, endpoint, refused, failed, shutdown));
            Ok(())
        }
        Err(e) => Err(e),
    }
}

async fn rebind(addr: SocketAddr, endpoint: Endpoint, refused: Refused, failed: Counter, mut shutdown: Shutdown) {
    let mut wait = REBIND.0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.fired() => return,
        }
        match bind(addr).await {
            Ok(listener) => {
                tracing::info!(endpoint = endpoint.name, bound = %addr, event = "listening", "listening (the port is free again)");
                serve_counted(listener, endpoint, refused, shutdown);
                return;
            }
            Err(error) => {
                failed.inc();
                tracing::debug!(endpoint = endpoint.name, %addr, error = %error.source, "still cannot listen");
                wait = (wait * 2).min(REBIND.1);
            }
        }
    }
}

/// Serves `endpoint` on `listener` until shutdown, counting refusals in
/// `registry`.
pub fn serve(listener: TcpListener, endpoint: Endpoint, registry: &Registry, shutdown: Shutdown) {
    let refused = Refused::new(registry, endpoint.name);
    serve_counted(listener, endpoint, refused, shutdown);
}

fn serve_counted(listener: TcpListener, endpoint: Endpoint, refused: Refused, mut shutdown: Shutdown) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return, // never closed
                },
                _ = shutdown.fired() => return,
            };
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.fired() => return,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed; pausing");
                    tokio::select! {
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                        _ = shutdown.fired() => return,
                    }
                }
            };
            let (endpoint, refused) = (endpoint.clone(), refused.clone());
            tokio::spawn(async move {
                if tokio::time::timeout(CONNECTION_TIME, one(stream, &endpoint, &refused)).await.is_err() {
                    refused.deadline.inc();
                }
                drop(permit);
            });
        }
    });
}

async fn one(mut stream: TcpStream, endpoint: &Endpoint, refused: &Refused) -> std::io::Result<()> {
    if endpoint.peers == Peers::RootOrSelf && !peer_is_root_or_self(&stream) {
        refused.peer.inc();
        tracing::debug!(endpoint = endpoint.name, peer = ?stream.peer_addr().ok(), "refused a peer that is neither root nor this process's user");
        let forbidden = Response::error(403, &format!("{}: only root and this process's user may use it", endpoint.name));
        return respond(&mut stream, forbidden, refused).await;
    }
    let head = match tokio::time::timeout(REQUEST_TIME, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => {
            refused.deadline.inc();
            return Ok(()); // closed: the request did not arrive in time
        }
    };
    let Some(head) = head else {
        refused.too_large.inc();
        return respond(&mut stream, Response::error(431, "request too large"), refused).await;
    };
    let line = String::from_utf8_lossy(&head);
    let mut parts = line.lines().next().unwrap_or_default().split(' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default().to_owned());
    let resp = if method == "GET" { (endpoint.handler)(target).await } else { Response::error(405, "only GET") };
    respond(&mut stream, resp, refused).await
}

/// The request head (up to its blank line); `None` beyond [`MAX_REQUEST`].
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(i);
            return Ok(Some(buf));
        }
        if buf.len() > MAX_REQUEST {
            return Ok(None);
        }
    }
}

async fn respond(stream: &mut TcpStream, r: Response, refused: &Refused) -> std::io::Result<()> {
    match tokio::time::timeout(RESPONSE_TIME, write(stream, r)).await {
        Ok(done) => done,
        Err(_) => {
            refused.deadline.inc();
            Ok(())
        }
    }
}

async fn write(stream: &mut TcpStream, r: Response) -> std::io::Result<()> {
    let reason = match r.status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.status,
        r.content_type,
        r.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&r.body).await?;
    stream.shutdown().await
}

fn peer_is_root_or_self(stream: &TcpStream) -> bool {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match (stream.local_addr(), stream.peer_addr()) {
        (Ok(local), Ok(peer)) => socket_owner(local, peer).is_some_and(|uid| uid == 0 || uid == me),
        _ => false,
    }
}

/// The uid owning the connected socket at `peer` whose other end is
/// `local` (ours), from `/proc/net/tcp` or `tcp6`: an established row whose
/// local address is `peer` and remote address `local`. `None` if there is
/// none (the peer is gone, or not in this network namespace).
pub fn socket_owner(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let (file, ours, theirs) = match (local.ip(), peer.ip()) {
        (IpAddr::V4(l), IpAddr::V4(p)) => ("/proc/net/tcp", v4_hex(l, local.port()), v4_hex(p, peer.port())),
        (IpAddr::V6(l), IpAddr::V6(p)) => ("/proc/net/tcp6", v6_hex(l, local.port()), v6_hex(p, peer.port())),
        _ => return None,
    };
    let table = std::io::BufReader::new(std::fs::File::open(file).ok()?);
    for line in table.lines().skip(1) {
        let line = line.ok()?;
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid …; st 01 = ESTABLISHED
        if f.len() > 7 && f[1] == theirs && f[2] == ours && f[3] == "01" {
            return f[7].parse().ok();
        }
    }
    None
}

/// An address as `/proc/net/tcp` prints it: the address's bytes in network
/// order read as a native u32 (`%08X`), then the port (`%04X`).
fn v4_hex(ip: std::net::Ipv4Addr, port: u16) -> String {
    format!("{:08X}:{port:04X}", u32::from_ne_bytes(ip.octets()))
}

/// The same for `/proc/net/tcp6`: four such u32s.
fn v6_hex(ip: std::net::Ipv6Addr, port: u16) -> String {
    let o = ip.octets();
    let words: String = o.chunks(4).map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))).collect();
    format!("{words}:{port:04X}")
}

/// The value of `key` in a query string (`a=1&b=2`).
pub fn query_param<'a>(target: &'a str, key: &str) -> Option<&'a str> {
    let q = target.split_once('?')?.1;
    q.split('&').find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::Component;

    fn endpoint(peers: Peers) -> Endpoint {
        let handler: Handler = Arc::new(|target| Box::pin(async move { Response::ok("text/plain", target.into_bytes()) }));
        Endpoint { name: "test", peers, handler }
    }

    fn registry() -> Registry {
        Registry::new(Component::ExporterActor, 1)
    }

    fn refused(r: &Registry, reason: &str) -> f64 {
        r.report()
            .points
            .iter()
            .filter(|p| p.name == "ringtail_http_refused_total" && p.labels.iter().any(|(k, v)| k == "reason" && v == reason))
            .map(|p| p.value)
            .sum()
    }

    async fn ask(addr: SocketAddr, req: &'static str) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_get_and_refuses_others() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (t, s) = crate::shutdown::channel();
        serve(l, endpoint(Peers::Anyone), &registry(), s);
        let r = ask(addr, "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.ends_with("/metrics?x=1"), "{r}");
        assert!(ask(addr, "POST / HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 405"));
        t.fire();
        assert_eq!(query_param("/p?seconds=5&x=1", "seconds"), Some("5"));
        assert_eq!(query_param("/p", "seconds"), None);
    }

    #[tokio::test]
    async fn idle_connections_beyond_the_cap_wait_and_service_resumes() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (t, s) = crate::shutdown::channel();
        serve(l, endpoint(Peers::Anyone), &registry(), s);
        // MAX_CONNECTIONS idle clients hold every slot.
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let waiting = tokio::spawn(ask(addr, "GET / HTTP/1.1\r\n\r\n"));
        // The next client is not served while every slot is held…
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "served beyond the connection cap");
        // …and is as soon as the idle ones go.
        drop(idle);
        let r = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("served once slots are free").unwrap();
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        t.fire();
    }

    #[tokio::test]
    async fn a_client_trickling_its_request_is_cut_at_the_deadline() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (t, s) = crate::shutdown::channel();
        let r = registry();
        serve(l, endpoint(Peers::Anyone), &r, s);
        let mut c = TcpStream::connect(addr).await.unwrap();
        let start = tokio::time::Instant::now();
        // A byte every second: each read is quick, the request never ends.
        let closed = tokio::time::timeout(REQUEST_TIME * 3, async {
            for b in b"GET /metrics HTTP/1.1\r\nHost: slow".iter().cycle() {
                if c.write_all(&[*b]).await.is_err() {
                    break;
                }
                let mut buf = [0u8; 64];
                match tokio::time::timeout(Duration::from_secs(1), c.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    _ => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "still connected after {:?}", start.elapsed());
        assert!(start.elapsed() < REQUEST_TIME + Duration::from_secs(2), "cut after {:?}", start.elapsed());
        assert_eq!(refused(&r, "deadline"), 1.0);
        t.fire();
    }

    #[tokio::test]
    async fn root_or_self_endpoints_know_their_peer() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        // Our own connection, seen from both ends.
        let c = TcpStream::connect(addr).await.unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(socket_owner(addr, c.local_addr().unwrap()), Some(me));
        assert_eq!(socket_owner(addr, "127.0.0.1:1".parse().unwrap()), None, "no such connection");
        drop(c);
        // The same process's user is served (other users: tests/tests/attacks_ipc.rs).
        let (t, s) = crate::shutdown::channel();
        serve(l, endpoint(Peers::RootOrSelf), &registry(), s);
        assert!(ask(addr, "GET /x HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 200 OK"));
        t.fire();
    }

    #[tokio::test]
    async fn a_port_someone_holds_is_bound_once_it_is_free() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = holder.local_addr().unwrap();
        let (t, s) = crate::shutdown::channel();
        let r = registry();
        listen(addr, endpoint(Peers::Anyone), &r, s).await.expect("a port in use is not a start-up error");
        drop(holder);
        let served = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Ok(mut c) = TcpStream::connect(addr).await {
                    c.write_all(b"GET /back HTTP/1.1\r\n\r\n").await.unwrap();
                    let mut out = String::new();
                    if c.read_to_string(&mut out).await.is_ok() && out.starts_with("HTTP/1.1 200") {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(served.is_ok(), "not served after the port was freed");
        let failed: f64 = r.report().points.iter().filter(|p| p.name == "ringtail_http_listen_failed_total").map(|p| p.value).sum();
        assert!(failed >= 1.0);
        // Any other bind error still stops start-up.
        let (_t2, s2) = crate::shutdown::channel();
        assert!(listen("192.0.2.1:9".parse().unwrap(), endpoint(Peers::Anyone), &r, s2).await.is_err());
        t.fire();
    }
}
