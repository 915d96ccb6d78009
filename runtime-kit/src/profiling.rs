//! CPU profiling endpoints, as in Go's `net/http/pprof`, on loopback only,
//! for root and the process's own user ([`http::Peers::RootOrSelf`]: any
//! local user could otherwise hold a root process's 120 s profile):
//!
//! - `GET /debug/pprof/profile?seconds=N` — a CPU profile of this process
//!   for N seconds (default 10, at most 120) in pprof protobuf:
//!   `go tool pprof -http=: http://127.0.0.1:PORT/debug/pprof/profile?seconds=30`
//! - `GET /debug/pprof/flamegraph?seconds=N` — the same as an SVG flame graph.
//!
//! Sampling is at 99 Hz (SIGPROF), only while a request runs; one profile at
//! a time (a second request gets 503).
//!
//! [`cpu_time`] is this process's CPU time, for the component benchmarks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::counters::Registry;
use crate::http::{self, query_param, Endpoint, Handler, Peers, Response};
use crate::shutdown::Shutdown;

static BUSY: AtomicBool = AtomicBool::new(false);

/// The loopback address component `index` (0-based) profiles on, given
/// `profile.port` (0 = off).
pub fn address(base: u16, index: u16) -> Option<SocketAddr> {
    (base != 0).then(|| SocketAddr::from(([127, 0, 0, 1], base + index)))
}

enum Kind {
    Pprof,
    Flamegraph,
}

fn profile(seconds: u64, kind: Kind) -> Response {
    if BUSY.swap(true, Ordering::AcqRel) {
        return Response::error(503, "a profile is already being taken");
    }
    let svg = matches!(kind, Kind::Flamegraph);
    let result = (|| -> Result<Vec<u8>, String> {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(99)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_secs(seconds));
        let report = guard.report().build().map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        match kind {
            Kind::Pprof => {
                use prost::Message;
                let p = report.pprof().map_err(|e| e.to_string())?;
                p.encode(&mut out).map_err(|e| e.to_string())?;
            }
            Kind::Flamegraph => {
                if report.data.is_empty() {
                    // An idle process: say so instead of an empty document.
                    out.extend_from_slice(br#"<svg xmlns="http://www.w3.org/2000/svg" width="400" height="30"><text x="10" y="20">no samples: the process was idle</text></svg>"#);
                } else {
                    report.flamegraph(&mut out).map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(out)
    })();
    BUSY.store(false, Ordering::Release);
    match result {
        Ok(body) if svg => Response::ok("image/svg+xml", body),
        Ok(body) => Response::ok("application/octet-stream", body),
        Err(e) => Response::error(500, &format!("profiling failed: {e}")),
    }
}

/// Serves the endpoints on `addr` until shutdown (see [`http::listen`]:
/// a port someone else holds is retried, not an error).
pub async fn start(addr: SocketAddr, component: &'static str, registry: &Registry, shutdown: Shutdown) -> Result<(), http::BindError> {
    let handler: Handler = Arc::new(move |target: String| {
        Box::pin(async move {
            let path = target.split('?').next().unwrap_or_default().to_owned();
            let seconds = query_param(&target, "seconds").and_then(|s| s.parse().ok()).unwrap_or(10u64).clamp(1, 120);
            let kind = match path.as_str() {
                "/debug/pprof/profile" => Kind::Pprof,
                "/debug/pprof/flamegraph" => Kind::Flamegraph,
                _ => {
                    return Response::ok(
                        "text/plain; charset=utf-8",
                        format!("{component}: /debug/pprof/profile?seconds=N (pprof protobuf), /debug/pprof/flamegraph?seconds=N (SVG)\n")
                            .into_bytes(),
                    )
                }
            };
            tokio::task::spawn_blocking(move || profile(seconds, kind)).await.unwrap_or_else(|_| Response::error(500, "profiler panicked"))
        })
    });
    http::listen(addr, Endpoint { name: "profiling", peers: Peers::RootOrSelf, handler }, registry, shutdown).await
}

/// CPU time (user + system) of this process, all threads.
pub fn cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: ru points to writable memory of the right size.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    // SAFETY: getrusage filled it.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_consecutive_loopback_ports() {
        assert_eq!(address(0, 1), None);
        assert_eq!(address(6060, 2), Some("127.0.0.1:6062".parse().unwrap()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn profile_and_flamegraph_are_served() {
        let (t, s) = crate::shutdown::channel();
        let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap();
        let registry = Registry::new(ipc_schema::Component::SpanActor, 1);
        start(addr, "test", &registry, s).await.unwrap();
        // Something to sample.
        let spin = std::thread::spawn(|| {
            let end = std::time::Instant::now() + Duration::from_millis(6000);
            let mut x = 0u64;
            while std::time::Instant::now() < end {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
            x
        });
        let get = |path: &'static str| async move {
            tokio::task::spawn_blocking(move || {
                use std::io::{Read, Write};
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
                let mut out = Vec::new();
                c.read_to_end(&mut out).unwrap();
                out
            })
            .await
            .unwrap()
        };
        let pb = get("/debug/pprof/profile?seconds=1").await;
        assert!(pb.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&pb[..pb.len().min(200)]));
        let svg = get("/debug/pprof/flamegraph?seconds=1").await;
        let text = String::from_utf8_lossy(&svg);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.contains("image/svg+xml") && text.contains("<svg"),
            "{}",
            &text[..text.len().min(300)]
        );
        spin.join().unwrap();
        t.fire();
    }
}
