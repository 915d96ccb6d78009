//! HTTP/2 and gRPC, end to end: real servers and clients on one
//! connection each, every stream a span, counted exactly. Each test runs
//! once per capture backend (`socket::…` and `syscalls::…`) where both
//! can follow it.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::Command;
use std::time::Duration;

use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(20);

/// A ringtail on backend `b` that selects `port`'s server and executables
/// matching `exes` (the clients: literal names, which the kernel selects at
/// exec, so that none of their first requests is missed), printing spans.
fn ringtail(b: &str, port: u16, exes: &[&str]) -> (Ringtail, u16) {
    let prom = free_port();
    let exes: Vec<String> = exes.iter().map(|e| format!("\"{e}\"")).collect();
    let exes = exes.join(", ");
    let rt = Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{port}]\nexe_names = [{exes}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"
    ));
    (rt, prom)
}

/// (kind, name, method, path, status, rpc) → count, of spans on `port`.
type Counts = BTreeMap<(String, String, String, String, u16, String), usize>;

fn counts(spans: &[SpanLine], port: u16) -> Counts {
    let mut m = Counts::new();
    for s in spans {
        let ours = match s.kind.as_str() {
            "CLIENT" => s.peer.ends_with(&format!(":{port}")),
            _ => true,
        };
        if ours {
            let k = (s.kind.clone(), s.name.clone(), s.method.clone(), s.path.clone(), s.status, s.rpc.clone().unwrap_or_default());
            *m.entry(k).or_default() += 1;
        }
    }
    m
}

fn want(list: &[(&str, &str, &str, &str, u16, &str, usize)]) -> Counts {
    list.iter().map(|(k, n, m, p, s, r, c)| ((k.to_string(), n.to_string(), m.to_string(), p.to_string(), *s, r.to_string()), *c)).collect()
}

/// Waits for the kernel's count of HTTP/2 connections to be `n` (exactly).
fn h2_connections(prom: u16, n: f64) {
    let got = wait_until(WAIT, || metric_value(prom, "ringtail_h2_connections_total", &[]).filter(|v| *v >= n));
    assert_eq!(got, Some(n), "ringtail_h2_connections_total");
}

/// Prior-knowledge h2c against Go's net/http (Server.Protocols,
/// unencrypted HTTP/2): curl (one stream per connection: curl 7.88's
/// prior-knowledge reuse is broken) and Go's client (several streams on one
/// connection). Server and client spans, exact.
fn prior_knowledge_against_go(b: &str) {
    if !can_trace() || !have("curl") {
        return;
    }
    let (Some(bin), Some(client)) = (go_binary("h2server"), go_binary("h2client")) else { return };
    let port = free_port();
    let _srv = server("go h2 server", port, &bin, &[&port.to_string()]);
    let (rt, prom) = ringtail(b, port, &["^curl$", "^h2client$"]);
    let url = format!("http://127.0.0.1:{port}");
    for path in ["/a", "/status/404"] {
        let out = Command::new("curl")
            .args(["-s", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version}", &format!("{url}{path}")])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "2");
    }
    let out = Command::new(&client).args([url.as_str(), "/b?x=1", "/c", "/status/503", "/c"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().collect::<Vec<_>>(),
        ["HTTP/2.0 200", "HTTP/2.0 200", "HTTP/2.0 503", "HTTP/2.0 200"]
    );
    let spans = rt.spans_when(WAIT, SETTLE, |s| counts(s, port).values().sum::<usize>() >= 12);
    let mut expected = Vec::new();
    for kind in ["SERVER", "CLIENT"] {
        // server span names carry the route, as for HTTP/1 (routes are
        // inferred; a 404 has none)
        let name = |route: &'static str| if kind == "SERVER" && !route.is_empty() { route } else { "GET" };
        expected.push((kind, name("GET /a"), "GET", "/a", 200, "", 1));
        expected.push((kind, name(""), "GET", "/status/404", 404, "", 1));
        expected.push((kind, name("GET /b"), "GET", "/b", 200, "", 1));
        expected.push((kind, name("GET /c"), "GET", "/c", 200, "", 2));
        expected.push((kind, name("GET /status/*"), "GET", "/status/503", 503, "", 1));
    }
    assert_eq!(counts(&spans, port), want(&expected), "{}", rt.stdout());
    for s in &spans {
        let service = match (s.kind.as_str(), s.path.as_str()) {
            ("SERVER", _) => "h2server",
            (_, "/a" | "/status/404") => "curl",
            _ => "h2client",
        };
        assert_eq!(s.service, service, "{}", s.line);
    }
    // three connections, each seen from both ends
    h2_connections(prom, 6.0);
}

/// Node's `http2` module at both ends, prior knowledge: five streams at
/// once on one session (a POST with a 3,000-byte body among them).
fn node_http2(b: &str) {
    if !can_trace() || !have("node") {
        return;
    }
    let port = free_port();
    let script = fixture("node/h2.js");
    let script = script.to_str().unwrap();
    let _srv = server("node h2 server", port, std::path::Path::new("node"), &[script, "server", &port.to_string()]);
    let (rt, prom) = ringtail(b, port, &["^node$"]);
    let out = Command::new("node").args([script, "client", &port.to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().collect::<Vec<_>>(),
        ["/a 200", "/b?x=1 200", "/status/404 404", "/echo 200", "/items/7 200"]
    );
    let spans = rt.spans_when(WAIT, SETTLE, |s| counts(s, port).values().sum::<usize>() >= 10);
    let mut expected = Vec::new();
    for kind in ["SERVER", "CLIENT"] {
        let name = |route: &'static str, method: &'static str| if kind == "SERVER" && !route.is_empty() { route } else { method };
        expected.push((kind, name("GET /a", "GET"), "GET", "/a", 200, "", 1));
        expected.push((kind, name("GET /b", "GET"), "GET", "/b", 200, "", 1));
        expected.push((kind, name("", "GET"), "GET", "/status/404", 404, "", 1));
        expected.push((kind, name("POST /echo", "POST"), "POST", "/echo", 200, "", 1));
        expected.push((kind, name("DELETE /items/*", "DELETE"), "DELETE", "/items/7", 200, "", 1));
    }
    assert_eq!(counts(&spans, port), want(&expected), "{}", rt.stdout());
    assert!(spans.iter().all(|s| s.service == "node"), "{}", rt.stdout());
    h2_connections(prom, 2.0); // one session: one connection per side
}

/// `Upgrade: h2c` (RFC 7540 3.2): curl asks for HTTP/2 on its first
/// request, hypercorn answers 101 and the response as stream 1; curl's next
/// requests are streams 3 and 5 on that connection. The upgraded request
/// is one span (its 101 is not), served and sent.
fn upgrade_h2c(b: &str) {
    if !can_trace() || !have("curl") {
        return;
    }
    let Some(python) = venv_python("hypercorn") else { return };
    let port = free_port();
    let script = fixture("h2c_server.py");
    let _srv = server("hypercorn", port, &python, &[script.to_str().unwrap(), &port.to_string()]);
    let (rt, prom) = ringtail(b, port, &["^curl$"]);
    let url = format!("http://127.0.0.1:{port}");
    let out = Command::new("curl")
        .args(["-s", "--http2", "-w", "%{http_version} %{http_code} %{num_connects}\\n"])
        .args([
            "-o",
            "/dev/null",
            &format!("{url}/up?x=1"),
            "-o",
            "/dev/null",
            &format!("{url}/status/404"),
            "-o",
            "/dev/null",
            &format!("{url}/b"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    // one connection (num_connects 1, then 0), HTTP/2 throughout
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().collect::<Vec<_>>(), ["2 200 1", "2 404 0", "2 200 0"]);
    let spans = rt.spans_when(WAIT, SETTLE, |s| counts(s, port).values().sum::<usize>() >= 6);
    let mut expected = Vec::new();
    for kind in ["SERVER", "CLIENT"] {
        let name = |route: &'static str| if kind == "SERVER" && !route.is_empty() { route } else { "GET" };
        expected.push((kind, name("GET /up"), "GET", "/up", 200, "", 1));
        expected.push((kind, name(""), "GET", "/status/404", 404, "", 1));
        expected.push((kind, name("GET /b"), "GET", "/b", 200, "", 1));
    }
    assert_eq!(counts(&spans, port), want(&expected), "{}", rt.stdout());
    h2_connections(prom, 2.0); // the upgraded connection, from both ends
    assert!(spans.iter().all(|s| s.status != 101), "{}", rt.stdout());
}

/// Any other protocol switch (here WebSocket's) is not HTTP/2: the 101 is
/// one span per side, and what goes through the tunnel afterwards (an
/// HTTP/1 request, an HTTP/2 preface) is never parsed.
fn other_upgrades_are_left_alone(b: &str) {
    if !can_trace() || !have("node") {
        return;
    }
    let port = free_port();
    let script = fixture("node/upgrade.js");
    let script = script.to_str().unwrap();
    let _srv = server("node upgrade server", port, std::path::Path::new("node"), &[script, "server", &port.to_string()]);
    let (rt, prom) = ringtail(b, port, &["^node$"]);
    let out = Command::new("node").args([script, "client", &port.to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "101 echoed");
    let upgraded = || metric_value(prom, "ringtail_upgraded_connections_total", &[]);
    assert_eq!(wait_until(WAIT, || upgraded().filter(|v| *v >= 2.0)), Some(2.0), "both ends switched");
    let spans = rt.spans_when(WAIT, SETTLE, |s| counts(s, port).values().sum::<usize>() >= 2);
    let expected = [("SERVER", "GET /ws", "GET", "/ws", 101, "", 1), ("CLIENT", "GET", "GET", "/ws", 101, "", 1)];
    assert_eq!(counts(&spans, port), want(&expected), "{}", rt.stdout());
    assert_eq!(metric_value(prom, "ringtail_h2_connections_total", &[]).unwrap_or(0.0), 0.0);
}

/// gRPC with grpcio, server and client in Python: unary OK, unary
/// NOT_FOUND, server streaming, and many concurrent calls on one channel.
fn grpc_python(b: &str) {
    if !can_trace() {
        return;
    }
    let Some(python) = venv_python("grpc") else { return };
    let port = free_port();
    let script = fixture("grpc_h2.py");
    let _srv = server("grpc server", port, &python, &[script.to_str().unwrap(), "server", &port.to_string()]);
    let (rt, prom) = ringtail(b, port, &["^python"]);
    const CONCURRENT: usize = 40;
    let out = Command::new(&python).arg(&script).args(["client", &port.to_string(), &CONCURRENT.to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let total = 2 * (CONCURRENT + 3);
    let spans = rt.spans_when(WAIT, SETTLE, |s| counts(s, port).values().sum::<usize>() >= total);
    let mut expected = Vec::new();
    for kind in ["SERVER", "CLIENT"] {
        expected.push((kind, "demo.Items/Get", "POST", "/demo.Items/Get", 200, "OK", CONCURRENT + 1));
        expected.push((kind, "demo.Items/Get", "POST", "/demo.Items/Get", 200, "NOT_FOUND", 1));
        expected.push((kind, "demo.Items/List", "POST", "/demo.Items/List", 200, "OK", 1));
    }
    assert_eq!(counts(&spans, port), want(&expected), "{}", rt.stdout());
    h2_connections(prom, 2.0); // one channel: one connection per side
                               // The stable RPC duration metrics (OTEL_SEMCONV_STABILITY_OPT_IN unset),
                               // one measurement per call and side; the client's carry the server's
                               // port. NOT_FOUND is an error for the client only.
    let port_s = port.to_string();
    let rpc = |side: &str, method: &str, status: &str| {
        let name = format!("rpc_{side}_call_duration_seconds_count");
        let mut labels = vec![("rpc_system_name", "grpc"), ("rpc_method", method), ("rpc_response_status_code", status)];
        if side == "client" {
            labels.push(("server_port", port_s.as_str()));
        }
        metric_value(prom, &name, &labels)
    };
    let all = || {
        ["server", "client"]
            .into_iter()
            .flat_map(|side| {
                [rpc(side, "demo.Items/Get", "OK"), rpc(side, "demo.Items/Get", "NOT_FOUND"), rpc(side, "demo.Items/List", "OK")]
            })
            .collect::<Vec<_>>()
    };
    let n = Some((CONCURRENT + 1) as f64);
    let want_rpc = vec![n, Some(1.0), Some(1.0), n, Some(1.0), Some(1.0)];
    let got = wait_until(WAIT, || Some(all()).filter(|g| *g == want_rpc)).unwrap_or_else(all);
    assert_eq!(got, want_rpc, "{}", scrape(prom));
    let errors = |side: &str| {
        let name = format!("rpc_{side}_call_duration_seconds_count");
        metric_value(prom, &name, &[("rpc_method", "demo.Items/Get"), ("error_type", "NOT_FOUND")])
    };
    assert_eq!((errors("server"), errors("client")), (None, Some(1.0)), "{}", scrape(prom));
    assert_eq!(
        metric_value(prom, "http_client_request_duration_seconds_count", &[("server_port", port_s.as_str())]),
        None,
        "a gRPC call is measured as an RPC only"
    );
}

/// A connection whose first streams went by before ringtail started: its
/// HPACK tables and framing are unknown, so it is not followed (no span,
/// least of all a wrong one); a new connection afterwards is.
fn connection_begun_before_ringtail(b: &str) {
    if !can_trace() {
        return;
    }
    let (Some(bin), Some(client)) = (go_binary("h2server"), go_binary("h2client")) else { return };
    let port = free_port();
    let _srv = server("go h2 server", port, &bin, &[&port.to_string()]);
    let dir = TempDir::new("h2-mid");
    let go_on = dir.join("go-on");
    let url = format!("http://127.0.0.1:{port}");
    let wait = format!("@{}", go_on.display());
    let mut early = std::process::Command::new(&client);
    early.args([url.as_str(), "/before", "/before", wait.as_str(), "/after", "/after", "/status/404"]).stdout(std::process::Stdio::piped());
    let mut early = early.spawn().unwrap();
    // ringtail starts once the connection has carried its first two
    // exchanges (each prints a line): begun after, it would be followed.
    let mut lines = std::io::BufReader::new(early.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        assert!(matches!(lines.next(), Some(Ok(_))), "the early client stopped before its first exchanges");
    }
    let (rt, _prom) = ringtail(b, port, &["^h2client$"]);
    std::fs::write(&go_on, b"").unwrap();
    assert_eq!(lines.map(Result::unwrap).count(), 3);
    assert!(early.wait().unwrap().success());
    // A fresh connection, traced: the marker that everything has arrived.
    let st = Command::new(&client).args([url.as_str(), "/fresh"]).output().unwrap();
    assert!(st.status.success());
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| s.path == "/fresh").count() >= 2);
    let paths: Vec<(&str, &str)> = spans.iter().map(|s| (s.kind.as_str(), s.path.as_str())).collect();
    assert_eq!(paths.iter().filter(|p| p.1 == "/fresh").count(), 2, "{}", rt.stdout());
    assert_eq!(paths.len(), 2, "nothing of the early connection: {}", rt.stdout());
}

/// A server that sends 1,000 DATA frames (and their HEADERS) in one call,
/// as a Go server writes a 1 MiB answer: more frames than one record holds
/// (some 400) and than a walk without bpf_loop takes (64 steps). The walk
/// goes on in the next record when one is full (this kernel has bpf_loop on
/// both backends): the server's and curl's spans exact, nothing given up.
fn a_call_of_a_thousand_frames(b: &str) {
    if !can_trace() || !have("curl") {
        return;
    }
    let Some(python) = venv_python("h2") else { return };
    let port = free_port();
    let _srv = server("h2 many frames", port, &python, &[fixture("h2_many_frames.py").to_str().unwrap(), &port.to_string()]);
    let (rt, prom) = ringtail(b, port, &["^curl$"]);
    let out = Command::new("curl")
        .args(["-s", "--http2-prior-knowledge", "-w", "%{http_version} %{http_code} %{size_download}\\n", "-o", "/dev/null"])
        .arg(format!("http://127.0.0.1:{port}/frames/1000"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2 200 16000");
    let spans = rt.spans_when(WAIT, SETTLE, |s| counts(s, port).values().sum::<usize>() >= 2);
    let expected = [("SERVER", "GET /frames/*", "GET", "/frames/1000", 200, "", 1), ("CLIENT", "GET", "GET", "/frames/1000", 200, "", 1)];
    assert_eq!(counts(&spans, port), want(&expected), "{}\n{}", last_lines(&rt.stdout(), 20), rt.counters());
    h2_connections(prom, 2.0);
    let text = scrape(prom);
    assert_eq!(metric(&text, "ringtail_dropped_events_total", &[("reason", "h2_framing_cut")]), 0.0, "{}", rt.counters());
    assert_eq!(metric(&text, "ringtail_h2_connections_given_up_total", &[]), 0.0, "{}", rt.counters());
}

/// A client that sends 90 requests' HEADERS in one call, each header
/// block ~220 bytes and changing HPACK's dynamic table (a header value of
/// its own, indexed), and a server that answers them all in one call: a
/// record holds some 18 such blocks, so blocks fall at records' ends, on
/// both sides. A block begins in a record with room for all of it: no
/// block cut short (a cut block would put the table out of step and every
/// later request with it), every span exact, nothing given up.
fn header_blocks_across_records(b: &str) {
    if !can_trace() {
        return;
    }
    let Some(python) = venv_python("h2") else { return };
    let port = free_port();
    let script = fixture("h2_many_frames.py");
    let _srv = server("h2 many frames", port, &python, &[script.to_str().unwrap(), &port.to_string()]);
    let (rt, prom) = ringtail(b, port, &["^python"]);
    const N: usize = 90; // the server's concurrent streams: 100
    let out = Command::new(&python).arg(&script).args(["client", &N.to_string(), &port.to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("200 {N}"));
    let spans = rt.spans_when(WAIT, SETTLE, |s| counts(s, port).values().sum::<usize>() >= 2 * N);
    let expected = [("SERVER", "GET /frames/*", "GET", "/frames/1", 200, "", N), ("CLIENT", "GET", "GET", "/frames/1", 200, "", N)];
    assert_eq!(counts(&spans, port), want(&expected), "{}\n{}", last_lines(&rt.stdout(), 20), rt.counters());
    h2_connections(prom, 2.0);
    let text = scrape(prom);
    for name in ["ringtail_h2_header_blocks_truncated_total", "ringtail_h2_hpack_errors_total", "ringtail_h2_connections_given_up_total"] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} is not exported");
        assert_eq!(metric(&text, name, &[]), 0.0, "{name}\n{}", rt.counters());
    }
    assert_eq!(metric(&text, "ringtail_dropped_events_total", &[("reason", "h2_framing_cut")]), 0.0, "{}", rt.counters());
}

/// Frame headers cut anywhere: a client whose 40 requests (HEADERS and a
/// DATA body each) go in one sendmsg of 81 iovecs, each cutting a frame
/// header 1 to 8 bytes in, in turn (gRPC's C core writes 23-byte slices,
/// which cut headers anywhere), and which reads the answers in receives
/// that end 8 bytes into a frame header. The walk holds what it has of a
/// header, 8 bytes too (it once held none of them, read the 9th byte on
/// as a frame header and lost every frame after it, uncounted:
/// `grpc_python` failed so 2 runs in 14, its later calls `h2_request_unseen`).
/// Every span, nothing given up.
fn frame_headers_cut_anywhere(b: &str) {
    if !can_trace() {
        return;
    }
    let Some(python) = venv_python("h2") else { return };
    let port = free_port();
    let script = fixture("h2_many_frames.py");
    let _srv = server("h2 many frames", port, &python, &[script.to_str().unwrap(), &port.to_string()]);
    let (rt, prom) = ringtail(b, port, &["^python"]);
    const N: usize = 40;
    let out = Command::new(&python).arg(&script).args(["split", &N.to_string(), &port.to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("200 {N}"));
    let spans = rt.spans_when(WAIT, SETTLE, |s| counts(s, port).values().sum::<usize>() >= 2 * N);
    let expected = [("SERVER", "POST /frames/*", "POST", "/frames/1", 200, "", N), ("CLIENT", "POST", "POST", "/frames/1", 200, "", N)];
    assert_eq!(counts(&spans, port), want(&expected), "{}\n{}", last_lines(&rt.stdout(), 20), rt.counters());
    h2_connections(prom, 2.0);
    let text = scrape(prom);
    for name in
        ["ringtail_h2_connections_given_up_total", "ringtail_h2_unopened_stream_frames_total", "ringtail_h2_requests_out_of_order_total"]
    {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} is not exported");
        assert_eq!(metric(&text, name, &[]), 0.0, "{name}\n{}", rt.counters());
    }
    for reason in ["h2_request_unseen", "h2_framing_cut"] {
        assert_eq!(metric(&text, "ringtail_dropped_events_total", &[("reason", reason)]), 0.0, "{reason}\n{}", rt.counters());
    }
}

on_both_backends!(
    prior_knowledge_against_go,
    upgrade_h2c,
    other_upgrades_are_left_alone,
    connection_begun_before_ringtail,
    a_call_of_a_thousand_frames,
    header_blocks_across_records
);

// gRPC C-core and Node write with up to dozens of iovecs: the syscall
// backend (no bpf_loop) walks MAX_SEGS of them and gives such connections
// up, counted (h2_framing_cut); only the socket backend follows them.
mod socket_only {
    #[test]
    fn grpc_python() {
        super::grpc_python("socket")
    }
    #[test]
    fn frame_headers_cut_anywhere() {
        super::frame_headers_cut_anywhere("socket")
    }
    #[test]
    fn node_http2() {
        super::node_http2("socket")
    }
}
