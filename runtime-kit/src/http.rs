//! A minimal HTTP/1.1 GET server for ringtail's own endpoints (Prometheus
//! `/metrics`, pprof). One request per connection, bounded request size and
//! time, so a misbehaving client costs a socket for 5 s at most, and at
//! most [`MAX_CONNECTIONS`] at a time (the next ones wait in the kernel's
//! backlog). An accept error (e.g. out of file descriptors) pauses accepting
//! for [`ACCEPT_BACKOFF`] rather than spinning.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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
const REQUEST_TIME: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Pause after a failed accept.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `handler` on `listener` until shutdown.
pub fn serve(listener: TcpListener, handler: Handler, mut shutdown: Shutdown) {
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
            let handler = handler.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(REQUEST_TIME * 12, one(stream, handler)).await;
                drop(permit);
            });
        }
    });
}

async fn one(mut stream: TcpStream, handler: Handler) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        let n = tokio::time::timeout(REQUEST_TIME, stream.read(&mut chunk)).await.map_err(|_| std::io::ErrorKind::TimedOut)??;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_REQUEST {
            return write(&mut stream, Response::error(431, "request too large")).await;
        }
    };
    let line = String::from_utf8_lossy(&buf[..head_end]);
    let mut parts = line.lines().next().unwrap_or_default().split(' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default().to_owned());
    let resp = if method == "GET" { handler(target).await } else { Response::error(405, "only GET") };
    write(&mut stream, resp).await
}

async fn write(stream: &mut TcpStream, r: Response) -> std::io::Result<()> {
    let reason = match r.status {
        200 => "OK",
        400 => "Bad Request",
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

/// The value of `key` in a query string (`a=1&b=2`).
pub fn query_param<'a>(target: &'a str, key: &str) -> Option<&'a str> {
    let q = target.split_once('?')?.1;
    q.split('&').find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_get_and_refuses_others() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (t, s) = crate::shutdown::channel();
        let h: Handler = Arc::new(|target| Box::pin(async move { Response::ok("text/plain", target.into_bytes()) }));
        serve(l, h, s);
        let ask = |req: &'static str| async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).await.unwrap();
            out
        };
        let r = ask("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.ends_with("/metrics?x=1"), "{r}");
        assert!(ask("POST / HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 405"));
        t.fire();
        assert_eq!(query_param("/p?seconds=5&x=1", "seconds"), Some("5"));
        assert_eq!(query_param("/p", "seconds"), None);
    }

    #[tokio::test]
    async fn idle_connections_beyond_the_cap_wait_and_service_resumes() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (t, s) = crate::shutdown::channel();
        let h: Handler = Arc::new(|_| Box::pin(async { Response::ok("text/plain", b"x".to_vec()) }));
        serve(l, h, s);
        // MAX_CONNECTIONS idle clients hold every slot.
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let ask = || async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).await.unwrap();
            out
        };
        let waiting = tokio::spawn(ask());
        // The next client is not served while every slot is held…
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "served beyond the connection cap");
        // …and is as soon as the idle ones go.
        drop(idle);
        let r = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("served once slots are free").unwrap();
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        t.fire();
    }
}
