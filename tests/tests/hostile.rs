//! Hostile traffic against a real server while ringtail runs (issue 13):
//! idle keep-alive and slowloris connections beyond the old connection
//! cap, a request split after its first byte, empty lines before a request
//! line, garbage, a 64 KiB path, an overflowing Content-Length, secrets in
//! the query and user information in the target and Host. Afterwards:
//! every ringtail process has its first pid, every request the server
//! answered is an exact span or in a counter (exact numbers), and no
//! secret reaches the exporter's output.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(120);
/// Idle keep-alive connections: more than the lowered `probe.max_connections`.
const IDLE: usize = 300;
/// Connections left inside a request head (slowloris).
const SLOW: usize = 100;
/// Resident memory no ringtail process may reach during the test.
const MAX_RSS_KB: u64 = 256 * 1024;
/// Unique 404 paths of the scan, and the real routes that come after it.
const SCAN: usize = 20_000;
const REAL: [&str; 5] = ["/real/alpha", "/real/beta", "/real/gamma", "/real/delta", "/users/7"];
const SECRETS: [&str; 5] = ["SECRETSIG1", "SECRETTOKEN2", "SECRETAWS3", "SECRETPASS4", "SECRETHOST5"];

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s
}

/// Status of the response at the start of `bytes`.
fn status_of(bytes: &[u8]) -> u16 {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned();
    head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status line in {head:?}"))
}

/// Sends `bytes` (the server closes after answering) and returns the status.
fn once(port: u16, bytes: &[u8]) -> u16 {
    status_of(&raw_request(port, bytes).expect("exchange"))
}

/// One request on a keep-alive connection, reading the whole response
/// (the server's fixed 3-byte bodies, "ok\n" or "no\n"), leaving the
/// connection open.
fn keepalive_request(s: &mut TcpStream, path: &str) -> u16 {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes()).expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while buf.windows(4).position(|w| w == b"\r\n\r\n").is_none_or(|at| buf.len() != at + 4 + 3) {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "closed mid-response");
        buf.extend_from_slice(&chunk[..n]);
    }
    status_of(&buf)
}

fn curl(port: u16, path_and_query: &str) -> u16 {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}{path_and_query}"))
        .stderr(Stdio::null())
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("curl printed a status")
}

fn stdout_has_overflow(spans: &[SpanLine]) -> bool {
    spans.iter().any(|s| s.name.contains("{overflow}"))
}

fn counter(prom: u16, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric_value(prom, name, labels).unwrap_or(0.0)
}

/// Waits until `name{labels}` reads `want`, then `SETTLE` more, and
/// asserts it still does (exactly: nothing more was counted).
fn assert_counter(prom: u16, name: &str, labels: &[(&str, &str)], want: f64) {
    let got = wait_until(WAIT, || Some(counter(prom, name, labels)).filter(|v| *v == want));
    assert_eq!(got, Some(want), "{name}{labels:?} = {}", counter(prom, name, labels));
    std::thread::sleep(SETTLE);
    assert_eq!(counter(prom, name, labels), want, "{name}{labels:?} moved after settling");
}

#[test]
fn hostile_traffic_is_traced_or_counted_never_crashes_never_leaks() {
    if !can_trace() {
        return;
    }
    if !have("nginx") || !have("curl") {
        skip("nginx and curl are needed");
        return;
    }
    if !Rotel::available() {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let prom = free_port();
    let www = TempDir::new("hostile-www");
    let _srv = nginx(port, &www.0, "location / { return 200 \"ok\\n\"; }\n        location /scan/ { return 404 \"no\\n\"; }\n        location /users/ { return 404 \"no\\n\"; }");
    let rt = Ringtail::start(&format!(
        "[probe]\nflush_interval = \"20ms\"\nmax_connections = 64\n[pipeline]\nbatch_timeout = \"20ms\"\n\
         [discovery]\nopen_ports = [{port}]\n[export]\nstdout = true\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n\
         [export.otlp]\nendpoint = \"http://127.0.0.1:{grpc}\"\nprotocol = \"grpc\"\n\
         [routes]\npatterns = [\"/users/{{id}}\"]\nmax_cardinality = 50\n[redaction]\nquery_keys = [\"token\"]\n",
        grpc = rotel.grpc
    ));
    let components = ["probe-loader", "span-actor", "exporter-actor"];
    let pids: Vec<Option<u32>> = components.iter().map(|c| rt.pid(c)).collect();
    assert!(pids.iter().all(Option::is_some), "pids: {pids:?}\n{}", rt.log());
    let unrecognized = [("reason", "unrecognized_request")];
    let unrecognized0 = counter(prom, "ringtail_dropped_events_total", &unrecognized);
    let aborted0 = counter(prom, "ringtail_aborted_requests_total", &[]);

    let mut want: BTreeMap<(String, String, u16), usize> = BTreeMap::new();
    let mut expect = |m: &str, p: &str, status: u16| *want.entry((m.to_owned(), p.to_owned(), status)).or_default() += 1;

    // Idle keep-alive connections (each served once, then silent) and
    // slowloris ones (inside a request head), all left open.
    let mut idle: Vec<TcpStream> = Vec::new();
    for _ in 0..IDLE {
        let mut s = connect(port);
        expect("GET", "/idle", keepalive_request(&mut s, "/idle"));
        idle.push(s);
    }
    let mut slow: Vec<TcpStream> = Vec::new();
    for _ in 0..SLOW {
        let mut s = connect(port);
        s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\nX-Slow: ").expect("write");
        slow.push(s);
    }

    // While they are open: another process's request, with secrets.
    let q = format!("?sig={}&token={}&AWSAccessKeyId={}&x=1", SECRETS[0], SECRETS[1], SECRETS[2]);
    expect("GET", "/after", curl(port, &format!("/after{q}")));
    // "G", then the rest 300 ms later.
    let mut s = connect(port);
    s.write_all(b"G").expect("write");
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(b"ET /split HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    expect("GET", "/split", status_of(&out));
    // Empty lines before the request line.
    expect("GET", "/crlf", once(port, b"\r\n\r\nGET /crlf HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
    // A Content-Length that overflows 64 bits' arithmetic.
    let huge = b"POST /huge HTTP/1.1\r\nHost: t\r\nContent-Length: 18446744073709551615\r\nConnection: close\r\n\r\n";
    expect("POST", "/huge", once(port, huge));
    // User information in the target and in Host.
    let abs = format!("GET http://user:{}@t/abs HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", SECRETS[3]);
    expect("GET", "/abs", once(port, abs.as_bytes()));
    let host = format!("GET /hosthdr HTTP/1.1\r\nHost: u:{}@t\r\nConnection: close\r\n\r\n", SECRETS[4]);
    expect("GET", "/hosthdr", once(port, host.as_bytes()));
    // A 64 KiB path: a span whose path is cut at the capture length.
    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "a".repeat(65536));
    let long_status = once(port, long.as_bytes());
    // Garbage the server answers: no request to follow, each counted.
    let garbage: [&[u8]; 3] =
        [b"G@T / HTTP/1.1\r\nHost: t\r\n\r\n", b"\x00\x01\x02\xff\xfe garbage\r\n\r\n", b"GET\x00/ HTTP/1.1\r\nHost: t\r\n\r\n"];
    for g in garbage {
        assert_eq!(once(port, g), 400, "nginx answers garbage with 400");
    }
    // A scan: 20,000 unique 404 paths (words, which the route heuristic
    // would keep as routes of their own), then real routes: each gets its
    // own route, the configured template keeps its name even on a 404.
    // In steps of 1,000 that each wait for their spans: the point is the
    // route budget, not whether a loaded machine keeps up (ring_full).
    let mut s = connect(port);
    for i in 0..SCAN {
        let word: String = format!("{i:05}").bytes().map(|b| char::from(b'a' + (b - b'0'))).collect();
        assert_eq!(keepalive_request(&mut s, &format!("/scan/{word}.php")), 404);
        expect("GET", &format!("/scan/{word}.php"), 404);
        if (i + 1) % 1000 == 0 {
            let scanned = wait_until(WAIT, || {
                let n = rt.spans().iter().filter(|l| l.path.starts_with("/scan/")).count();
                (n > i).then_some(n)
            });
            assert_eq!(
                scanned,
                Some(i + 1),
                "scan spans; ring_full = {:?}",
                metric_value(prom, "ringtail_dropped_events_total", &[("reason", "ring_full")])
            );
        }
    }
    for r in REAL {
        expect("GET", r, keepalive_request(&mut s, r));
    }
    drop(s);
    // And a normal request after all of it.
    expect("GET", "/final", curl(port, "/final"));

    let n_want: usize = want.values().sum::<usize>() + 1; // + the long path
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|l| l.kind == "SERVER").count() >= n_want);
    let server: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == "SERVER").collect();
    let (long_spans, rest): (Vec<&SpanLine>, Vec<&SpanLine>) = server.iter().partition(|s| s.path.starts_with("/aaaa"));
    assert_eq!(long_spans.len(), 1, "the 64 KiB path: {long_spans:?}");
    assert_eq!((long_spans[0].method.as_str(), long_spans[0].status), ("GET", long_status));
    let mut got: BTreeMap<(String, String, u16), usize> = BTreeMap::new();
    for s in rest {
        *got.entry((s.method.clone(), s.path.clone(), s.status)).or_default() += 1;
    }
    assert_eq!(got, want, "exactly one span per answered request\n{}", rt.stdout());

    // Routes: the scan has none and spent nothing; real routes have theirs.
    for r in REAL {
        let span = spans.iter().find(|s| s.path == r).expect("a real route's span");
        let want_route = if r.starts_with("/users/") { "/users/{id}" } else { r };
        assert_eq!(span.name, format!("GET {want_route}"), "{}", span.line);
    }
    assert!(!stdout_has_overflow(&spans), "a route overflowed");
    let scan_names: std::collections::BTreeSet<&str> =
        spans.iter().filter(|s| s.path.starts_with("/scan/")).map(|s| s.name.as_str()).collect();
    assert_eq!(scan_names.into_iter().collect::<Vec<_>>(), ["GET"], "an unmatched 404 has no route");

    // Secrets: redacted, keys kept; never a secret value on the output.
    let after = spans.iter().find(|s| s.path == "/after").expect("the /after span");
    assert!(after.line.contains("/after?sig=REDACTED&token=REDACTED&AWSAccessKeyId=REDACTED&x=1"), "{}", after.line);
    let stdout = rt.stdout();
    for secret in SECRETS {
        assert!(!stdout.contains(secret), "{secret} exported:\n{stdout}");
        assert!(!rt.log().contains(secret), "{secret} logged");
    }

    // At a real OTLP receiver too: the query redacted, user information
    // out of server.address, no secret anywhere in what arrived.
    let ours = |s: &serde_json::Value| s["kind"] == 2 && attr(s, "server.port") == Some(port.to_string());
    let at_receiver = wait_until(WAIT, || {
        let got: Vec<serde_json::Value> = rotel.spans().into_iter().filter(ours).collect();
        (got.len() >= n_want).then_some(got)
    })
    .unwrap_or_else(|| panic!("the receiver got {} spans of {n_want}", rotel.spans().into_iter().filter(ours).count()));
    let by_path =
        |p: &str| at_receiver.iter().find(|s| attr(s, "url.path").as_deref() == Some(p)).cloned().expect("a span at the receiver");
    assert_eq!(attr(&by_path("/after"), "url.query").as_deref(), Some("sig=REDACTED&token=REDACTED&AWSAccessKeyId=REDACTED&x=1"));
    assert_eq!(attr(&by_path("/abs"), "server.address").as_deref(), Some("t"));
    assert_eq!(attr(&by_path("/hosthdr"), "server.address").as_deref(), Some("t"));
    let all = serde_json::to_string(&at_receiver).expect("json");
    for secret in SECRETS {
        assert!(!all.contains(secret), "{secret} at the receiver");
    }

    // Garbage counted exactly; the slowloris requests, once their
    // connections close unanswered, counted as aborted exactly (and
    // nothing else: the rest of the 64 KiB request, which nginx drains
    // after answering 414, is no request).
    assert_counter(prom, "ringtail_dropped_events_total", &unrecognized, unrecognized0 + garbage.len() as f64);
    drop(slow);
    assert_counter(prom, "ringtail_aborted_requests_total", &[], aborted0 + SLOW as f64);
    drop(idle);
    let left = wait_until(Duration::from_secs(10), || kernel_connections(prom).filter(|n| *n == 0.0));
    assert_eq!(left, Some(0.0), "connection records left: {:?}", kernel_connections(prom));

    // Nothing crashed or restarted.
    let now: Vec<Option<u32>> = components.iter().map(|c| rt.pid(c)).collect();
    assert_eq!(now, pids, "a component restarted:\n{}", rt.log());
    for c in components {
        assert_eq!(rt.events(c, "started").len(), 1, "{c} started more than once");
    }
    // Memory bounded: after 20,000 distinct paths, 400 connections and
    // the rest, each process is far below what unbounded state would take.
    for (c, pid) in components.iter().zip(&now) {
        let rss_kb = resident_kb(pid.expect("a pid"));
        eprintln!("{c}: VmRSS {rss_kb} kB");
        assert!(rss_kb < MAX_RSS_KB, "{c} resident {rss_kb} kB");
    }
}
