//! Trace context propagation (`probe.propagate`): the kernel writes a
//! `traceparent` into the clear-text HTTP/1 requests traced processes send
//! without one, so that a server on another host continues the client's
//! trace. Here the other host is a network namespace behind a veth pair the
//! test makes; the server reports the `traceparent` lines it received in
//! its answers, so that what went over the wire is checked, not only the
//! spans.
//!
//! Socket backend only (the programs need socket- and task-local storage);
//! with the syscall backend the setting is refused at start, with a reason.

use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(60);

/// Answers every request with the `traceparent` lines it carried (joined
/// by `|`, an empty line when none), keep-alive; listens on ARGV[2]:ARGV[1].
const ECHO_SERVER: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = ("|".join(self.headers.get_all("traceparent") or []) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = answer
    do_POST = answer
    def log_message(self, *a):
        pass
http.server.HTTPServer((sys.argv[2], int(sys.argv[1])), H).serve_forever()
"#;

/// A ringtail on the socket backend tracing the servers on `ports` and the
/// processes `launcher` starts, with propagation `on` or off; prints spans,
/// serves Prometheus.
fn ringtail(ports: &[u16], launcher: &Launcher, on: bool) -> (Ringtail, u16) {
    ringtail_with(ports, launcher, on, "")
}

/// [`ringtail`] with more `[probe]` settings (`probe` lines).
fn ringtail_with(ports: &[u16], launcher: &Launcher, on: bool, probe: &str) -> (Ringtail, u16) {
    let prom = free_port();
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let rt = Ringtail::start(&format!(
        "[probe]\nbackend = \"socket\"\npropagate = {on}\nflush_interval = \"20ms\"\n{probe}\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{}]\npids = [{}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        ports.join(","),
        launcher.sh.pid()
    ));
    (rt, prom)
}

/// Connections stay in the socket map after their first request (their
/// later requests written too) whatever the kernel's FIONREAD says.
const KEEP_ALIVE: &str = "propagate_keep_alive = \"always\"";

/// A shell started before ringtail and selected by its pid, which runs
/// the test's commands: they are traced from their first instruction (a
/// child inherits its parent's selection in the kernel, at fork), whatever
/// their names (one selected by a name regex the kernel cannot match is
/// selected by the loader a moment after it starts, and its first
/// connections are not claimed).
struct Launcher {
    sh: Proc,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl Launcher {
    fn new() -> Launcher {
        let mut sh = Proc::spawn(
            "launcher shell",
            Command::new("sh")
                .args(["-c", "while read -r c; do eval \"$c\"; echo; echo .; done"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        );
        let input = sh.child.stdin.take().expect("stdin");
        let output = std::io::BufReader::new(sh.child.stdout.take().expect("stdout"));
        Launcher { sh, input, output }
    }

    /// curl with `args` (single-quoted, without quotes of their own): its
    /// standard output, lines.
    fn curl(&mut self, args: &[&str]) -> Vec<String> {
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let lines = self.run(&format!("curl -sS {} || echo curl failed", quoted.join(" ")));
        assert!(!lines.iter().any(|l| l.contains("curl failed")), "curl {args:?}: {lines:?}");
        lines
    }

    /// `program` with `args` (single-quoted, without quotes of their own),
    /// its standard error with its standard output: the lines.
    fn exec(&mut self, program: &str, args: &[&str]) -> Vec<String> {
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        self.run(&format!("'{program}' {} 2>&1", quoted.join(" ")))
    }

    /// A shell command line, run by the launcher: its standard output, lines.
    fn run(&mut self, command: &str) -> Vec<String> {
        use std::io::{BufRead, Write};
        writeln!(self.input, "{command}").expect("write to the launcher");
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            assert!(self.output.read_line(&mut l).expect("read the launcher") > 0, "the launcher ended");
            let l = l.trim_end_matches('\n').to_owned();
            if l == "." {
                break;
            }
            lines.push(l);
        }
        // (the `echo` before the end mark ends the command's last line)
        assert_eq!(lines.pop().as_deref(), Some(""), "{lines:?}");
        lines
    }
}

/// The echo server on `port` of the namespace `ns`.
fn echo_server(ns: &VethNs, port: u16, dir: &TempDir) -> Proc {
    let script = dir.join("echo.py");
    std::fs::write(&script, ECHO_SERVER).expect("write echo.py");
    let srv = Proc::spawn(
        "echo server in a namespace",
        ns.command("python3").arg(&script).args([&port.to_string(), &ns.ns_addr]).stdout(Stdio::null()).stderr(Stdio::null()),
    );
    assert!(ns.wait_port(port, Duration::from_secs(15)), "the server did not listen");
    srv
}

fn refused(prom: u16, reason: &str) -> f64 {
    metric_value(prom, "ringtail_propagation_refused_total", &[("reason", reason)]).unwrap_or(0.0)
}

/// The client's spans and the server's of the requests under `prefix`, by
/// path: (client, server), once there are `n` pairs.
fn pairs(rt: &Ringtail, prefix: &str, n: usize) -> Vec<(SpanLine, SpanLine)> {
    let ours = |s: &SpanLine| s.path.starts_with(prefix);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| ours(s)).count() >= 2 * n);
    let spans: Vec<SpanLine> = spans.into_iter().filter(|s| ours(s)).collect();
    assert_eq!(spans.len(), 2 * n, "{}", rt.stdout());
    let mut out: Vec<(SpanLine, SpanLine)> = spans
        .iter()
        .filter(|s| s.kind == "CLIENT")
        .map(|c| {
            let s =
                spans.iter().find(|s| s.kind == "SERVER" && s.path == c.path).unwrap_or_else(|| panic!("no server span for {}", c.line));
            (c.clone(), s.clone())
        })
        .collect();
    out.sort_by_key(|(c, _)| c.path.clone());
    assert_eq!(out.len(), n, "{}", rt.stdout());
    out
}

/// curl → a server in another network namespace: 100 keep-alive GETs and a
/// POST each carry the traceparent of their client span (read back from the
/// server), and the server span is its child; a request that carries its
/// own traceparent, and one whose head is past 1 KiB, are sent as they are
/// and counted; with propagation off, nothing is written.
#[test]
fn a_traced_client_request_carries_its_span_context_to_a_server_in_another_namespace() {
    if !can_trace() || !have("curl") || !have("ip") || !have("/usr/bin/python3") {
        return;
    }
    let (ns, port, dir) = (VethNs::create(), free_port(), TempDir::new("propagation"));
    let _srv = echo_server(&ns, port, &dir);
    let base = format!("http://{}:{port}", ns.ns_addr);

    let mut launcher = Launcher::new();
    let (rt, prom) = ringtail_with(&[port], &launcher, true, KEEP_ALIVE);
    // 100 GETs on one connection, then a POST with a body
    let mut got = launcher.curl(&[&format!("{base}/p/[100-199]")]);
    got.extend(launcher.curl(&["-d", "a body", &format!("{base}/p/200")]));
    assert_eq!(got.len(), 101, "one answer a request: {got:?}");
    let counts = || {
        let mut c = format!("propagated {:?}", metric_value(prom, "ringtail_propagated_requests_total", &[]));
        for r in
            ["serving_a_request", "has_traceparent", "head_too_long", "insert_failed", "unclaimed", "socket_map_full", "connected_untraced"]
        {
            c.push_str(&format!(", {r} {}", refused(prom, r)));
        }
        c
    };
    for ((client, server), received) in pairs(&rt, "/p/", 101).iter().zip(&got) {
        assert_eq!(received, &format!("00-{}-{}-01", client.trace, client.span), "what the server read, {} ({})", client.line, counts());
        assert_eq!(client.parent, None, "{}", client.line);
        assert_eq!(server.trace, client.trace, "{}", server.line);
        assert_eq!(server.parent.as_deref(), Some(client.span.as_str()), "{}", server.line);
        assert_eq!(server.status, 200);
    }
    let written = wait_until(WAIT, || metric_value(prom, "ringtail_propagated_requests_total", &[]).filter(|n| *n >= 101.0));
    assert_eq!(written, Some(101.0), "every request written was counted once");

    // its own traceparent: sent as it was, counted
    let own = "00-11111111111111111111111111111111-2222222222222222-01";
    assert_eq!(launcher.curl(&["-H", &format!("traceparent: {own}"), &format!("{base}/own")]), [own]);
    // a head past the bytes looked at: sent as it was, counted
    let pad = format!("x-pad: {}", "x".repeat(1200));
    assert_eq!(launcher.curl(&["-H", &pad, &format!("{base}/long")]), [""]);
    assert_eq!(wait_until(WAIT, || Some(refused(prom, "has_traceparent")).filter(|n| *n >= 1.0)), Some(1.0));
    assert_eq!(wait_until(WAIT, || Some(refused(prom, "head_too_long")).filter(|n| *n >= 1.0)), Some(1.0));
    let (client, server) = pairs(&rt, "/own", 1).remove(0);
    assert_eq!((server.trace.as_str(), server.parent.as_deref()), ("11111111111111111111111111111111", Some("2222222222222222")));
    assert_ne!(client.trace, server.trace, "the client span did not write that traceparent");
    assert_eq!(refused(prom, "unclaimed"), 0.0, "every line written went to its client span");
    assert_eq!(refused(prom, "insert_failed"), 0.0);
    assert_eq!(refused(prom, "connected_untraced"), 0.0, "every connection was claimed");
    drop(rt);

    // off: nothing is written
    let (rt, prom) = ringtail(&[port], &launcher, false);
    assert!(launcher.curl(&[&format!("{base}/q/[100-119]")]).iter().all(String::is_empty), "no traceparent without probe.propagate");
    pairs(&rt, "/q/", 20);
    assert_eq!(metric_value(prom, "ringtail_propagated_requests_total", &[]), Some(0.0));
    eprintln!("propagation: 101 of 101 requests carried their client span's context; 1 with its own and 1 long head sent as they were");
}

/// A front service (Python, a thread a connection) that calls the server in
/// the namespace while serving each request: its calls carry nothing (their
/// trace is the request's, which the kernel does not know), counted; the
/// trace goes on by the links that are certain: curl's written context to
/// the front, the front's thread to its call, the call to the server on
/// this host (same-host join). Four spans a request, one trace.
#[test]
fn a_call_made_while_serving_carries_nothing_and_the_trace_goes_on() {
    if !can_trace() || !have("curl") || !have("ip") || !have("/usr/bin/python3") {
        return;
    }
    let (ns, back, dir) = (VethNs::create(), free_port(), TempDir::new("propagation-front"));
    let _srv = echo_server(&ns, back, &dir);
    // the front: tests/fixtures/chain.py, calling the back for /n/PATH
    let front = free_port();
    let _front = Proc::spawn(
        "front",
        Command::new("/usr/bin/python3")
            .arg(fixture("chain.py"))
            .args(["127.0.0.1", &front.to_string(), &format!("{}:{back}", ns.ns_addr)])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(wait_port(front, Duration::from_secs(15)), "the front did not listen");
    let mut launcher = Launcher::new();
    let (rt, prom) = ringtail_with(&[back, front], &launcher, true, KEEP_ALIVE);
    let got = launcher.curl(&[&format!("http://127.0.0.1:{front}/f/[100-119]")]);
    assert_eq!(got, vec![String::new(); 20], "the server read no traceparent from the front's calls");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| s.path.starts_with("/f/") || s.path.starts_with("/n/")).count() >= 80);
    let late = || metric_value(prom, "ringtail_links_refused_total", &[("reason", "send_reported_late")]).unwrap_or(0.0);
    let mut joined = 0;
    for i in 100..120 {
        let (f, b) = (format!("/f/{i}"), format!("/n/f/{i}"));
        let one = |kind: &str, path: &str| {
            let v: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == kind && s.path == path).collect();
            assert_eq!(v.len(), 1, "{kind} {path}:\n{}", rt.stdout());
            v[0].clone()
        };
        let (curl, front_srv, call, back_srv) = (one("CLIENT", &f), one("SERVER", &f), one("CLIENT", &b), one("SERVER", &b));
        assert_eq!(curl.parent, None, "{}", curl.line);
        assert_eq!(
            (front_srv.trace.as_str(), front_srv.parent.as_deref()),
            (curl.trace.as_str(), Some(curl.span.as_str())),
            "{}",
            front_srv.line
        );
        assert_eq!((call.trace.as_str(), call.parent.as_deref()), (curl.trace.as_str(), Some(front_srv.span.as_str())), "{}", call.line);
        if back_srv.parent.as_deref() == Some(call.span.as_str()) {
            assert_eq!(back_srv.trace, curl.trace, "{}", back_srv.line);
            joined += 1;
        }
    }
    // (a send reported after its answer is not joined, and counted)
    assert_eq!(wait_until(WAIT, || Some(joined as f64 + late()).filter(|n| *n >= 20.0)), Some(20.0), "{}", rt.stdout());
    let counted = wait_until(WAIT, || Some(refused(prom, "serving_a_request")).filter(|n| *n >= 20.0));
    assert_eq!(counted, Some(20.0), "every call made while serving was counted");
    assert_eq!(metric_value(prom, "ringtail_propagated_requests_total", &[]), Some(20.0), "curl's 20 requests, no call of the front");
    assert_eq!(metric_value(prom, "ringtail_links_refused_total", &[("reason", "written_while_serving")]), Some(0.0));
    eprintln!("propagation through a front: 20 traces of 4 spans ({joined} backend spans joined on this host)");
}

/// With the syscall backend the setting is refused before anything loads,
/// saying why.
#[test]
fn propagation_with_the_syscall_backend_is_refused_with_a_reason() {
    let dir = TempDir::new("propagation-config");
    let config = dir.join("ringtail.toml");
    std::fs::write(&config, "[probe]\nbackend = \"syscalls\"\npropagate = true\n").expect("write the config");
    let out = Command::new(bin_dir().join("ringtail")).args(["check-config", "--config"]).arg(&config).output().expect("run ringtail");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("probe.propagate") && err.contains("socket backend"), "{err}");
}

/// `mode` of tests/fixtures/prop_wire.py (a server) on `port` of the
/// namespace `ns`.
fn wire_server(ns: &VethNs, mode: &str, port: u16) -> Proc {
    let srv = Proc::spawn(
        mode,
        ns.command("/usr/bin/python3")
            .arg(fixture("prop_wire.py"))
            .args([mode, &port.to_string(), &ns.ns_addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(ns.wait_port(port, Duration::from_secs(15)), "{mode} did not listen");
    srv
}

/// tests/fixtures/prop_wire.py's client `mode` against `port` of `ns`,
/// run by the launcher: its output.
fn wire_client(launcher: &mut Launcher, mode: &str, ns: &VethNs, port: u16, args: &[&str]) -> Vec<String> {
    let wire = fixture("prop_wire.py");
    let port = port.to_string();
    let mut all = vec![wire.to_str().expect("a UTF-8 path"), mode, ns.ns_addr.as_str(), port.as_str()];
    all.extend_from_slice(args);
    launcher.exec("/usr/bin/python3", &all)
}

/// The sockets in ringtail's socket map (`prop_socks`, pinned in its set).
fn socks_in_map(rt: &Ringtail) -> usize {
    let pin = std::fs::read_dir(&rt.pin_dir)
        .expect("the pin directory")
        .flatten()
        .map(|set| set.path().join("map_prop_socks"))
        .find(|p| p.exists())
        .expect("map_prop_socks pinned");
    let out = Command::new("bpftool").args(["-j", "map", "dump", "pinned"]).arg(&pin).output().expect("run bpftool");
    let entries: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bpftool map dump: {e}"));
    entries.as_array().map_or(0, Vec::len)
}

/// A connection whose first send is not an HTTP/1 request head is never
/// written into, whatever its later sends look like, and leaves the socket
/// map within that send: a length-prefixed protocol whose second and third
/// messages are HTTP/1 requests (each length sent in a write of its own),
/// and a real Redis server given a SET whose value, sent in a second write,
/// is one. Both read exactly what was sent; counted, once a connection.
#[test]
fn a_connection_that_does_not_begin_with_an_http_request_is_never_written_into() {
    if !can_trace() || !have("ip") || !have("/usr/bin/python3") || !have("redis-server") || !have("bpftool") {
        return;
    }
    let ns = VethNs::create();
    let (frames, redis) = (free_port(), free_port());
    let _frames = wire_server(&ns, "frames-server", frames);
    let _redis = Proc::spawn(
        "redis-server in a namespace",
        ns.command("redis-server")
            .args(["--port", &redis.to_string(), "--bind", &ns.ns_addr, "--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(ns.wait_port(redis, Duration::from_secs(15)), "redis-server did not listen");
    let mut launcher = Launcher::new();
    let (rt, prom) = ringtail_with(&[], &launcher, true, KEEP_ALIVE);
    for _ in 0..5 {
        assert_eq!(wire_client(&mut launcher, "frames-client", &ns, frames, &[]), ["ok"], "{}", rt.counters());
        assert_eq!(wire_client(&mut launcher, "redis-client", &ns, redis, &[]), ["ok"], "{}", rt.counters());
    }
    let counted = wait_until(WAIT, || Some(refused(prom, "not_http")).filter(|n| *n >= 10.0));
    assert_eq!(counted, Some(10.0), "each connection counted once: {}", rt.counters());
    assert_eq!(metric_value(prom, "ringtail_propagated_requests_total", &[]), Some(0.0));

    // out of the map as soon as its first send showed it is not HTTP: a
    // connection held open after its frames is not in the map
    let out = TempDir::new("propagation-hold");
    let held = out.join("held");
    launcher.run(&format!(
        "/usr/bin/python3 '{}' frames-client {} {frames} 5 > '{}' 2>&1 &",
        fixture("prop_wire.py").display(),
        ns.ns_addr,
        held.display()
    ));
    let said = wait_until(WAIT, || std::fs::read_to_string(&held).ok().filter(|s| s.contains('\n')));
    assert_eq!(said.as_deref(), Some("ok\n"), "the held client");
    assert_eq!(socks_in_map(&rt), 0, "a connection that is not HTTP is not in the socket map");
    eprintln!("propagation: 10 connections that are not HTTP delivered byte-exact, none written into, none left in the map");
}

/// A POST whose server answers 401 before reading the body, the body (which
/// begins like an HTTP/1 request) then sent: the server reads exactly that
/// body; the request after it on the connection begins where the body's
/// Content-Length ends and the 401 was read, a request start verified, so
/// it carries the context of its own client span.
#[test]
fn a_body_sent_after_an_early_answer_is_delivered_as_sent() {
    if !can_trace() || !have("ip") || !have("/usr/bin/python3") {
        return;
    }
    let (ns, port) = (VethNs::create(), free_port());
    let _srv = wire_server(&ns, "http-server", port);
    let mut launcher = Launcher::new();
    let (rt, prom) = ringtail_with(&[], &launcher, true, KEEP_ALIVE);
    let mut written = Vec::new();
    for _ in 0..5 {
        let out = wire_client(&mut launcher, "early-client", &ns, port, &[]);
        assert_eq!(out.len(), 1, "{out:?}");
        let tp = out[0].strip_prefix("ok ").unwrap_or_else(|| panic!("the server read another body: {out:?}\n{}", rt.counters()));
        written.push(tp.to_owned());
    }
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| s.kind == "CLIENT" && s.path == "/sha").count() >= 5);
    for tp in &written {
        assert!(
            spans.iter().any(|s| s.kind == "CLIENT" && s.path == "/sha" && *tp == format!("00-{}-{}-01", s.trace, s.span)),
            "the request after the body carried {tp}, no client span's context:\n{}\n{}",
            rt.stdout(),
            rt.counters()
        );
    }
    assert_eq!(refused(prom, "unclaimed"), 0.0, "{}", rt.counters());
    eprintln!("propagation: 5 bodies sent after an early 401 delivered as sent; the requests after them carried their own context");
}

/// A client on a blocking socket waiting in recv gets what it gets
/// untraced: after shutdown(SHUT_WR), through a signal whose handler asks
/// for the call to be restarted, and while another thread writes a large
/// body (a socket in a socket map waits in the kernel's tcp_bpf_recvmsg,
/// which returns EAGAIN when anything but data wakes it). Such sockets are
/// never put in the map: counted.
#[test]
fn a_client_waiting_in_a_blocking_recv_sees_what_it_sees_untraced() {
    if !can_trace() || !have("ip") || !have("/usr/bin/python3") {
        return;
    }
    let (ns, port) = (VethNs::create(), free_port());
    let _srv = wire_server(&ns, "http-server", port);
    let mut launcher = Launcher::new();
    let modes = ["shutdown", "signal", "duplex"];
    let untraced: Vec<Vec<String>> = modes.iter().map(|m| wire_client(&mut launcher, "blocking-client", &ns, port, &[m])).collect();
    for (m, out) in modes.iter().zip(&untraced) {
        assert!(out.len() == 1 && out[0].starts_with("HTTP/1.1 200"), "untraced {m}: {out:?}");
    }
    let (rt, prom) = ringtail_with(&[], &launcher, true, KEEP_ALIVE);
    for _ in 0..3 {
        for (m, want) in modes.iter().zip(&untraced) {
            assert_eq!(&wire_client(&mut launcher, "blocking-client", &ns, port, &[m]), want, "traced {m}\n{}", rt.counters());
        }
    }
    let counted = wait_until(WAIT, || Some(refused(prom, "blocking_socket")).filter(|n| *n >= 9.0));
    assert_eq!(counted, Some(9.0), "one request a connection: {}", rt.counters());
    eprintln!("propagation: blocking recv after shutdown, through a signal and beside a writer: as untraced, 9 of 9");
}

/// A client that sizes its reads with ioctl(FIONREAD) once poll says its
/// socket is readable (as nginx, Java and .NET do) reads what it reads
/// untraced over a kept-alive connection, with the default
/// `probe.propagate_keep_alive`: where the kernel's FIONREAD says 0 of a
/// socket in a socket map (Linux 6.6.128+, 6.12.75+, 6.18.14+ and 6.19+),
/// a connection leaves the map within its first request's send, so only
/// that request carries a traceparent; the others are counted.
#[test]
fn a_client_sizing_reads_with_fionread_reads_what_it_reads_untraced() {
    if !can_trace() || !have("ip") || !have("/usr/bin/python3") {
        return;
    }
    let (ns, port) = (VethNs::create(), free_port());
    let _srv = wire_server(&ns, "http-server", port);
    let mut launcher = Launcher::new();
    assert_eq!(wire_client(&mut launcher, "fionread-client", &ns, port, &["20"]), ["ok"], "untraced");
    let (rt, prom) = ringtail(&[], &launcher, true);
    for _ in 0..3 {
        assert_eq!(wire_client(&mut launcher, "fionread-client", &ns, port, &["20"]), ["ok"], "traced\n{}", rt.counters());
    }
    let log = rt.log();
    let mode: Vec<&str> = log.lines().filter(|l| l.contains("event=\"propagation_mode\"")).collect();
    assert_eq!(mode.len(), 1, "the loader says which requests it writes:\n{log}");
    let keep_alive = !mode[0].contains("keep_alive=false");
    let want = if keep_alive { 60.0 } else { 3.0 };
    let written = wait_until(WAIT, || metric_value(prom, "ringtail_propagated_requests_total", &[]).filter(|n| *n >= want));
    if !keep_alive {
        assert_eq!(written, Some(3.0), "each connection's first request: {}", rt.counters());
        let later = wait_until(WAIT, || Some(refused(prom, "keep_alive_off")).filter(|n| *n >= 57.0));
        assert_eq!(later, Some(57.0), "the later requests counted: {}", rt.counters());
    } else {
        assert_eq!(written, Some(60.0), "{}", rt.counters());
    }
    eprintln!("propagation: a FIONREAD reader read 60 answers as untraced ({})", mode[0]);
}

/// Clients on epoll and non-blocking sockets, kept alive (in the socket map
/// the whole time, `KEEP_ALIVE`): Python asyncio, Node's `http` and Go's
/// net/http, hundreds of requests each, every answer whole at its first
/// attempt, every request written.
#[test]
fn epoll_clients_get_every_byte_at_their_first_attempt() {
    if !can_trace() || !have("ip") || !have("/usr/bin/python3") || !have("node") {
        return;
    }
    let Some(go_client) = go_binary("client") else { return };
    let (ns, port) = (VethNs::create(), free_port());
    let _srv = wire_server(&ns, "http-server", port);
    let url = format!("http://{}:{port}/big/65536", ns.ns_addr);
    let mut launcher = Launcher::new();
    let (rt, prom) = ringtail_with(&[], &launcher, true, KEEP_ALIVE);
    assert_eq!(wire_client(&mut launcher, "asyncio-client", &ns, port, &["100", "4"]), ["ok 400"], "asyncio\n{}", rt.counters());
    let node = fixture("node/client.js");
    assert_eq!(launcher.exec("node", &[node.to_str().expect("UTF-8"), &url, "400", "8"]), ["ok 400"], "node\n{}", rt.counters());
    let go = launcher.run(&format!("'{}' '{url}' 100 4 2>&1; echo exit $?", go_client.display()));
    assert_eq!(go, ["exit 0"], "go\n{}", rt.counters());
    let written = wait_until(WAIT, || metric_value(prom, "ringtail_propagated_requests_total", &[]).filter(|n| *n >= 1200.0));
    assert_eq!(written, Some(1200.0), "every request written: {}", rt.counters());
    eprintln!("propagation: asyncio, Node and Go clients, 1,200 requests kept alive in the socket map, all whole at the first attempt");
}

/// nginx proxying 2 MiB answers from a server in another namespace over
/// kept-alive upstream connections: every byte delivered, no stall (nginx
/// sizes its reads with FIONREAD). Its upstream connections are made while
/// it serves a request, so they are never put in the socket map.
#[test]
fn nginx_proxying_through_propagation_delivers_every_byte() {
    if !can_trace() || !have("ip") || !have("/usr/bin/python3") || !have("nginx") || !have("curl") {
        return;
    }
    let (ns, back, front) = (VethNs::create(), free_port(), free_port());
    let _srv = wire_server(&ns, "http-server", back);
    let root = TempDir::new("propagation-nginx");
    let _nginx = nginx_with(
        front,
        &root.0,
        1,
        &format!("upstream be {{ server {}:{back}; keepalive 4; }}", ns.ns_addr),
        "location /up/ { proxy_pass http://be/; proxy_http_version 1.1; proxy_set_header Connection \"\"; }",
    );
    let mut launcher = Launcher::new();
    let (rt, prom) = ringtail_with(&[front], &launcher, true, KEEP_ALIVE);
    let url = format!("http://127.0.0.1:{front}/up/big/2097152");
    let got = launcher.curl(&["--max-time", "10", "-o", "/dev/null", "-w", "%{http_code} %{size_download}\\n", &format!("{url}?[1-40]")]);
    assert_eq!(got, vec!["200 2097152".to_owned(); 40], "{}", rt.counters());
    // nginx's upstream requests, on connections made while it served
    let counted = wait_until(WAIT, || Some(refused(prom, "serving_a_request")).filter(|n| *n >= 40.0));
    assert_eq!(counted, Some(40.0), "{}", rt.counters());
    eprintln!("propagation: nginx proxied 40 answers of 2 MiB, whole, through propagation");
}

/// Requests whose body or order the kernel must follow, on connections
/// kept alive (`KEEP_ALIVE`): a Content-Length body sent in writes of its
/// own that look like requests is not written into, and the request after
/// it is; a chunked body, an `Expect: 100-continue`, two requests in one
/// send, a request sent before the previous one's answer was read: the
/// request whose start is verified is written, the connection is then given
/// up, its later requests sent as they are; every body arrives as sent.
#[test]
fn requests_are_written_only_at_the_starts_the_kernel_framed() {
    if !can_trace() || !have("ip") || !have("/usr/bin/python3") {
        return;
    }
    let (ns, port) = (VethNs::create(), free_port());
    let _srv = wire_server(&ns, "http-server", port);
    let mut launcher = Launcher::new();
    let (rt, prom) = ringtail_with(&[], &launcher, true, KEEP_ALIVE);
    let written = |tp: &str| tp.starts_with("00-") && tp.len() == 55;
    for (case, want) in [
        ("content-length", [true, true, false]),
        ("chunked", [true, false, false]),
        ("expect", [true, false, false]),
        ("pipelined", [true, false, false]),
        ("unanswered", [true, false, false]),
    ] {
        let out = wire_client(&mut launcher, "framing-client", &ns, port, &[case]);
        assert_eq!(out.len(), 1, "{case}: {out:?}");
        let seen: Vec<&str> = out[0].strip_prefix("ok ").unwrap_or_else(|| panic!("{case}: {out:?}")).split(' ').collect();
        let got: Vec<bool> = seen.iter().map(|tp| written(tp)).collect();
        assert_eq!(got, want[..seen.len()], "{case}: the requests carried {seen:?}\n{}", rt.counters());
    }
    for (reason, n) in [("body_length_unknown", 2.0), ("pipelined", 2.0), ("connection_given_up", 4.0)] {
        let counted = wait_until(WAIT, || Some(refused(prom, reason)).filter(|c| *c >= n));
        assert_eq!(counted, Some(n), "{reason}: {}", rt.counters());
    }
    assert_eq!(refused(prom, "unclaimed"), 0.0, "{}", rt.counters());
    eprintln!("propagation: bodies followed by their Content-Length, chunked, Expect and pipelined requests given up, every byte as sent");
}

/// A connection kept alive stays in the socket map while its requests can
/// be written (`KEEP_ALIVE`), and leaves it at its FIN: held open after
/// shutdown(SHUT_WR), it is no longer there.
#[test]
fn a_connection_leaves_the_socket_map_at_its_fin() {
    if !can_trace() || !have("ip") || !have("/usr/bin/python3") || !have("bpftool") {
        return;
    }
    let (ns, port) = (VethNs::create(), free_port());
    let _srv = wire_server(&ns, "http-server", port);
    let mut launcher = Launcher::new();
    let (rt, _prom) = ringtail_with(&[], &launcher, true, KEEP_ALIVE);
    let out = TempDir::new("propagation-held");
    for (how, in_map) in [("open", 1), ("shut", 0)] {
        let said = out.join(how);
        launcher.run(&format!(
            "/usr/bin/python3 '{}' held-client {} {port} {how} 4 > '{}' 2>&1 &",
            fixture("prop_wire.py").display(),
            ns.ns_addr,
            said.display()
        ));
        let got = wait_until(WAIT, || std::fs::read_to_string(&said).ok().filter(|s| s.contains('\n')));
        assert_eq!(got.as_deref(), Some("ok 200\n"), "{how}");
        assert_eq!(socks_in_map(&rt), in_map, "a connection held {how}");
        // (gone once the client ends)
        assert_eq!(wait_until(WAIT, || (socks_in_map(&rt) == 0).then_some(())), Some(()), "{how}: the closed connection");
    }
    eprintln!("propagation: a kept-alive connection in the socket map until its FIN");
}

/// The carrier's chain (tests/fixtures/chain.py): C in this namespace, B in
/// `ns` calling C, A on loopback calling B, each its own `service.name`
/// (`a`, `b`, `c`: the service graph's edges name them), listening.
struct Chain {
    ports: (u16, u16, u16),
    b_pid: u32,
    _procs: [Proc; 3],
}

impl Chain {
    fn start(ns: &VethNs) -> Chain {
        let script = fixture("chain.py");
        let (a, b, c) = (free_port(), free_port(), free_port());
        let service = |name: &str, mut cmd: Command, at: &str, port: u16, next: String| {
            cmd.arg(&script).args([at, &port.to_string(), &next]).env("OTEL_SERVICE_NAME", name.to_lowercase());
            Proc::spawn(name, cmd.stdout(Stdio::null()).stderr(Stdio::null()))
        };
        let pc = service("C", Command::new("/usr/bin/python3"), &ns.host_addr, c, "-".into());
        let pb = service("B", ns.command("/usr/bin/python3"), &ns.ns_addr, b, format!("{}:{c}", ns.host_addr));
        let pa = service("A", Command::new("/usr/bin/python3"), "127.0.0.1", a, format!("{}:{b}", ns.ns_addr));
        assert!(wait_port(a, Duration::from_secs(15)) && ns.wait_port(b, Duration::from_secs(15)), "the chain did not listen");
        Chain { ports: (a, b, c), b_pid: pb.pid(), _procs: [pa, pb, pc] }
    }

    /// ringtail with the carrier, the chain's ports and `launcher`'s curl
    /// selected (B by its pid too: the listeners found at start are this
    /// namespace's), Prometheus on `prom`.
    fn ringtail(&self, launcher: &Launcher, prom: u16) -> Ringtail {
        let (a, b, c) = self.ports;
        Ringtail::start(&format!(
            "[probe]\nbackend = \"socket\"\ncarrier = true\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{a}, {b}, {c}]\npids = [{}, {}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
            launcher.sh.pid(),
            self.b_pid
        ))
    }
}

/// `probe.carrier`: the trace context in a TCP header option. curl → A
/// (this namespace) → B (another namespace, behind a veth pair) → C (this
/// namespace, called from B's): every call after curl's is made while
/// serving a request, over a blocking socket, which `probe.propagate`
/// cannot write; the kernel decides each server request's ids and each
/// call's, and the option carries them over loopback and the veth pair.
/// Every request is one trace of 6 spans whose parents are exact (a server
/// span's parent is the id its option carried: the same-host join is not
/// what links them, the kernel's ids are final); a request with its own
/// `traceparent` continues it to the end (read in the kernel).
#[test]
fn the_carrier_takes_a_request_s_trace_through_calls_made_while_serving() {
    if !can_trace() || !have("curl") || !have("ip") || !have("/usr/bin/python3") {
        return;
    }
    let ns = VethNs::create();
    let chain = Chain::start(&ns);
    let (a, b, _) = chain.ports;
    // What reaches B on the wire: its options' bytes (tests/fixtures/tcp_options.py)
    let mut sniffer = Proc::spawn(
        "sniffer",
        ns.command("/usr/bin/python3")
            .arg(fixture("tcp_options.py"))
            .args([&format!("{}n", ns.name), &b.to_string()])
            .stdout(Stdio::piped()),
    );
    let mut wire = std::io::BufReader::new(sniffer.child.stdout.take().expect("the sniffer's stdout"));
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut wire, &mut ready).expect("read the sniffer");
    assert_eq!(ready.trim(), "ready");
    let mut launcher = Launcher::new();
    let prom = free_port();
    let rt = chain.ringtail(&launcher, prom);
    assert_eq!(launcher.curl(&[&format!("http://127.0.0.1:{a}/r/[100-129]")]), vec!["ok".to_owned(); 30]);
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    assert_eq!(launcher.curl(&["-H", &format!("traceparent: {own}"), &format!("http://127.0.0.1:{a}/own")]), ["ok"]);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| s.path.contains("/r/") || s.path.contains("/own")).count() >= 31 * 6);
    let one = |kind: &str, path: &str| {
        let v: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == kind && s.path == path).collect();
        assert_eq!(v.len(), 1, "{kind} {path}:\n{}", rt.stdout());
        v[0].clone()
    };
    let chain = |p: &str| {
        let (n, nn) = (format!("/n{p}"), format!("/n/n{p}"));
        [one("CLIENT", p), one("SERVER", p), one("CLIENT", &n), one("SERVER", &n), one("CLIENT", &nn), one("SERVER", &nn)]
    };
    for i in 100..130 {
        let s = chain(&format!("/r/{i}"));
        assert_eq!(s[0].parent, None, "{}", s[0].line);
        for k in 1..6 {
            assert_eq!(
                (s[k].trace.as_str(), s[k].parent.as_deref()),
                (s[0].trace.as_str(), Some(s[k - 1].span.as_str())),
                "span {k} of /r/{i}: {}\n{}",
                s[k].line,
                rt.stdout()
            );
        }
    }
    // the traceparent curl sent, read in the kernel, goes on to C
    let s = chain("/own");
    assert_eq!(
        (s[1].trace.as_str(), s[1].parent.as_deref()),
        ("0af7651916cd43dd8448eb211c80319c", Some("b7ad6b7169203331")),
        "{}",
        s[1].line
    );
    for k in 2..6 {
        assert_eq!((s[k].trace.as_str(), s[k].parent.as_deref()), (s[1].trace.as_str(), Some(s[k - 1].span.as_str())), "{}", s[k].line);
    }
    // On the wire into B: kind 25, length 26, the trace id and the span id
    // of the call (B's server span's trace and parent), W3C byte order
    sniffer.signal(libc::SIGKILL);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut wire, &mut text).expect("read the sniffer");
    let options: std::collections::HashSet<(String, String)> = text
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!((w.len(), w[0]), (4, "26"), "an option of another length: {l}");
            (w[2].to_owned(), w[3].to_owned())
        })
        .collect();
    for p in (100..130).map(|i| format!("/r/{i}")).chain(["/own".to_owned()]) {
        let b_srv = chain(&p)[3].clone();
        assert!(
            options.contains(&(b_srv.trace.clone(), b_srv.parent.clone().unwrap_or_default())),
            "{p}: no option carried {}\n{text}",
            b_srv.line
        );
    }
    // Counted: curl's 31 requests to A (carried as new traces), A's and B's
    // 62 calls; each matched at its server. A request whose option a
    // header overrides (/own) still matched by sequence number.
    let count = |name: &str| metric_value(prom, name, &[]).unwrap_or(0.0);
    assert_eq!(wait_until(WAIT, || Some(count("ringtail_carrier_matched_total")).filter(|n| *n >= 93.0)), Some(93.0), "{}", rt.stdout());
    assert_eq!(count("ringtail_carrier_written_total"), 93.0);
    assert_eq!(count("ringtail_carrier_ids_unclaimed_total"), 0.0, "every id carried went to its client span");
    let late = metric_value(prom, "ringtail_links_refused_total", &[("reason", "send_reported_late")]).unwrap_or(0.0);
    assert_eq!(late, 0.0, "a carried call's same-host join offer is spent, not counted late");
    for reason in ["mid_segment", "concurrent_requests", "parent_undecided", "option_not_written", "no_option_space"] {
        let n = metric_value(prom, "ringtail_carrier_not_carried_total", &[("reason", reason)]).unwrap_or(0.0);
        assert_eq!(n, 0.0, "{reason}");
    }
    // The service graph: each carried call an edge (its two ends' ids the
    // kernel's, not joined), once: curl → a → b → c; but curl's call with
    // a traceparent of its own, whose server span is that header's child.
    let edge = |client: &str, server: &str| {
        metric_value(prom, "traces_service_graph_request_total", &[("client", client), ("server", server)]).unwrap_or(0.0)
    };
    let all = wait_until(WAIT, || (edge("curl", "a") + edge("a", "b") + edge("b", "c") >= 92.0).then_some(()));
    assert!(all.is_some(), "the carried calls' edges: {}", scrape(prom));
    std::thread::sleep(SETTLE);
    let text = scrape(prom);
    let mut edges: Vec<&str> = text.lines().filter(|l| l.starts_with("traces_service_graph_request_total{")).collect();
    edges.sort_unstable();
    assert_eq!(
        edges,
        [("a", "b", 31), ("b", "c", 31), ("curl", "a", 30)]
            .map(|(c, s, n)| format!("traces_service_graph_request_total{{client=\"{c}\",server=\"{s}\",connection_type=\"\"}} {n}")),
        "{text}"
    );
    eprintln!("carrier: 31 traces of 6 spans through two calls made while serving, across a veth pair; 93 options written and matched; edges curl → a 30, a → b 31, b → c 31");
}

/// `probe.carrier` where segments are lost: in B's namespace every third
/// segment into B and every third out of it to C is dropped (netfilter, on
/// the way in before TCP reads the option, on the way out before the
/// wire), so requests and their options are retransmitted. A retransmitted
/// segment that begins a request carries its option again
/// (`ringtail_carrier_rewritten_total`), and every trace is still exact:
/// curl → A → B → C, 10 requests, 6 spans each, every parent the span
/// before it.
#[test]
fn the_carrier_s_option_survives_lost_segments() {
    if !can_trace() || !have("curl") || !have("ip") || !have("iptables") || !have("/usr/bin/python3") {
        return;
    }
    let ns = VethNs::create();
    let chain = Chain::start(&ns);
    let (a, b, c) = chain.ports;
    // (the rules go with the namespace)
    for rule in [["INPUT", "--dport", &b.to_string()], ["OUTPUT", "--dport", &c.to_string()]] {
        let mut cmd = ns.command("iptables");
        cmd.args([
            "-A",
            rule[0],
            "-p",
            "tcp",
            rule[1],
            rule[2],
            "-m",
            "statistic",
            "--mode",
            "nth",
            "--every",
            "3",
            "--packet",
            "0",
            "-j",
            "DROP",
        ]);
        let out = cmd.output().expect("run iptables");
        assert!(out.status.success(), "iptables {rule:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut launcher = Launcher::new();
    let prom = free_port();
    let rt = chain.ringtail(&launcher, prom);
    assert_eq!(launcher.curl(&[&format!("http://127.0.0.1:{a}/lossy/[1-10]")]), vec!["ok".to_owned(); 10]);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| s.path.contains("/lossy/")).count() >= 10 * 6);
    let one = |kind: &str, path: &str| {
        let v: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == kind && s.path == path).collect();
        assert_eq!(v.len(), 1, "{kind} {path}:\n{}", rt.stdout());
        v[0].clone()
    };
    for i in 1..=10 {
        let (p, n, nn) = (format!("/lossy/{i}"), format!("/n/lossy/{i}"), format!("/n/n/lossy/{i}"));
        let s = [one("CLIENT", &p), one("SERVER", &p), one("CLIENT", &n), one("SERVER", &n), one("CLIENT", &nn), one("SERVER", &nn)];
        for k in 1..6 {
            let got = (s[k].trace.as_str(), s[k].parent.as_deref());
            assert_eq!(got, (s[0].trace.as_str(), Some(s[k - 1].span.as_str())), "span {k} of {p}: {}\n{}", s[k].line, rt.stdout());
        }
    }
    let count = |name: &str| metric_value(prom, name, &[]).unwrap_or(0.0);
    assert_eq!(wait_until(WAIT, || Some(count("ringtail_carrier_matched_total")).filter(|n| *n >= 30.0)), Some(30.0), "{}", rt.counters());
    assert!(count("ringtail_carrier_rewritten_total") >= 1.0, "no option written again:\n{}", rt.counters());
    eprintln!(
        "carrier: 10 traces of 6 spans exact with a third of B's segments lost; options written again: {}",
        count("ringtail_carrier_rewritten_total")
    );
}

/// `probe.carrier` against a hostile peer: a client in another namespace
/// that writes TCP by hand (tests/fixtures/tcp_hostile_options.py, over a
/// raw socket; its kernel's resets dropped) and puts what options it likes
/// on its segments. A well-formed option is honoured, as a `traceparent`
/// is (a client may claim any trace); an all-zero trace id, a short
/// option, or option bytes that run past the header are not (counted
/// `ringtail_carrier_invalid_total` where TCP hands them over at all), and
/// that request starts a trace of its own; an option on every segment
/// (the SYN, pure ACKs, a second one after the request) gives the request
/// the one its first byte's segment carried, and the socket keeps no more
/// than its few slots. Every request is answered as it would be untraced.
#[test]
fn the_carrier_honours_well_formed_options_only() {
    if !can_trace() || !have("ip") || !have("iptables") || !have("/usr/bin/python3") {
        return;
    }
    let ns = VethNs::create();
    let port = free_port();
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(fixture("chain.py")).args([&ns.host_addr, &port.to_string(), "-"]);
    let _server = Proc::spawn("server", cmd.stdout(Stdio::null()).stderr(Stdio::null()));
    assert!(wait_until(Duration::from_secs(15), || std::net::TcpStream::connect((ns.host_addr.as_str(), port)).ok()).is_some());
    // (no socket of the namespace's kernel has these connections)
    let out =
        ns.command("iptables").args(["-A", "OUTPUT", "-p", "tcp", "--tcp-flags", "RST", "RST", "-j", "DROP"]).output().expect("iptables");
    assert!(out.status.success(), "iptables: {}", String::from_utf8_lossy(&out.stderr));
    let prom = free_port();
    let rt = Ringtail::start(&format!(
        "[probe]\nbackend = \"socket\"\ncarrier = true\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{port}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"
    ));
    let cases = ["valid", "zero", "short", "every", "garbage"];
    for case in cases {
        let out = ns
            .command("/usr/bin/python3")
            .arg(fixture("tcp_hostile_options.py"))
            .args([&ns.ns_addr, &ns.host_addr, &port.to_string(), case, &format!("/hostile/{case}")])
            .output()
            .expect("run the hostile client");
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(said.trim(), "status 200", "{case}: {said}{}", String::from_utf8_lossy(&out.stderr));
    }
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| s.path.starts_with("/hostile/")).count() >= cases.len());
    let server = |case: &str| {
        let v: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == "SERVER" && s.path == format!("/hostile/{case}")).collect();
        assert_eq!(v.len(), 1, "{case}:\n{}", rt.stdout());
        v[0].clone()
    };
    let (trace, span) = (format!("0a{}01", "11".repeat(14)), format!("0b{}02", "22".repeat(6)));
    for case in ["valid", "every"] {
        let s = server(case);
        assert_eq!((s.trace.as_str(), s.parent.as_deref()), (trace.as_str(), Some(span.as_str())), "{case}: {}", s.line);
    }
    for case in ["zero", "short", "garbage"] {
        let s = server(case);
        assert_eq!(s.parent, None, "{case}: a request with a bad option is a trace of its own: {}", s.line);
        assert!(s.trace != trace && !s.trace.trim_matches('0').is_empty(), "{case}: {}", s.line);
    }
    let count = |name: &str| metric_value(prom, name, &[]).unwrap_or(0.0);
    let invalid = wait_until(WAIT, || Some(count("ringtail_carrier_invalid_total")).filter(|n| *n >= 2.0));
    assert!(invalid.is_some(), "the zero and the short option counted invalid:\n{}", rt.counters());
    assert_eq!(count("ringtail_carrier_matched_total"), 2.0, "valid and every:\n{}", rt.counters());
    eprintln!("carrier: hostile options: 2 honoured, {} counted invalid, 5 of 5 answered", count("ringtail_carrier_invalid_total"));
}

/// `probe.carrier` with no room for its option: a client and a server on
/// TCP MD5 signatures (RFC 2385: 18 bytes on every segment, with timestamps
/// 32 of TCP's 40, less than the option's 28 left), both traced. No
/// option is written and no segment outgrows its room (every request is
/// answered), the segments that had no room are counted `no_option_space`
/// (each request's: 2 each here, its sizing and its transmit), and the
/// trace goes on by the same-host join, as without the carrier.
#[test]
fn the_carrier_counts_calls_that_leave_no_room_for_its_option() {
    if !can_trace() || !have("/usr/bin/python3") {
        return;
    }
    let port = free_port();
    let script = fixture("tcp_md5_http.py");
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(&script).args(["server", &port.to_string()]);
    let mut server = Proc::spawn("md5 server", cmd.stdout(Stdio::piped()).stderr(Stdio::null()));
    // (it answers signed connects only: it says when it listens)
    let mut ready = String::new();
    let mut out = std::io::BufReader::new(server.child.stdout.take().expect("the server's stdout"));
    std::io::BufRead::read_line(&mut out, &mut ready).expect("read the server");
    assert_eq!(ready.trim(), "ready", "the server did not listen");
    let mut launcher = Launcher::new();
    let prom = free_port();
    let rt = Ringtail::start(&format!(
        "[probe]\nbackend = \"socket\"\ncarrier = true\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{port}]\npids = [{}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        launcher.sh.pid()
    ));
    let said = launcher.exec("/usr/bin/python3", &[script.to_str().expect("utf-8"), "client", &port.to_string(), "10", "/md5"]);
    assert_eq!(said, [["200"; 10].join(" ")], "every request answered");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| s.path.starts_with("/md5/")).count() >= 20);
    for i in 0..10 {
        let p = format!("/md5/{i}");
        let one = |kind: &str| {
            let v: Vec<&SpanLine> = spans.iter().filter(|s| s.kind == kind && s.path == p).collect();
            assert_eq!(v.len(), 1, "{kind} {p}:\n{}", rt.stdout());
            v[0].clone()
        };
        let (client, server) = (one("CLIENT"), one("SERVER"));
        assert_eq!(
            (server.trace.as_str(), server.parent.as_deref()),
            (client.trace.as_str(), Some(client.span.as_str())),
            "{p}: {}",
            server.line
        );
    }
    let count = |name: &str, labels: &[(&str, &str)]| metric_value(prom, name, labels).unwrap_or(0.0);
    let no_room =
        wait_until(WAIT, || Some(count("ringtail_carrier_not_carried_total", &[("reason", "no_option_space")])).filter(|n| *n >= 10.0));
    assert!(no_room.is_some(), "each request counted:\n{}", rt.counters());
    assert_eq!(count("ringtail_carrier_written_total", &[]), 0.0, "{}", rt.counters());
    assert_eq!(count("ringtail_carrier_matched_total", &[]), 0.0, "{}", rt.counters());
    eprintln!("carrier: 10 requests over TCP MD5, no room: counted {:?}, joined on this host", no_room);
}
