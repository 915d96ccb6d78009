//! HTTPS: the plaintext of OpenSSL connections, read by the TLS uprobes,
//! becomes spans like cleartext requests' but with `url.scheme = "https"`.
//!
//! Real servers and clients with a self-signed certificate each test makes,
//! a real OTLP receiver (the scheme is an attribute), exact counts, on both
//! capture backends. Ciphertext never makes a span: a span too many fails
//! the counts.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(30);

/// ringtail on backend `b` exporting to `rotel`, with `discovery` (a
/// `[discovery]` body) and more sections in `extra`.
fn ringtail(b: &str, rotel: &Rotel, discovery: &str, extra: &str) -> Ringtail {
    Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\n{discovery}\n\
         [export]\nstdout = true\n[export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n{extra}",
        rotel.grpc
    ))
}

/// nginx listening on `tls` (`ssl` plus `options`, e.g. `http2`) and
/// `plain` (cleartext) at once.
fn nginx_mixed(dir: &TempDir, tls: u16, options: &str, plain: u16) -> Proc {
    let (cert, key) = certificate(&dir.0);
    let extra = format!(
        "}}\n    server {{\n        listen 127.0.0.1:{tls} ssl {options};\n        ssl_certificate {cert};\n        ssl_certificate_key {key};\n\
         location = /ok {{ return 200 \"ok\\n\"; }}\n        location = /teapot {{ return 418; }}\n        location = /big {{ return 200 \"{}\"; }}\n",
        "x".repeat(3000)
    );
    // the harness's server block (cleartext) is closed by `extra`'s `}`,
    // which then opens the TLS one that the harness closes
    let p = nginx(plain, &dir.0, &extra);
    assert!(wait_port(tls, Duration::from_secs(10)), "nginx did not listen on {tls}");
    p
}

/// (1) and (5): nginx with `ssl`, keep-alive (curl sends several requests on
/// one connection), and the same nginx on a cleartext port at once: exactly
/// one span per request on each, the TLS ones `https`.
fn nginx_tls_keepalive_beside_cleartext(b: &str) {
    if !ready_to_trace(&["nginx", "curl", "openssl"]) {
        return;
    }
    let rotel = Rotel::start();
    let (tls, plain) = (free_port(), free_port());
    let rt = ringtail(b, &rotel, &format!("open_ports = [{tls}, {plain}]"), "");
    let dir = TempDir::new("nginx-tls");
    let _nginx = nginx_mixed(&dir, tls, "", plain);
    let s = format!("https://127.0.0.1:{tls}");
    let st = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null"])
        .args([format!("{s}/ok"), format!("{s}/teapot"), format!("{s}/ok"), format!("{s}/big"), format!("{s}/missing")])
        .status()
        .expect("run curl");
    assert!(st.success());
    let c = format!("http://127.0.0.1:{plain}");
    let st = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null"])
        .args([format!("{c}/ok"), format!("{c}/teapot"), format!("{c}/ok")])
        .status()
        .expect("run curl");
    assert!(st.success());
    let ports = [tls.to_string(), plain.to_string()];
    let ours = |s: &Value| s["kind"] == 2 && attr(s, "server.port").is_some_and(|p| ports.contains(&p));
    let spans = expect_spans(
        &rotel,
        &rt,
        (WAIT, SETTLE),
        ours,
        &[
            (k("server", "https", "GET", "/ok", 200), 2),
            (k("server", "https", "GET", "/teapot", 418), 1),
            (k("server", "https", "GET", "/big", 200), 1),
            (k("server", "https", "GET", "/missing", 404), 1),
            (k("server", "http", "GET", "/ok", 200), 2),
            (k("server", "http", "GET", "/teapot", 418), 1),
        ],
    );
    // the TLS requests: on their own port, from one connection
    for s in spans.iter().filter(|s| attr(s, "url.scheme").as_deref() == Some("https")) {
        assert_eq!(attr(s, "server.port"), Some(tls.to_string()));
    }
    let peers: std::collections::BTreeSet<String> =
        spans.iter().filter(|s| attr(s, "url.scheme").as_deref() == Some("https")).filter_map(|s| attr(s, "client.port")).collect();
    assert_eq!(peers.len(), 1, "keep-alive: one connection for the five TLS requests: {peers:?}");
}

/// A Python `urllib` client that does not verify the certificate.
const PY_TLS_CLIENT: &str = r#"
import ssl, sys, urllib.request, urllib.error
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
base = sys.argv[1]
urllib.request.urlopen(base + "/from-python", context=ctx).read()
urllib.request.urlopen(urllib.request.Request(base + "/upload", data=b"x" * 100, method="POST"), context=ctx).read()
try:
    urllib.request.urlopen(base + "/missing", context=ctx)
except urllib.error.HTTPError:
    pass
"#;

/// (2), (3) and (6): a Python TLS server and the Python `urllib` and curl
/// HTTPS clients, all started after ringtail (they use the host's libssl,
/// attached at start: a process started later is covered): one server and
/// one client span per request, all `https`.
fn python_tls_server_with_urllib_and_curl_clients(b: &str) {
    if !ready_to_trace(&["python3", "curl", "openssl"]) {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let rt = ringtail(b, &rotel, "exe_names = [\"^python3\", \"^curl$\"]", "");
    let (_dir, _srv) = python_tls("python tls server", PY_TLS_SERVER, port, &[]);
    let base = format!("https://127.0.0.1:{port}");
    let st = Command::new("python3").args(["-c", PY_TLS_CLIENT, &base]).status().expect("run python3");
    assert!(st.success());
    let st = curl_status(&["-k", "-o", "/dev/null", "-o", "/dev/null", &format!("{base}/from-curl"), &format!("{base}/from-curl-2")]);
    assert!(st.success());
    let p = port.to_string();
    let ours = |s: &Value| {
        (s["kind"] == 2 && attr(s, "server.port").as_deref() == Some(&p))
            || (s["kind"] == 3 && attr(s, "server.port").as_deref() == Some(&p))
    };
    expect_spans(
        &rotel,
        &rt,
        (WAIT, SETTLE),
        ours,
        &[
            (k("server", "https", "GET", "/from-python", 200), 1),
            (k("server", "https", "POST", "/upload", 201), 1),
            (k("server", "https", "GET", "/missing", 404), 1),
            (k("server", "https", "GET", "/from-curl", 200), 1),
            (k("server", "https", "GET", "/from-curl-2", 200), 1),
            (k("client", "https", "GET", "/from-python", 200), 1),
            (k("client", "https", "POST", "/upload", 201), 1),
            (k("client", "https", "GET", "/missing", 404), 1),
            (k("client", "https", "GET", "/from-curl", 200), 1),
            (k("client", "https", "GET", "/from-curl-2", 200), 1),
        ],
    );
}

/// A Python TLS server whose handler calls a cleartext backend.
const PY_TLS_PROXY: &str = r#"
import http.server, ssl, sys, urllib.request
back = int(sys.argv[4])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        for _ in range(2):
            urllib.request.urlopen(f"http://127.0.0.1:{back}/inner").read()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;

/// The same `traceparent` handling and parent/child links as cleartext: a
/// TLS server request joins the caller's trace, and the cleartext calls its
/// thread makes are its children.
fn tls_server_joins_the_trace_and_its_calls_are_children(b: &str) {
    if !ready_to_trace(&["python3", "curl", "openssl"]) {
        return;
    }
    let rotel = Rotel::start();
    let (front, back) = (free_port(), free_port());
    let rt = ringtail(b, &rotel, &format!("open_ports = [{front}, {back}]"), "");
    let www = TempDir::new("inner");
    std::fs::write(www.join("inner"), "inner\n").expect("write inner");
    let _back = python_http_server(back, &www.0);
    let (_dir, _front) = python_tls("python tls proxy", PY_TLS_PROXY, front, &[&back.to_string()]);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let st = Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-H",
            &format!("traceparent: 00-{trace}-00f067aa0ba902b7-01"),
            &format!("https://127.0.0.1:{front}/call"),
        ])
        .status()
        .expect("run curl");
    assert!(st.success());
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.len() >= 5);
    assert_eq!(spans.len(), 5, "one outer server span, two client spans, two inner server spans: {spans:?}");
    let outer = spans.iter().find(|s| s.kind == "SERVER" && s.path == "/call").expect("outer server span");
    assert_eq!(outer.trace, trace);
    assert_eq!(outer.parent.as_deref(), Some("00f067aa0ba902b7"));
    let clients: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == "CLIENT" && s.path == "/inner").collect();
    assert_eq!(clients.len(), 2, "{spans:?}");
    for c in &clients {
        assert_eq!(c.trace, trace, "the client joins the trace: {}", c.line);
        assert_eq!(c.parent.as_deref(), Some(outer.span.as_str()), "the client is the TLS server span's child: {}", c.line);
    }
    assert_eq!(spans.iter().filter(|s| s.kind == "SERVER" && s.path == "/inner").count(), 2);
    let _ = expect_spans(
        &rotel,
        &rt,
        (WAIT, SETTLE),
        |s| s["kind"] == 2 && attr(s, "server.port") == Some(front.to_string()),
        &[(k("server", "https", "GET", "/call", 200), 1)],
    );
}

/// HTTP/2 over TLS: nginx with `ssl http2` and curl `--http2` (ALPN h2,
/// several streams on one connection). The plaintext the TLS uprobes read
/// starts with the client preface, so both sides are followed as HTTP/2:
/// one server and one client span per stream, `https`, protocol "2".
fn nginx_http2_over_tls(b: &str) {
    if !ready_to_trace(&["nginx", "curl", "openssl"]) {
        return;
    }
    let rotel = Rotel::start();
    let (tls, plain) = (free_port(), free_port());
    let rt = ringtail(b, &rotel, &format!("open_ports = [{tls}]\nexe_names = [\"^curl$\"]"), "");
    let dir = TempDir::new("nginx-h2-tls");
    let _nginx = nginx_mixed(&dir, tls, "http2", plain);
    let s = format!("https://127.0.0.1:{tls}");
    let out = Command::new("curl")
        .args(["-sk", "--http2", "-w", "%{http_version} ", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null"])
        .args([format!("{s}/ok"), format!("{s}/teapot"), format!("{s}/ok")])
        .output()
        .expect("run curl");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 2 2 ", "curl did not speak HTTP/2");
    let port = tls.to_string();
    let ours = |s: &Value| attr(s, "server.port").as_deref() == Some(port.as_str());
    let spans = expect_spans(
        &rotel,
        &rt,
        (WAIT, SETTLE),
        ours,
        &[
            (k("server", "https", "GET", "/ok", 200), 2),
            (k("server", "https", "GET", "/teapot", 418), 1),
            (k("client", "https", "GET", "/ok", 200), 2),
            (k("client", "https", "GET", "/teapot", 418), 1),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "network.protocol.version").as_deref(), Some("2"), "{s}");
    }
    let peers: std::collections::BTreeSet<String> =
        spans.iter().filter(|s| s["kind"] == 2).filter_map(|s| attr(s, "client.port")).collect();
    assert_eq!(peers.len(), 1, "one connection for the three streams: {peers:?}");
}

/// Node's `https` at both ends. Node links OpenSSL statically and exports
/// its functions: the loader finds its executable through the server that
/// runs when ringtail starts (no `tls.libraries`), and the client started
/// later runs the same file. Node runs TLS over memory buffers (it moves
/// the ciphertext itself, outside OpenSSL's calls): each connection is
/// bound by the handshake record its thread read just before. Five
/// requests on one keep-alive connection (a query, a 404, a 3,000-byte
/// POST, a 1 MiB response): one server and one client span each, `https`.
fn node_https_server_and_client(b: &str) {
    if !ready_to_trace(&["node", "openssl"]) {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("node-tls");
    let (cert, key) = certificate(&dir.0);
    let script = fixture("node/https.js");
    let script = script.to_str().unwrap();
    let srv = server("node https server", port, Path::new("node"), &[script, "server", &port.to_string(), &cert, &key]);
    let rt = ringtail(b, &rotel, "exe_names = [\"^node$\"]", "");
    let node = std::fs::read_link(format!("/proc/{}/exe", srv.pid())).expect("the server's executable");
    assert!(
        rt.log().lines().any(|l| l.contains("event=\"tls_attached\"") && l.contains(&format!("{}", node.display()))),
        "the running server's executable was not attached:\n{}",
        rt.log()
    );
    let out = Command::new("node").args([script, "client", &port.to_string()]).output().expect("run node");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().collect::<Vec<_>>(),
        ["/a 200", "/b?x=1 200", "/status/404 404", "/echo 200", "/big 200"]
    );
    let p = port.to_string();
    let ours = |s: &Value| attr(s, "server.port").as_deref() == Some(p.as_str());
    let mut want = Vec::new();
    for kind in ["server", "client"] {
        want.push((k(kind, "https", "GET", "/a", 200), 1));
        want.push((k(kind, "https", "GET", "/b", 200), 1));
        want.push((k(kind, "https", "GET", "/status/404", 404), 1));
        want.push((k(kind, "https", "POST", "/echo", 200), 1));
        want.push((k(kind, "https", "GET", "/big", 200), 1));
    }
    let spans = expect_spans(&rotel, &rt, (WAIT, SETTLE), ours, &want);
    let peers: std::collections::BTreeSet<String> =
        spans.iter().filter(|s| s["kind"] == 2).filter_map(|s| attr(s, "client.port")).collect();
    assert_eq!(peers.len(), 1, "one keep-alive connection: {peers:?}");
}

/// A peer cannot steer a binding: bytes that look like a TLS handshake,
/// sent to a Node process's cleartext port, precede that process's own
/// HTTPS call on the same thread. Only what the process itself sends binds
/// its SSL objects, so the call's client span is on its real connection
/// (to the TLS server's port), and the planted bytes make no span.
fn a_peer_cannot_steer_a_tls_binding(b: &str) {
    if !ready_to_trace(&["node", "openssl", "curl"]) {
        return;
    }
    let rotel = Rotel::start();
    let (tls_port, port) = (free_port(), free_port());
    let dir = TempDir::new("node-tls-steer");
    let (cert, pem_key) = certificate(&dir.0);
    let script = fixture("node/https.js");
    let script = script.to_str().unwrap();
    let _srv = server("node https server", tls_port, Path::new("node"), &[script, "server", &tls_port.to_string(), &cert, &pem_key]);
    let rt = ringtail(b, &rotel, "exe_names = [\"^node$\"]", "");
    let _proxy = server("node proxy", port, Path::new("node"), &[script, "proxy", &port.to_string(), &tls_port.to_string()]);
    // a ClientHello-looking record on the cleartext port; Node answers 400
    // and closes, so it has read it before the call below
    let mut peer = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    peer.write_all(&[22, 3, 1, 0, 5, 1, 0, 0, 1, 0]).expect("send");
    let mut answer = Vec::new();
    let _ = peer.read_to_end(&mut answer);
    assert!(answer.starts_with(b"HTTP/1.1 400"), "{:?}", String::from_utf8_lossy(&answer));
    let out = Command::new("curl")
        .args(["-s", "-w", "%{http_code}", "-o", "/dev/null", &format!("http://127.0.0.1:{port}/call")])
        .output()
        .expect("run curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    let ours = |s: &Value| attr(s, "url.path").is_some_and(|p| p == "/call" || p == "/inner");
    let spans = expect_spans(
        &rotel,
        &rt,
        (WAIT, SETTLE),
        ours,
        &[
            (k("server", "http", "GET", "/call", 200), 1),
            (k("client", "https", "GET", "/inner", 200), 1),
            (k("server", "https", "GET", "/inner", 200), 1),
        ],
    );
    // the call's span is on its own connection, to the TLS server
    let call = spans.iter().find(|s| s["kind"] == 3).expect("the client span");
    assert_eq!(attr(call, "network.peer.port"), Some(tls_port.to_string()), "{call}");
    assert_eq!(attr(call, "server.port"), Some(tls_port.to_string()), "{call}");
}

/// A server that answers a TLS handshake record with one of its own, then
/// every read with an HTTP response: what a TLS server whose ciphertext
/// happens to look like a request line would show the socket hooks.
const PY_HELLO_THEN_ANSWERS: &str = r#"
import socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen(8)
while True:
    c, _ = srv.accept()
    first = True
    while True:
        b = c.recv(4096)
        if not b:
            break
        if first and b[0] == 22:
            c.sendall(bytes([22, 3, 3, 0, 1, 2]))
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        first = False
    c.close()
"#;

/// Ciphertext is never read as HTTP: a connection on which the process
/// sent a TLS handshake record (here the server, answering a ClientHello,
/// outside any TLS call) is TLS from then on, and a later read that looks
/// like a request line (ciphertext does, now and then: a read may begin
/// anywhere inside a record) makes no span. The server's process is
/// traced and has no TLS library attached; a cleartext request after it,
/// on a connection of its own, is its only span.
fn ciphertext_that_looks_like_a_request_makes_no_span(b: &str) {
    if !ready_to_trace(&["python3"]) {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let rt = ringtail(b, &rotel, "exe_names = [\"^python3\"]", "");
    let _srv = server("hello server", port, Path::new("python3"), &["-c", PY_HELLO_THEN_ANSWERS, &port.to_string()]);
    let mut peer = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    peer.write_all(&[22, 3, 1, 0, 5, 1, 0, 0, 1, 0]).expect("send the hello");
    let mut hello = [0u8; 6];
    peer.read_exact(&mut hello).expect("the server's record: it has read ours");
    assert_eq!(hello[0], 22);
    peer.write_all(b"GET /inside-tls HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut answer = [0u8; 38];
    peer.read_exact(&mut answer).expect("the server's answer");
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&answer));
    drop(peer); // (the server serves one connection at a time)
    let mut clear = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    clear.write_all(b"GET /clear HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    clear.read_exact(&mut answer).expect("the server's answer");
    let ours = |s: &Value| attr(s, "url.path").is_some_and(|p| p == "/inside-tls" || p == "/clear");
    expect_spans(&rotel, &rt, (WAIT, SETTLE), ours, &[(k("server", "http", "GET", "/clear", 200), 1)]);
}

/// An asyncio HTTP/1.1 server over TLS: Python's `ssl.SSLObject` on memory
/// buffers, the ciphertext moved by the event loop.
const PY_ASYNCIO_TLS: &str = r#"
import asyncio, ssl, sys
async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            n = 0
            for h in head.split(b"\r\n")[1:]:
                if h.lower().startswith(b"content-length:"):
                    n = int(h.split(b":", 1)[1])
            await reader.readexactly(n)
            status = 404 if path == "/missing" else 200
            writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 3\r\n\r\nok\n".encode())
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()
async def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    srv = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]), ssl=ctx)
    await srv.serve_forever()
asyncio.run(main())
"#;

/// Python's asyncio TLS server (memory buffers, like Node) and curl (three
/// requests on one connection): one server and one client span each.
fn python_asyncio_tls_server(b: &str) {
    if !ready_to_trace(&["python3", "curl", "openssl"]) {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let rt = ringtail(b, &rotel, "exe_names = [\"^python3\", \"^curl$\"]", "");
    let (_dir, _srv) = python_tls("python asyncio tls server", PY_ASYNCIO_TLS, port, &[]);
    let base = format!("https://127.0.0.1:{port}");
    let urls = [format!("{base}/a"), format!("{base}/missing"), format!("{base}/post")];
    let mut args = vec!["-k", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-d", "x=1"];
    args.extend(urls.iter().map(String::as_str));
    let st = curl_status(&args);
    assert!(st.success());
    let p = port.to_string();
    let ours = |s: &Value| attr(s, "server.port").as_deref() == Some(p.as_str());
    let mut want = Vec::new();
    for kind in ["server", "client"] {
        want.push((k(kind, "https", "POST", "/a", 200), 1));
        want.push((k(kind, "https", "POST", "/missing", 404), 1));
        want.push((k(kind, "https", "POST", "/post", 200), 1));
    }
    let _ = expect_spans(&rotel, &rt, (WAIT, SETTLE), ours, &want);
}

/// A capability set of process `pid` (`set`: "CapEff", "CapBnd"... of
/// /proc/PID/status).
fn caps_of(pid: u32, set: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read the loader's status");
    let hex = status.lines().find_map(|l| l.strip_prefix(set)?.strip_prefix(':')).expect("the set's line").trim();
    u64::from_str_radix(hex, 16).expect("a capability set is hex")
}

/// An OpenSSL file that appears after start (a private copy of the host's
/// libssl, which the server loads through LD_LIBRARY_PATH) is attached by
/// the TLS attacher as soon as a selected process maps it, before its
/// first request: every request is a span, the first too. The loader keeps
/// no capability; the attacher, its child, keeps the five attaching needs
/// (bounding set too, no_new_privs). A loader restart (kill -9: the
/// attacher dies with it) reopens the pinned set, its new attacher
/// attaches again for the processes running, and a second new copy is
/// attached with the pinned programs.
fn a_library_that_appears_later_is_attached_when_used(b: &str) {
    if !ready_to_trace(&["python3", "curl", "openssl"]) {
        return;
    }
    let host = ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libssl.so.3"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("the host's libssl.so.3");
    let rotel = Rotel::start();
    let mut rt = ringtail(b, &rotel, "exe_names = [\"^python3\"]", "");
    let loader = rt.pid("probe-loader").expect("loader pid");
    for set in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
        assert_eq!(caps_of(loader, set), 0, "the loader's {set}; log:\n{}", rt.log());
    }
    // CAP_DAC_READ_SEARCH 2, CAP_SYS_PTRACE 19, CAP_PERFMON 38, CAP_BPF 39,
    // and CAP_SYS_ADMIN 21 for perf-event uprobes, else (uprobe_multi
    // links, 6.6+) CAP_CHECKPOINT_RESTORE 40 for map_files.
    let perf = rt.log().contains("kind=\"perf events\"");
    let kept = (1u64 << 2) | (1 << 19) | (1 << 38) | (1 << 39) | if perf { 1 << 21 } else { 1 << 40 };
    let attacher = attacher_of(loader).unwrap_or_else(|| panic!("no TLS attacher under the loader; log:\n{}", rt.log()));
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(caps_of(attacher, set), kept, "the attacher's {set}; log:\n{}", rt.log());
    }
    assert_eq!(caps_of(attacher, "CapInh") | caps_of(attacher, "CapAmb"), 0);
    let status = std::fs::read_to_string(format!("/proc/{attacher}/status")).expect("the attacher's status");
    assert!(status.lines().any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1')), "{status}");
    let dir = TempDir::new("late-lib");
    let (cert, key) = certificate(&dir.0);
    let script = dir.join("server.py");
    std::fs::write(&script, PY_TLS_SERVER).expect("write server.py");
    // a server whose libssl is a copy made now, in lib-NAME
    let serve = |name: &str| -> (Proc, u16, String) {
        let lib = dir.join(&format!("lib-{name}"));
        std::fs::create_dir_all(&lib).expect("mkdir");
        std::fs::copy(host, lib.join("libssl.so.3")).expect("copy libssl");
        let port = free_port();
        let p = Proc::spawn(
            "python tls server",
            Command::new("python3")
                .args([script.to_str().unwrap(), &port.to_string(), &cert, &key])
                .env("LD_LIBRARY_PATH", &lib)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        assert!(wait_port(port, Duration::from_secs(15)), "the server did not listen on {port}");
        (p, port, lib.join("libssl.so.3").display().to_string())
    };
    let curl = |port: u16, paths: &[&str]| {
        let urls: Vec<String> = paths.iter().map(|p| format!("https://127.0.0.1:{port}{p}")).collect();
        let st =
            Command::new("curl").arg("-sk").args(paths.iter().flat_map(|_| ["-o", "/dev/null"])).args(&urls).status().expect("run curl");
        assert!(st.success());
    };
    let attached = |rt: &Ringtail, copy: &str| {
        wait_until(WAIT, || rt.log().lines().any(|l| l.contains("event=\"tls_attached\"") && l.contains(copy)).then_some(()))
            .unwrap_or_else(|| panic!("{copy} was not attached; log:\n{}", rt.log()));
    };
    let (_a, port_a, copy_a) = serve("a");
    attached(&rt, &copy_a);
    curl(port_a, &["/first", "/second", "/third"]);
    // the loader restarts and reopens the pinned set
    let loader = rt.pid("probe-loader").expect("loader pid");
    // SAFETY: kill with a pid we read from the supervisor's log.
    unsafe { libc::kill(loader as i32, libc::SIGKILL) };
    wait_until(WAIT, || (rt.events("probe-loader", "ready").len() >= 2).then_some(())).expect("the loader restarted");
    let (_b, port_b, copy_b) = serve("b");
    attached(&rt, &copy_b);
    curl(port_b, &["/first", "/after-restart"]);
    let ports = [port_a.to_string(), port_b.to_string()];
    let ours = |s: &Value| s["kind"] == 2 && attr(s, "server.port").is_some_and(|p| ports.contains(&p));
    let spans = expect_spans(
        &rotel,
        &rt,
        (WAIT, SETTLE),
        ours,
        &[
            (k("server", "https", "GET", "/first", 200), 2),
            (k("server", "https", "GET", "/second", 200), 1),
            (k("server", "https", "GET", "/third", 200), 1),
            (k("server", "https", "GET", "/after-restart", 200), 1),
        ],
    );
    assert_eq!(spans.len(), 5);
    assert!(rt.stop());
}

on_both_backends!(
    ciphertext_that_looks_like_a_request_makes_no_span,
    nginx_tls_keepalive_beside_cleartext,
    python_tls_server_with_urllib_and_curl_clients,
    tls_server_joins_the_trace_and_its_calls_are_children,
    nginx_http2_over_tls,
    node_https_server_and_client,
    python_asyncio_tls_server,
    a_library_that_appears_later_is_attached_when_used,
    a_peer_cannot_steer_a_tls_binding,
);

/// The TLS attacher: the loader's child that runs `attach-tls`.
fn attacher_of(loader: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{loader}/task/{loader}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
        .find(|c| std::fs::read(format!("/proc/{c}/cmdline")).is_ok_and(|cmd| cmd.split(|b| *b == 0).nth(1) == Some(b"attach-tls")))
}

/// The TLS uprobes' BPF links: those of the `tls_*` and `go_tls_*`
/// programs that are uprobes (perf events, or uprobe_multi links: bpftool
/// 7.1 shows those as type 12), not the tracepoints (`tls_sock_state`,
/// `tls_mmap`).
fn tls_links() -> usize {
    let out = Command::new("bpftool").args(["-j", "link", "list"]).output().expect("run bpftool");
    let links: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let progs = Command::new("bpftool").args(["-j", "prog", "list"]).output().expect("run bpftool");
    let progs: Vec<Value> = serde_json::from_slice(&progs.stdout).unwrap_or_default();
    let uprobe = |id: &Value| {
        progs.iter().any(|p| {
            &p["id"] == id && p["type"] == "kprobe" && p["name"].as_str().is_some_and(|n| n.starts_with("tls_") || n.starts_with("go_tls_"))
        })
    };
    links.iter().filter(|l| uprobe(&l["prog_id"])).count()
}

/// The number of TLS links once it reaches `n`, or what it is after WAIT: a
/// link unpinned from bpffs is released after an RCU grace period and a
/// work item, not when `unlink` returns, so a stopped ringtail's links leave
/// the kernel's list a moment later.
fn tls_links_reach(n: usize) -> usize {
    wait_until(WAIT, || (tls_links() == n).then_some(n)).unwrap_or_else(|| {
        let list = Command::new("bpftool").args(["link", "list"]).output().expect("run bpftool");
        eprintln!("links:\n{}", String::from_utf8_lossy(&list.stdout));
        tls_links()
    })
}

/// Links a file gets on this kernel: a perf event per OpenSSL 3 function's
/// entry and return probe (SSL_read, SSL_read_ex, SSL_do_handshake: entry
/// and return; SSL_write, SSL_write_ex, SSL_free: entry), or one
/// uprobe_multi link (session), or two (entries, returns).
fn links_per_file(rt: &Ringtail) -> usize {
    let kind = rt.log().lines().find(|l| l.contains("event=\"tls_attacher_started\"")).map(str::to_owned).unwrap_or_default();
    if kind.contains("uprobe sessions") {
        1
    } else if kind.contains("uprobe_multi") {
        2
    } else {
        9
    }
}

/// Files the TLS attacher attached for every process (file-wide links).
fn files_attached(rt: &Ringtail) -> usize {
    rt.log().lines().filter(|l| l.contains("event=\"tls_attached\"") && !l.contains(" pid=")).count()
}

/// (7): one set of uprobes per OpenSSL file (the host has one libssl,
/// reached by several names: libssl.so, libssl.so.3, the maps of running
/// processes), through a loader restart that reopens the pinned set (its
/// new attacher attaches nothing again), and none left after ringtail
/// stops; with `tls.enabled = false`, none at all.
#[test]
fn uprobes_attached_once_and_gone_after_stop() {
    if !ready_to_trace(&["bpftool", "nginx", "openssl"]) {
        return;
    }
    sweep_dead_tests_pins();
    assert_eq!(tls_links_reach(0), 0, "TLS uprobes attached before ringtail started");
    // a running process that maps the host's libssl (found through its maps too)
    let dir = TempDir::new("once");
    let (tls, plain) = (free_port(), free_port());
    let _nginx = nginx_mixed(&dir, tls, "", plain);
    let rotel = Rotel::start();
    // Every process selected: file-wide links.
    let mut rt = ringtail("socket", &rotel, "", "");
    let per_file = links_per_file(&rt);
    let files = files_attached(&rt);
    assert!(files >= 1, "no file attached; log:\n{}", rt.log());
    assert_eq!(tls_links(), per_file * files, "log:\n{}", rt.log());
    // a loader restart reopens the pinned set: the same uprobes, none added
    let loader = rt.pid("probe-loader").expect("loader pid");
    // SAFETY: kill with a pid we read from the supervisor's log.
    unsafe { libc::kill(loader as i32, libc::SIGKILL) };
    wait_until(WAIT, || (rt.events("probe-loader", "ready").len() >= 2).then_some(())).expect("the loader restarted");
    assert_eq!(tls_links(), per_file * files_attached(&rt), "after a loader restart; log:\n{}", rt.log());
    assert_eq!(files_attached(&rt), files, "the restarted loader's attacher attached files again; log:\n{}", rt.log());
    assert!(rt.stop(), "ringtail did not stop");
    assert_eq!(tls_links_reach(0), 0, "TLS uprobes left after ringtail stopped");
    let mut off = ringtail("socket", &rotel, "pids = [1]", "[tls]\nenabled = false\n");
    assert_eq!(tls_links(), 0, "tls.enabled = false attached uprobes");
    assert!(off.stop());
}
