//! What the kernel side sees: every common server and client, every syscall
//! path, the awkward parts of HTTP/1.x, counted exactly.
//!
//! Each test starts ringtail (selecting the server's port), drives a real
//! server, and counts the SERVER spans the stdout exporter prints. Every
//! test runs once per capture backend (`socket::…` and `syscalls::…`,
//! `probe.backend`), with the same expected counts.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(20);

/// A ringtail on capture backend `b` (`probe.backend`); `config` begins with
/// its `[probe]` section.
fn start(b: &str, config: &str) -> Ringtail {
    let rest = config.strip_prefix("[probe]\n").expect("the config starts with [probe]");
    Ringtail::start(&format!("[probe]\nbackend = \"{b}\"\n{rest}"))
}

/// A ringtail that selects `ports`, prints spans, and serves Prometheus.
fn ringtail_for(b: &str, ports: &[u16], extra: &str) -> (Ringtail, u16) {
    let prom = free_port();
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let rt = start(b, &format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n{extra}",
        ports.join(",")
    ));
    (rt, prom)
}

/// (method, path, status) → count of SERVER spans on `port`.
fn server_counts(spans: &[SpanLine]) -> BTreeMap<(String, String, u16), usize> {
    let mut m = BTreeMap::new();
    for s in spans.iter().filter(|s| s.kind == "SERVER") {
        *m.entry((s.method.clone(), s.path.clone(), s.status)).or_default() += 1;
    }
    m
}

fn expect(list: &[(&str, &str, u16, usize)]) -> BTreeMap<(String, String, u16), usize> {
    list.iter().map(|(m, p, s, n)| ((m.to_string(), p.to_string(), *s), *n)).collect()
}

fn total(m: &BTreeMap<(String, String, u16), usize>) -> usize {
    m.values().sum()
}

/// Checks, after all connections closed, that no connection state is left
/// in the kernel: every record created was deleted again (the loader's
/// gauge of live records, refreshed every second).
fn assert_no_connection_state(prom: u16) {
    let n = wait_until(Duration::from_secs(5), || kernel_connections(prom).filter(|n| *n == 0.0));
    assert_eq!(n, Some(0.0), "connection records left in the kernel: {:?}", kernel_connections(prom));
}

fn python_http_server_http10_http11_keepalive_head_and_statuses(b: &str) {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let (rt, prom) = ringtail_for(b, &[port], "");
    let www = TempDir::new("www");
    std::fs::write(www.join("index.html"), "hi\n").unwrap();
    std::fs::create_dir(www.join("dir")).unwrap();
    let _srv = server(
        "python http.server",
        port,
        Path::new("python3"),
        &["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory", www.0.to_str().unwrap(), "--protocol", "HTTP/1.1"],
    );
    // HTTP/1.0, one request per connection
    for p in ["/index.html", "/missing"] {
        let r = raw_request(port, format!("GET {p} HTTP/1.0\r\n\r\n").as_bytes()).unwrap();
        assert!(r.starts_with(b"HTTP/1.1 ") || r.starts_with(b"HTTP/1.0 "));
    }
    // HTTP/1.1 keep-alive: 5 requests on one connection, HEAD, a redirect
    // (301 for a directory without /), then an error (which closes it).
    let st = keepalive(
        port,
        &[&get("/index.html"), &get("/index.html"), "HEAD /index.html HTTP/1.1\r\nHost: t\r\n\r\n", &get("/dir"), &get("/missing")],
    );
    assert_eq!(st, [200, 200, 200, 301, 404]);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 7);
    assert_eq!(
        server_counts(&spans),
        expect(&[("GET", "/index.html", 200, 3), ("GET", "/missing", 404, 2), ("HEAD", "/index.html", 200, 1), ("GET", "/dir", 301, 1)])
    );
    let versions: Vec<&str> = spans.iter().map(|s| s.line.as_str()).collect();
    assert_eq!(versions.len(), 7);
    assert_no_connection_state(prom);
    // The backend in use is exported (and only that one).
    let used = metric_value(prom, "ringtail_capture_backend", &[("component", "probe-loader"), ("backend", b)]);
    assert_eq!(used, Some(1.0), "ringtail_capture_backend{{backend={b:?}}}");
    assert_eq!(scrape(prom).matches("ringtail_capture_backend{").count(), 1);
}

fn every_syscall_pair_is_captured(b: &str) {
    if !can_trace() {
        return;
    }
    let modes = ["recvfrom_sendto", "read_write", "readv_writev", "recvmsg_sendmsg"];
    let ports: Vec<u16> = modes.iter().map(|_| free_port()).collect();
    let (rt, _) = ringtail_for(b, &ports, "");
    let mut servers = Vec::new();
    for (mode, port) in modes.iter().zip(&ports) {
        servers.push(server(
            mode,
            *port,
            Path::new("python3"),
            &[fixture("py_syscall_server.py").to_str().unwrap(), &port.to_string(), mode],
        ));
        let st = keepalive(*port, &[&get(&format!("/{mode}")), &get(&format!("/{mode}")), &get("/status/503")]);
        assert_eq!(st, [200, 200, 503], "{mode}");
    }
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 12);
    let got = server_counts(&spans);
    for mode in modes {
        assert_eq!(got.get(&("GET".into(), format!("/{mode}"), 200)), Some(&2), "{mode}: {got:?}");
    }
    assert_eq!(got.get(&("GET".into(), "/status/503".into(), 503)), Some(&4), "{got:?}");
    assert_eq!(total(&got), 12, "{got:?}");
}

fn nginx_keepalive_sendfile_statuses_and_pipelining(b: &str) {
    if !can_trace() || !have("nginx") {
        return;
    }
    let port = free_port();
    let (rt, prom) = ringtail_for(b, &[port], "");
    let www = TempDir::new("nginx");
    std::fs::write(www.join("big.bin"), vec![7u8; 2 << 20]).unwrap();
    std::fs::write(www.join("small.txt"), "small\n").unwrap();
    let _nginx = nginx(port, &www.0, "");
    let st = keepalive(
        port,
        &[
            &get("/ok"),
            &get("/big.bin"),
            &get("/small.txt"),
            &get("/redirect"),
            &get("/unavailable"),
            &get("/teapot"),
            &get("/nope"),
            "HEAD /big.bin HTTP/1.1\r\nHost: t\r\n\r\n",
        ],
    );
    assert_eq!(st, [200, 200, 200, 302, 503, 418, 404, 200]);
    // Pipelined: three requests in one write.
    let out = raw_request(port, b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\nGET /small.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    assert_eq!(String::from_utf8_lossy(&out).matches("HTTP/1.1 ").count(), 3);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 11);
    assert_eq!(
        server_counts(&spans),
        expect(&[
            ("GET", "/ok", 200, 2),
            ("GET", "/big.bin", 200, 1),
            ("HEAD", "/big.bin", 200, 1),
            ("GET", "/small.txt", 200, 2),
            ("GET", "/redirect", 302, 1),
            ("GET", "/unavailable", 503, 1),
            ("GET", "/teapot", 418, 1),
            ("GET", "/nope", 404, 2),
        ])
    );
    assert!(spans.iter().all(|s| s.service == "nginx"), "{spans:?}");
    assert_no_connection_state(prom);
}

fn go_like_server_checks(name: &str, port: u16, rt: &Ringtail, prom: u16, expect_service: &str) {
    let st = keepalive(
        port,
        &[
            &get("/"),
            &get("/chunked"),
            &get("/big"),
            &get("/status/404"),
            &get("/status/500"),
            &get("/status/302"),
            "HEAD / HTTP/1.1\r\nHost: t\r\n\r\n",
        ],
    );
    assert_eq!(st, [200, 200, 200, 404, 500, 302, 200], "{name}");
    // A large body, sent in pieces, with Expect: 100-continue.
    let body = vec![b'x'; 300_000];
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n", body.len()).as_bytes())
        .unwrap();
    let mut buf = Vec::new();
    let first = read_response(&mut s, &mut buf, false);
    assert_eq!(first, 100, "{name} sends 100 Continue");
    for part in body.chunks(64 * 1024) {
        s.write_all(part).unwrap();
    }
    assert_eq!(read_response(&mut s, &mut buf, false), 200);
    drop(s);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 8);
    assert_eq!(
        server_counts(&spans),
        expect(&[
            ("GET", "/", 200, 1),
            ("HEAD", "/", 200, 1),
            ("GET", "/chunked", 200, 1),
            ("GET", "/big", 200, 1),
            ("GET", "/status/404", 404, 1),
            ("GET", "/status/500", 500, 1),
            ("GET", "/status/302", 302, 1),
            ("POST", "/echo", 200, 1),
        ]),
        "{name}"
    );
    assert!(spans.iter().all(|s| s.service == expect_service), "{name}: {spans:?}");
    assert_no_connection_state(prom);
}

fn go_net_http_server(b: &str) {
    if !can_trace() {
        return;
    }
    let Some(bin) = go_binary("server") else { return };
    let port = free_port();
    let (rt, prom) = ringtail_for(b, &[port], "");
    let _srv = server("go server", port, &bin, &[&port.to_string()]);
    go_like_server_checks("go", port, &rt, prom, "server");
}

fn node_http_server(b: &str) {
    if !can_trace() || !have("node") {
        return;
    }
    let port = free_port();
    let (rt, prom) = ringtail_for(b, &[port], "");
    let _srv = server("node server", port, Path::new("node"), &[fixture("node/server.js").to_str().unwrap(), &port.to_string()]);
    go_like_server_checks("node", port, &rt, prom, "node");
}

fn rust_std_server(b: &str) {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let (rt, _) = ringtail_for(b, &[port], "");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let _srv = server("rust server", port, &bin, &[&port.to_string()]);
    let st = keepalive(port, &[&get("/a"), &get("/a"), &get("/status/404"), &get("/status/503")]);
    assert_eq!(st, [200, 200, 404, 503]);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 4);
    assert_eq!(server_counts(&spans), expect(&[("GET", "/a", 200, 2), ("GET", "/status/404", 404, 1), ("GET", "/status/503", 503, 1)]));
    assert!(spans.iter().all(|s| s.service == "rust_http_server"), "{spans:?}");
}

fn split_heads_pipelines_and_aborted_requests(b: &str) {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let (rt, prom) = ringtail_for(b, &[port], "");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let _srv = server("rust server", port, &bin, &[&port.to_string()]);

    // A head that arrives in three reads.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    for part in ["GET /spl", "it HTTP/1.1\r\nHost: t\r\nUser-Ag", "ent: slow\r\n\r\n"] {
        s.write_all(part.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }
    let mut buf = Vec::new();
    assert_eq!(read_response(&mut s, &mut buf, false), 200);
    drop(s);
    // Four pipelined requests in one write; the server answers each separately.
    let out = raw_request(
        port,
        format!("{}{}{}GET /p4 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", get("/p1"), get("/p2"), get("/status/404")).as_bytes(),
    )
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out).matches("HTTP/1.1 ").count(), 4);
    // Requests abandoned half-way: no span, counted.
    for partial in ["GET /aborted HTTP/1.1\r\n", "GET /aborted-too HTTP/1.1\r\nHost: t\r\n"] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(partial.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 5);
    assert_eq!(
        server_counts(&spans),
        expect(&[
            ("GET", "/split", 200, 1),
            ("GET", "/p1", 200, 1),
            ("GET", "/p2", 200, 1),
            ("GET", "/status/404", 404, 1),
            ("GET", "/p4", 200, 1)
        ])
    );
    assert!(spans.iter().find(|s| s.path == "/split").is_some_and(|s| s.line.contains("GET /split 200")));
    assert_no_connection_state(prom);
    let aborted = wait_until(Duration::from_secs(5), || {
        let v = metric(&scrape(prom), "ringtail_aborted_requests_total", &[]);
        (v >= 2.0).then_some(v)
    });
    assert!(aborted.is_some(), "aborted requests counted: {}", scrape(prom));
}

fn truncated_requests_keep_their_prefix_and_are_counted(b: &str) {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let (rt, prom) = ringtail_for(b, &[port], "");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let _srv = server("rust server", port, &bin, &[&port.to_string()]);
    let long = format!("/long/{}", "a".repeat(2000));
    let r = http_get(port, &long, &[]).unwrap();
    assert_eq!(r.status, 200);
    let spans = rt.spans_when(WAIT, SETTLE, |s| !s.is_empty());
    assert_eq!(spans.len(), 1);
    assert!(spans[0].path.starts_with("/long/aaaa") && spans[0].path.len() < long.len() && spans[0].path.len() > 400, "{}", spans[0].path);
    let v =
        wait_until(Duration::from_secs(5), || Some(metric(&scrape(prom), "ringtail_truncated_requests_total", &[])).filter(|v| *v >= 1.0));
    assert!(v.is_some(), "{}", scrape(prom));
}

/// A client that writes on one thread and reads on another reads the
/// answer to a large POST before its write returns (the server answers at
/// once and reads the body later), so the kernel reports the send after the
/// response. That request is not traced and is counted, never paired with
/// the next response; the next request on the connection is traced.
fn answer_read_before_the_send_is_reported(b: &str) {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let dir = TempDir::new("early-answer");
    let script = fixture("py_early_answer.py");
    let script = script.to_str().unwrap();
    let dir_s = dir.0.to_str().unwrap();
    let _srv = server("early-answer server", port, Path::new("python3"), &[script, "server", &port.to_string(), dir_s]);
    let prom = free_port();
    let rt = start(
        b,
        &format!("[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{port}]\nexe_names = [\"^python3\"]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"),
    );
    let out = Command::new("python3").args([script, "client", &port.to_string(), dir_s]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200 200");
    // (a failure says what ringtail counted and logged. SERVER GET /after
    // missing with an orphan response counted: /after was sent before the
    // server drained the body and shared the read that ends it, where no
    // request is looked for, docs/limits.md; the fixture waits for that)
    let why = || format!("spans:\n{}\nringtail's counters:\n{}\nthe log's end:\n{}", rt.stdout(), rt.counters(), last_lines(&rt.log(), 40));
    let answered_first = || metric_value(prom, "ringtail_dropped_events_total", &[("reason", "answered_before_sent")]);
    assert_eq!(wait_until(WAIT, || answered_first().filter(|v| *v >= 1.0)), Some(1.0), "{}", why());
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 3);
    let got: Vec<(&str, &str, &str, u16)> = spans.iter().map(|s| (s.kind.as_str(), s.method.as_str(), s.path.as_str(), s.status)).collect();
    let mut got = got;
    got.sort();
    assert_eq!(got, [("CLIENT", "GET", "/after", 200), ("SERVER", "GET", "/after", 200), ("SERVER", "POST", "/early", 200)], "{}", why());
}

/// A client whose first request left before it was traced reads that
/// request's answer while traced: the kernel sees an answer with no request
/// on an unknown connection, kept as if read before its send was reported.
/// The next request's send shows (TCP's sequence numbers: the answer was
/// read before any byte of it was written) that the answer was not its: an
/// orphan response, counted, and this request and the next are traced as
/// usual (once, both were lost: a cascade over the connection).
/// Deterministic: the client sends, ringtail starts, then the client reads.
fn an_answer_to_a_request_sent_before_tracing_is_an_orphan(b: &str) {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let _srv = server("rust server", port, &bin, &[&port.to_string()]);
    let dir = TempDir::new("before-tracing");
    let client = Command::new("python3")
        .arg(fixture("py_before_tracing.py"))
        .args([&port.to_string(), dir.0.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(WAIT, || dir.0.join("sent").exists().then_some(())).is_some(), "the client never sent /before");
    let prom = free_port();
    let rt = start(
        b,
        &format!("[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nexe_names = [\"^python3\"]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"),
    );
    std::fs::write(dir.0.join("go"), b"").unwrap();
    let out = client.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200 200 200");
    let peer = format!("127.0.0.1:{port}");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| s.kind == "CLIENT" && s.peer == peer).count() >= 2);
    let got: Vec<&str> = spans.iter().filter(|s| s.kind == "CLIENT" && s.peer == peer).map(|s| s.path.as_str()).collect();
    assert_eq!(got, ["/after1", "/after2"], "{}", rt.stdout());
    let orphans = wait_until(WAIT, || metric_value(prom, "ringtail_orphan_responses_total", &[]).filter(|v| *v >= 1.0));
    assert_eq!(orphans, Some(1.0), "{}", scrape(prom));
    let dropped = metric_value(prom, "ringtail_dropped_events_total", &[("reason", "answered_before_sent")]);
    assert_eq!(dropped, Some(0.0), "{}", scrape(prom));
}

/// A server that reads ahead while it answers (Go's net/http reads one
/// byte in the background while a handler runs) can read the first byte of
/// the next request before the kernel reports the send of the answer (the
/// hooks fire when a send is over): that byte begins the next request, it
/// is not the body of the one being answered. Deterministic: the answer is
/// larger than the socket buffers, so its send is not over until the client,
/// which has sent that byte and seen it read, drains it.
fn a_request_begun_before_the_answer_s_send_is_reported(b: &str) {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let dir = TempDir::new("read-ahead");
    let script = fixture("py_read_ahead.py");
    let script = script.to_str().unwrap();
    let dir_s = dir.0.to_str().unwrap();
    let _srv = server("read-ahead server", port, Path::new("python3"), &[script, "server", &port.to_string(), dir_s]);
    let (rt, prom) = ringtail_for(b, &[port], "");
    let out = Command::new("python3").args([script, "client", &port.to_string(), dir_s]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200 200");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 2);
    assert_eq!(server_counts(&spans), expect(&[("GET", "/big", 200, 1), ("GET", "/next", 200, 1)]), "{}", rt.stdout());
    assert_no_connection_state(prom);
}

// Go's HTTP/1 transport writes on one goroutine and reads on another: a
// request whose answer is read before its send is reported is paired with
// it when TCP says it was all sent and acked (answer_early in
// bpf/http1_conn.h). Under concurrency, every request of 4 goroutines ×
// 500 is a span, none given up (how many were paired is printed: it
// depends on the scheduler).
fn go_client_under_concurrency_every_request_is_a_span(b: &str) {
    if !can_trace() || !have("nginx") {
        return;
    }
    let Some(client) = go_binary("client") else { return };
    let port = free_port();
    let www = TempDir::new("go-client");
    let _nginx = nginx_with(port, &www.0, 1, "", "");
    let prom = free_port();
    let rt = start(
        b,
        &format!("[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nexe_names = [\"^client$\"]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"),
    );
    let st = Command::new(&client).args([&format!("http://127.0.0.1:{port}/ok"), "500", "4"]).status().unwrap();
    assert!(st.success());
    let peer = format!("127.0.0.1:{port}");
    let ours = |s: &&SpanLine| s.kind == "CLIENT" && s.peer == peer;
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(ours).count() >= 2000);
    let got: Vec<&SpanLine> = spans.iter().filter(ours).collect();
    let dropped = metric_value(prom, "ringtail_dropped_events_total", &[("reason", "answered_before_sent")]).unwrap_or(0.0);
    let paired = metric_value(prom, "ringtail_answered_before_sent_paired_total", &[]).unwrap_or(0.0);
    eprintln!("go client: {paired} of 2000 requests answered before their send was reported, paired");
    assert_eq!(got.len(), 2000, "{dropped} answered before sent, not paired");
    assert!(got.iter().all(|s| s.path == "/ok" && s.status == 200 && s.service == "client"), "{}", rt.stdout());
    assert_eq!(dropped, 0.0);
}

fn client_spans_from_curl_python_and_go(b: &str) {
    if !can_trace() || !have("curl") {
        return;
    }
    let Some(client) = go_binary("client") else { return };
    let port = free_port();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let _srv = server("rust server", port, &bin, &[&port.to_string()]);
    // Clients are selected by executable name.
    let rt = start(
        b,
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nexe_names = [\"^curl$\", \"^python3\", \"^client$\"]\n",
    );
    let url = format!("http://127.0.0.1:{port}");
    let st =
        Command::new("curl").args(["-s", "-o", "/dev/null", &format!("{url}/from-curl"), &format!("{url}/status/404")]).status().unwrap();
    assert!(st.success());
    let st = Command::new("python3")
        .args(["-c", &format!("import urllib.request as u\nfor p in ('/from-python',):\n    u.urlopen('{url}' + p).read()\ntry:\n    u.urlopen('{url}/status/503')\nexcept Exception:\n    pass\n")])
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new(&client).args([&format!("{url}/from-go"), "3"]).status().unwrap();
    assert!(st.success());
    let ours = |s: &SpanLine| s.kind == "CLIENT" && s.peer.ends_with(&format!(":{port}"));
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| ours(s)).count() >= 7);
    let mut got: BTreeMap<(String, String, u16), usize> = BTreeMap::new();
    for s in spans.iter().filter(|s| s.kind == "CLIENT" && s.peer.ends_with(&format!(":{port}"))) {
        *got.entry((s.service.clone(), s.path.clone(), s.status)).or_default() += 1;
        assert_eq!(s.peer, format!("127.0.0.1:{port}"), "{}", s.line);
        assert_eq!(s.name, "GET");
    }
    let python_service = spans.iter().find(|s| s.path == "/from-python").map(|s| s.service.clone()).unwrap_or_default();
    assert!(python_service.starts_with("python3"), "{python_service}");
    let want: BTreeMap<(String, String, u16), usize> = [
        (("curl".to_string(), "/from-curl".to_string(), 200), 1),
        (("curl".to_string(), "/status/404".to_string(), 404), 1),
        ((python_service.clone(), "/from-python".to_string(), 200), 1),
        ((python_service, "/status/503".to_string(), 503), 1),
        (("client".to_string(), "/from-go".to_string(), 200), 3),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
}

fn traceparent_is_joined_and_outgoing_calls_are_children(b: &str) {
    if !can_trace() {
        return;
    }
    let (front, back) = (free_port(), free_port());
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let _backend = server("rust server", back, &bin, &[&back.to_string()]);
    let (rt, _) = ringtail_for(b, &[front, back], "");
    let _proxy = server(
        "python proxy",
        front,
        Path::new("python3"),
        &[fixture("py_proxy_server.py").to_str().unwrap(), &front.to_string(), &back.to_string()],
    );
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let r = http_get(front, "/call?n=2", &[("traceparent", &format!("00-{trace}-00f067aa0ba902b7-01"))]).unwrap();
    assert_eq!(r.status, 200);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 5);
    let outer = spans.iter().find(|s| s.kind == "SERVER" && s.path == "/call").expect("outer server span");
    assert_eq!(outer.trace, trace);
    assert_eq!(outer.parent.as_deref(), Some("00f067aa0ba902b7"));
    let clients: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == "CLIENT").collect();
    assert_eq!(clients.len(), 2, "{spans:?}");
    for c in &clients {
        assert_eq!(c.trace, trace, "client joins the trace: {}", c.line);
        assert_eq!(c.parent.as_deref(), Some(outer.span.as_str()), "client is the server span's child: {}", c.line);
    }
    let inner: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == "SERVER" && s.path == "/inner").collect();
    assert_eq!(inner.len(), 2);
}

fn selection_by_pid_and_exe_and_never_itself(b: &str) {
    if !can_trace() || !have("node") {
        return;
    }
    let (a, unselected, c) = (free_port(), free_port(), free_port());
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let by_pid = server("rust server a", a, &bin, &[&a.to_string()]);
    let _unselected = server("rust server b", unselected, &bin, &[&unselected.to_string()]);
    let prom = free_port();
    let rt = start(b, &format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\npids = [{}]\nexe_names = [\"^node$\", \"^python3\"]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        by_pid.pid()
    ));
    // Started after ringtail: found through its exec.
    let _node = server("node", c, Path::new("node"), &[fixture("node/server.js").to_str().unwrap(), &c.to_string()]);
    // Selected by name as "python3", then exec'd into something else: not traced.
    let d = free_port();
    let _execd = server(
        "python exec'ing rust server",
        d,
        Path::new("python3"),
        &["-c", &format!("import os; os.execv({:?}, ['rust_http_server', '{d}'])", bin.to_str().unwrap())],
    );
    for port in [a, unselected, c, d] {
        assert_eq!(http_get(port, &format!("/to-{port}"), &[]).unwrap().status, 200);
    }
    // ringtail's own endpoint, scraped: never a span.
    assert!(wait_until(Duration::from_secs(10), || scrape(prom).contains("ringtail_").then_some(())).is_some());
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 2);
    // (Other processes on this host may be selected by name too: look at ours.)
    let paths: Vec<&str> = spans.iter().filter(|s| s.path.starts_with("/to-")).map(|s| s.path.as_str()).collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(paths.contains(&format!("/to-{a}").as_str()) && paths.contains(&format!("/to-{c}").as_str()), "{paths:?}");
    assert!(!spans.iter().any(|s| s.path == "/metrics" || s.service.starts_with("ringtail")), "{spans:?}");
}

/// A process selected by a literal executable name (`^curl$`) is selected
/// by the kernel at its exec, so its very first request is traced even when
/// the loader reads the exec record late: here the loader is stopped
/// (SIGSTOP) while curl runs, and the span still comes.
fn a_literal_exe_name_is_selected_at_exec(b: &str) {
    if !can_trace() || !have("curl") {
        return;
    }
    let port = free_port();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let _srv = server("rust server", port, &bin, &[&port.to_string()]);
    let rt = start(b, "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nexe_names = [\"^curl$\"]\n");
    let loader = rt.pid("probe-loader").expect("the loader's pid");
    // SAFETY: signals to a child of this test's ringtail.
    unsafe { libc::kill(loader as i32, libc::SIGSTOP) };
    let st = Command::new("curl").args(["-s", "-o", "/dev/null", &format!("http://127.0.0.1:{port}/first")]).status();
    unsafe { libc::kill(loader as i32, libc::SIGCONT) };
    assert!(st.unwrap().success());
    let peer = format!("127.0.0.1:{port}");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().any(|s| s.kind == "CLIENT" && s.peer == peer));
    let got: Vec<(&str, &str)> =
        spans.iter().filter(|s| s.kind == "CLIENT" && s.peer == peer).map(|s| (s.service.as_str(), s.path.as_str())).collect();
    assert_eq!(got, [("curl", "/first")], "{}", rt.stdout());
}

fn events_below_wakeup_len_still_arrive_within_flush_interval(b: &str) {
    if !can_trace() {
        return;
    }
    let port = free_port();
    let rt = start(b, &format!(
        "[probe]\nwakeup_len = 100000\nflush_interval = \"100ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{port}]\n"
    ));
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let _srv = server("rust server", port, &bin, &[&port.to_string()]);
    let sent = std::time::Instant::now();
    assert_eq!(http_get(port, "/lonely", &[]).unwrap().status, 200);
    let spans = rt.spans_when(Duration::from_secs(5), Duration::ZERO, |s| !s.is_empty());
    assert_eq!(spans[0].path, "/lonely");
    eprintln!("one event under a 100000-event wakeup threshold arrived after {:?}", sent.elapsed());
}

fn service_names_from_rules_and_the_process_environment(b: &str) {
    if !can_trace() {
        return;
    }
    let (by_env, by_rule, by_exe) = (free_port(), free_port(), free_port());
    let rt = start(b, &format!(
        "[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{by_env}, {by_rule}, {by_exe}]\n[services]\nrules = [{{ name = \"storefront\", ports = [{by_rule}] }}]\n"
    ));
    let bin = bin_dir().join("rust_http_server");
    // A process owned by another user, with OTEL_SERVICE_NAME in its
    // environment (read through /proc by the loader).
    let _env = Proc::spawn(
        "server with OTEL_SERVICE_NAME",
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .arg(by_env.to_string())
            .env("OTEL_SERVICE_NAME", "checkout")
            .env("OTEL_RESOURCE_ATTRIBUTES", "team=payments"),
    );
    assert!(wait_port(by_env, Duration::from_secs(10)));
    let _rule = server("rule", by_rule, &bin, &[&by_rule.to_string()]);
    let _exe = server("exe", by_exe, &bin, &[&by_exe.to_string()]);
    for p in [by_env, by_rule, by_exe] {
        assert_eq!(http_get(p, &format!("/svc-{p}"), &[]).unwrap().status, 200);
    }
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 3);
    let service = |p: u16| spans.iter().find(|s| s.path == format!("/svc-{p}")).map(|s| s.service.clone());
    assert_eq!(service(by_env).as_deref(), Some("checkout"), "OTEL_SERVICE_NAME of another user's process");
    assert_eq!(service(by_rule).as_deref(), Some("storefront"), "services.rules by port");
    assert_eq!(service(by_exe).as_deref(), Some("rust_http_server"), "executable name");
}

/// A uid that is neither root, nor ringtail's, nor nobody.
const STRANGER: &str = "54321";

/// `python3 -m http.server PORT` as the stranger, with `OTEL_SERVICE_NAME`
/// set; `fork`: the server is a forked child that never execs.
fn stranger_python(name: &str, port: u16, service: &str, fork: bool) -> Proc {
    let ids = [format!("--reuid={STRANGER}"), format!("--regid={STRANGER}"), "--clear-groups".into()];
    let mut cmd = Command::new("setpriv");
    cmd.args(ids).arg("env").arg(format!("OTEL_SERVICE_NAME={service}")).arg("python3");
    if fork {
        let script = "import http.server, os, sys\n\
            srv = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)\n\
            if os.fork() == 0:\n    srv.serve_forever()\nelse:\n    os.wait()\n";
        cmd.args(["-c", script, &port.to_string()]);
    } else {
        cmd.args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1"]);
    }
    let p = Proc::spawn(
        name,
        cmd.current_dir("/").env_remove("OTEL_SERVICE_NAME").stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()),
    );
    assert!(wait_port(port, Duration::from_secs(15)), "{name} did not listen on {port}");
    p
}

/// The long-lived loader holds no capability that can touch another
/// process's memory, and still names other users' processes by their
/// `OTEL_SERVICE_NAME`: those running at its start (read from /proc while
/// privileged), those started after (from the kernel at exec), and a child
/// forked by one of those (inherited at fork).
fn loader_without_ptrace_names_processes_started_before_and_after(b: &str) {
    if !can_trace() {
        return;
    }
    let (early, late, forked) = (free_port(), free_port(), free_port());
    let _early = stranger_python("early server", early, "early-svc", false);
    let rt = start(
        b,
        &format!("[probe]\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{early}, {late}, {forked}]\n"),
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", rt.pid("probe-loader").expect("loader pid"))).expect("loader status");
    let caps = |f: &str| {
        let v = status.lines().find_map(|l| l.strip_prefix(f)).unwrap_or_else(|| panic!("{f} missing:\n{status}"));
        u64::from_str_radix(v.trim(), 16).expect("hex capabilities")
    };
    const CAP_SYS_PTRACE: u64 = 1 << 19;
    const CAP_DAC_READ_SEARCH: u64 = 1 << 2;
    for set in ["CapEff:", "CapPrm:", "CapBnd:", "CapAmb:"] {
        let v = caps(set);
        assert_eq!(v & (CAP_SYS_PTRACE | CAP_DAC_READ_SEARCH), 0, "the loader keeps CAP_SYS_PTRACE or CAP_DAC_READ_SEARCH in {set} {v:x}");
        assert_eq!(v, 0, "the loader keeps capabilities in {set} {v:x} (the README says none)");
    }
    let _late = stranger_python("late server", late, "late-svc", false);
    let _forked = stranger_python("forked server", forked, "forked-svc", true);
    for p in [early, late, forked] {
        http_get(p, &format!("/svc-{p}"), &[]).unwrap_or_else(|e| panic!("GET on {p}: {e}"));
    }
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 3);
    let service = |p: u16| spans.iter().find(|s| s.path == format!("/svc-{p}")).map(|s| s.service.clone());
    assert_eq!(service(early).as_deref(), Some("early-svc"), "a process running before ringtail (the start scan): {spans:?}");
    assert_eq!(service(late).as_deref(), Some("late-svc"), "a process started after the loader dropped its capabilities (exec): {spans:?}");
    assert_eq!(service(forked).as_deref(), Some("forked-svc"), "a forked child of a process started after (fork): {spans:?}");
}

/// The syscall backend keeps connection state in a table of
/// `probe.max_connections`: connections beyond it are not traced, and each
/// request on one is counted (never a silent loss), and the table empties
/// again when they close.
#[test]
fn syscall_backend_counts_connections_beyond_its_table() {
    if !can_trace() {
        return;
    }
    let (port, prom) = (free_port(), free_port());
    let rt = start(
        "syscalls",
        &format!(
            "[probe]\nmax_connections = 64\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{port}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"
        ),
    );
    let www = TempDir::new("www");
    std::fs::write(www.join("index.html"), "hi\n").unwrap();
    // A thread per connection: all of them stay open at once.
    let _srv = server(
        "python http.server",
        port,
        Path::new("python3"),
        &["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory", www.0.to_str().unwrap(), "--protocol", "HTTP/1.1"],
    );
    let mut conns: Vec<TcpStream> = (0..80).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    for s in &mut conns {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = Vec::new();
        s.write_all(get("/index.html").as_bytes()).unwrap();
        assert_eq!(read_response(s, &mut buf, false), 200);
    }
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 64);
    assert_eq!(server_counts(&spans), expect(&[("GET", "/index.html", 200, 64)]));
    let failed = wait_until(Duration::from_secs(5), || {
        metric_value(prom, "ringtail_dropped_events_total", &[("reason", "connection_state_failed")]).filter(|v| *v >= 16.0)
    });
    assert_eq!(failed, Some(16.0), "{}", scrape(prom));
    let live = wait_until(Duration::from_secs(5), || kernel_connections(prom).filter(|n| *n == 64.0));
    assert_eq!(live, Some(64.0), "{:?}", kernel_connections(prom));
    drop(conns);
    assert_no_connection_state(prom);
}

// Each test, once per capture backend.
on_both_backends!(
    loader_without_ptrace_names_processes_started_before_and_after,
    python_http_server_http10_http11_keepalive_head_and_statuses,
    every_syscall_pair_is_captured,
    nginx_keepalive_sendfile_statuses_and_pipelining,
    go_net_http_server,
    node_http_server,
    rust_std_server,
    split_heads_pipelines_and_aborted_requests,
    truncated_requests_keep_their_prefix_and_are_counted,
    client_spans_from_curl_python_and_go,
    answer_read_before_the_send_is_reported,
    a_request_begun_before_the_answer_s_send_is_reported,
    go_client_under_concurrency_every_request_is_a_span,
    an_answer_to_a_request_sent_before_tracing_is_an_orphan,
    traceparent_is_joined_and_outgoing_calls_are_children,
    selection_by_pid_and_exe_and_never_itself,
    a_literal_exe_name_is_selected_at_exec,
    events_below_wakeup_len_still_arrive_within_flush_interval,
    service_names_from_rules_and_the_process_environment,
);
