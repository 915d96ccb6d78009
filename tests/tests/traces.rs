//! How spans connect into traces, with no change to any application:
//! a client and the server it calls on the same host are one trace (the
//! same TCP connection seen from both ends), and a client call is the
//! child of the server request its thread serves only when that is certain
//! (never a wrong parent; what is not linked is counted).
//!
//! Every test runs once per capture backend (`socket::…`, `syscalls::…`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(60);

/// A ringtail on capture backend `b` that prints spans, serves Prometheus
/// and selects `ports` and the executables `exes`.
fn ringtail_for(b: &str, ports: &[u16], exes: &[&str]) -> (Ringtail, u16) {
    ringtail_probe(&format!("backend = \"{b}\""), ports, exes)
}

/// [`ringtail_for`] with these `[probe]` lines (the backend's among them).
fn ringtail_probe(probe: &str, ports: &[u16], exes: &[&str]) -> (Ringtail, u16) {
    let prom = free_port();
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let exes: Vec<String> = exes.iter().map(|e| format!("\"{e}\"")).collect();
    let rt = Ringtail::start(&format!(
        "[probe]\n{probe}\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{}]\nexe_names = [{}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        ports.join(","),
        exes.join(",")
    ));
    (rt, prom)
}

/// The spans of each trace.
fn traces(spans: &[SpanLine]) -> BTreeMap<String, Vec<SpanLine>> {
    let mut m: BTreeMap<String, Vec<SpanLine>> = BTreeMap::new();
    for s in spans {
        m.entry(s.trace.clone()).or_default().push(s.clone());
    }
    m
}

/// `curl` → Python's http.server on this host, 200 requests: 200 traces of
/// exactly two spans, the server span the client span's child.
fn curl_and_the_server_it_calls_are_one_trace(b: &str) {
    if !can_trace() || !have("curl") {
        return;
    }
    let dir = TempDir::new("traces-curl");
    let port = free_port();
    let _srv = python_http_server(port, &dir.0);
    let (rt, prom) = ringtail_for(b, &[port], &["^curl$"]);
    curl_and_its_server(&rt, prom, "http", "127.0.0.1", port);
}

/// The same over HTTPS: curl and a Python server in `ssl`, both OpenSSL,
/// on the sockets' reads and writes (no request reported late: the client's
/// offer is made before its bytes leave).
fn curl_and_the_https_server_it_calls_are_one_trace(b: &str) {
    if !can_trace() || !have("curl") || !have("openssl") {
        return;
    }
    let port = free_port();
    let (_dir, _srv) = python_tls("python tls server", PY_TLS_SERVER, port, &[]);
    let (rt, prom) = ringtail_for(b, &[port], &["^curl$"]);
    curl_and_its_server(&rt, prom, "https", "127.0.0.1", port);
}

/// The same with the server at another address of this host: in a network
/// namespace across a veth pair, as a container on a bridge is (the host's
/// own non-loopback addresses are named the same way).
fn curl_and_an_https_server_behind_a_veth_pair_are_one_trace(b: &str) {
    if !can_trace() || !have("curl") || !have("openssl") || !have("ip") {
        return;
    }
    let ns = VethNs::create();
    let port = free_port();
    let (rt, prom) = ringtail_for(b, &[port], &["^curl$"]);
    // (started after ringtail: the kernel selects it as it listens; the
    // loader's scan at start sees its own namespace's listeners only)
    let dir = TempDir::new("traces-veth");
    let (cert, key) = certificate(&dir.0);
    let script = dir.join("server.py");
    std::fs::write(&script, PY_TLS_SERVER).expect("write server.py");
    let _srv = Proc::spawn(
        "python tls server in a namespace",
        ns.command("python3").arg(&script).args([&port.to_string(), &cert, &key, &ns.ns_addr]).stdout(Stdio::null()).stderr(Stdio::null()),
    );
    assert!(ns.wait_port(port, Duration::from_secs(15)), "the server did not listen");
    curl_and_its_server(&rt, prom, "https", &ns.ns_addr, port);
}

/// curl, 200 requests on one connection to the server at `addr`:`port` by
/// `scheme`; checks the traces they make.
fn curl_and_its_server(rt: &Ringtail, prom: u16, scheme: &str, addr: &str, port: u16) {
    let st =
        Command::new("curl").args(["-sk", &format!("{scheme}://{addr}:{port}/t/[0-199]")]).stdout(Stdio::null()).status().expect("curl");
    assert!(st.success());
    let ours = |s: &SpanLine| s.path.starts_with("/t/");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| ours(s)).count() >= 400);
    let spans: Vec<SpanLine> = spans.into_iter().filter(|s| ours(s)).collect();
    assert_eq!(spans.len(), 400, "200 client and 200 server spans:\n{}", rt.stdout());
    // Each request is one trace of two spans, the server span the client
    // span's child; or, when curl's send was reported after the server
    // had answered (its thread preempted in between), two traces of one,
    // counted. Nothing else.
    let late = || metric_value(prom, "ringtail_links_refused_total", &[("reason", "send_reported_late")]).unwrap_or(0.0);
    let mut paths = BTreeSet::new();
    let (mut joined, mut alone) = (0u32, 0u32);
    for (trace, t) in &traces(&spans) {
        let client = t.iter().find(|s| s.kind == "CLIENT");
        let server = t.iter().find(|s| s.kind == "SERVER");
        match (client, server, t.len()) {
            (Some(client), Some(server), 2) => {
                assert_eq!(client.path, server.path);
                assert_eq!(client.parent, None, "{}", client.line);
                assert_eq!(server.parent.as_deref(), Some(client.span.as_str()), "{}", server.line);
                assert_eq!(client.service, "curl");
                paths.insert(client.path.clone());
                joined += 1;
            }
            (_, _, 1) => {
                assert_eq!(t[0].parent, None, "{}", t[0].line);
                alone += 1;
            }
            _ => panic!("trace {trace}: {t:?}"),
        }
    }
    assert_eq!(joined + alone / 2, 200, "{}", rt.stdout());
    if scheme == "https" {
        assert_eq!(alone, 0, "{}", rt.stdout());
    }
    assert_eq!(paths.len(), joined as usize);
    // (the loader's counters reach the endpoint with its next report)
    let joins = wait_until(WAIT, || metric_value(prom, "ringtail_same_host_joins_total", &[]).filter(|n| *n >= f64::from(joined)));
    assert_eq!(joins, Some(f64::from(joined)), "every join was made in the kernel");
    let counted = wait_until(WAIT, || Some(late()).filter(|n| *n >= f64::from(alone / 2)));
    assert_eq!(counted, Some(f64::from(alone / 2)), "every request not joined is counted");
    assert_eq!(metric_value(prom, "ringtail_parent_wait_timeouts_total", &[]), Some(0.0));
    eprintln!("curl → python at {addr}, {scheme}, 200 requests: {joined} joined, {} not (send reported late)", alone / 2);
}

/// An HTTP/2 client (Go, prior knowledge) and the server it calls on this
/// host, 50 streams on one connection: 50 traces of exactly two spans, each
/// server stream the child of the client's stream of the same id.
fn an_http2_client_and_its_server_on_this_host_are_one_trace(b: &str) {
    if !can_trace() {
        return;
    }
    let (Some(bin), Some(client)) = (go_binary("h2server"), go_binary("h2client")) else {
        skip("no Go toolchain");
        return;
    };
    let port = free_port();
    let _srv = server("go h2 server", port, &bin, &[&port.to_string()]);
    let (rt, prom) = ringtail_for(b, &[port], &["^h2client$"]);
    let paths: Vec<String> = (0..50).map(|i| format!("/h/{i}")).collect();
    let out = Command::new(&client).arg(format!("http://127.0.0.1:{port}")).args(&paths).output().expect("h2client");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    streams_joined(rt.stdout(), &traces(&spans_under(&rt, "/h/", 100)), 50);
    one_connection_joined(prom);
}

/// curl upgrading to HTTP/2 (`Upgrade: h2c`) → hypercorn on this host, 20
/// requests on one connection (the first is the upgrade, stream 1): 20
/// traces of exactly two spans, each server stream the child of curl's
/// stream of the same id. The connection is named by its upgrade request
/// (an HTTP/1 join): if curl's send of it was reported late, no stream is
/// joined, and that one late send is counted.
fn curl_upgrading_to_h2c_and_its_server_are_one_trace(b: &str) {
    if !can_trace() || !have("curl") {
        return;
    }
    let Some(python) = venv_python("hypercorn") else { return };
    let port = free_port();
    let script = fixture("h2c_server.py");
    let _srv = server("hypercorn", port, &python, &[script.to_str().expect("a UTF-8 path"), &port.to_string()]);
    let (rt, prom) = ringtail_for(b, &[port], &["^curl$"]);
    curl_http2(&format!("http://127.0.0.1:{port}/u/[0-19]"), 20);
    let spans = spans_under(&rt, "/u/", 40);
    let by_trace = traces(&spans);
    let late = wait_until(Duration::from_secs(5), || {
        metric_value(prom, "ringtail_links_refused_total", &[("reason", "send_reported_late")]).filter(|n| *n > 0.0)
    });
    if by_trace.len() == 40 {
        assert_eq!(late, Some(1.0), "not joined, and not counted as late:\n{}", rt.stdout());
        assert!(spans.iter().all(|s| s.parent.is_none()), "{}", rt.stdout());
        eprintln!("h2c: the upgrade request's send was reported late: no stream joined (counted)");
        return;
    }
    streams_joined(rt.stdout(), &by_trace, 20);
    assert_eq!(late, None, "nothing late");
}

/// curl over HTTP/2 and TLS (ALPN) → a Python HTTP/2 server in `ssl` on
/// this host, 50 streams on one connection: 50 traces of exactly two spans,
/// each server stream the child of curl's stream of the same id.
fn curl_http2_over_tls_and_its_server_are_one_trace(b: &str) {
    if !can_trace() || !have("curl") || !have("openssl") {
        return;
    }
    let Some(python) = venv_python("h2") else { return };
    let dir = TempDir::new("traces-h2-tls");
    let (cert, key) = certificate(&dir.0);
    let port = free_port();
    let script = fixture("h2_tls_server.py");
    let _srv = server("python h2 tls server", port, &python, &[script.to_str().expect("a UTF-8 path"), &port.to_string(), &cert, &key]);
    let (rt, prom) = ringtail_for(b, &[port], &["^curl$"]);
    curl_http2_over_tls(&rt, prom, "127.0.0.1", port);
}

/// The same with the server in a network namespace across a veth pair.
fn curl_http2_over_tls_and_a_server_behind_a_veth_pair_are_one_trace(b: &str) {
    if !can_trace() || !have("curl") || !have("openssl") || !have("ip") {
        return;
    }
    let Some(python) = venv_python("h2") else { return };
    let ns = VethNs::create();
    let port = free_port();
    let (rt, prom) = ringtail_for(b, &[port], &["^curl$"]);
    let dir = TempDir::new("traces-veth-h2");
    let (cert, key) = certificate(&dir.0);
    let script = fixture("h2_tls_server.py");
    let python = python.to_str().expect("a UTF-8 path");
    let _srv = Proc::spawn(
        "python h2 tls server in a namespace",
        ns.command(python).arg(&script).args([&port.to_string(), &cert, &key, &ns.ns_addr]).stdout(Stdio::null()).stderr(Stdio::null()),
    );
    assert!(ns.wait_port(port, Duration::from_secs(15)), "the server did not listen");
    curl_http2_over_tls(&rt, prom, &ns.ns_addr, port);
}

/// curl over HTTP/2 and TLS, 50 streams on one connection to the server at
/// `addr`:`port`: checks the traces they make.
fn curl_http2_over_tls(rt: &Ringtail, prom: u16, addr: &str, port: u16) {
    curl_http2(&format!("https://{addr}:{port}/h/[0-49]"), 50);
    streams_joined(rt.stdout(), &traces(&spans_under(rt, "/h/", 100)), 50);
    one_connection_joined(prom);
}

/// The kernel joined one connection (the loader's counters reach the
/// endpoint with its next report).
fn one_connection_joined(prom: u16) {
    let joins = wait_until(WAIT, || metric_value(prom, "ringtail_same_host_joins_total", &[]).filter(|n| *n >= 1.0));
    assert_eq!(joins, Some(1.0), "one connection joined");
}

/// `n` traces, each one HTTP/2 stream seen from both ends: exactly a
/// client and a server span of the same path, the server's the client's
/// child. `out`: ringtail's output, for the messages.
fn streams_joined(out: String, by_trace: &BTreeMap<String, Vec<SpanLine>>, n: usize) {
    assert_eq!(by_trace.len(), n, "one trace per stream:\n{out}");
    for t in by_trace.values() {
        let client = t.iter().find(|s| s.kind == "CLIENT").unwrap_or_else(|| panic!("no client span: {t:?}"));
        let server = t.iter().find(|s| s.kind == "SERVER").unwrap_or_else(|| panic!("no server span: {t:?}"));
        assert_eq!((t.len(), client.path.as_str()), (2, server.path.as_str()), "{t:?}");
        assert_eq!(server.parent.as_deref(), Some(client.span.as_str()), "{}", server.line);
    }
}

/// curl over HTTP/2 (any certificate) fetching `url`, a glob of `n` URLs
/// (`/p/[0-9]`) it asks on one connection: each went over HTTP/2.
fn curl_http2(url: &str, n: usize) {
    let out = Command::new("curl").args(["-sk", "--http2", "-o", "/dev/null", "-w", "%{http_version}\\n", url]).output().expect("curl");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().filter(|l| *l == "2").count(), n, "HTTP/2 all along");
}

/// The spans whose path begins with `prefix`, once there are `n` of them
/// (and no more).
fn spans_under(rt: &Ringtail, prefix: &str, n: usize) -> Vec<SpanLine> {
    let ours = |s: &SpanLine| s.path.starts_with(prefix);
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| ours(s)).count() >= n);
    let spans: Vec<SpanLine> = spans.into_iter().filter(|s| ours(s)).collect();
    assert_eq!(spans.len(), n, "{}", rt.stdout());
    spans
}

/// A front service that calls a backend while serving each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Front {
    /// nginx, one worker (an event loop), `proxy_pass` with keep-alive upstreams.
    Nginx,
    /// Node's `http` calling `http.get` (an event loop).
    Node,
    /// Python asyncio (an event loop).
    Asyncio,
    /// Go's `net/http` handlers calling `http.Get` (goroutines on threads).
    Go,
    /// The JDK's HTTP server on a pool of 8 threads, `HttpURLConnection`.
    Java,
}

/// `front` on `port` calling the backend on `back` for every `/f/ID`
/// (`/b/ID`); `None` when its runtime is not installed.
fn start_front(front: Front, port: u16, back: u16, dir: &TempDir) -> Option<Proc> {
    Some(match front {
        Front::Nginx => {
            if !have("nginx") {
                return None;
            }
            nginx_with(
                port,
                &dir.0,
                1,
                &format!("upstream back {{ server 127.0.0.1:{back}; keepalive 8; }}"),
                "location /f/ { proxy_pass http://back/b/; proxy_http_version 1.1; proxy_set_header Connection \"\"; }",
            )
        }
        Front::Node => {
            if !have("node") {
                return None;
            }
            server("node front", port, Path::new("node"), &[fixture("node/server.js").to_str()?, &port.to_string()])
        }
        Front::Asyncio => {
            server("asyncio front", port, Path::new("python3"), &[fixture("py_asyncio_front.py").to_str()?, &port.to_string()])
        }
        Front::Go => {
            let bin = go_binary("server")?;
            server("go front", port, &bin, &[&port.to_string()])
        }
        Front::Java => {
            if !have("java") {
                return None;
            }
            server("java front", port, Path::new("java"), &[fixture("java/Front.java").to_str()?, &port.to_string()])
        }
    })
}

/// What 400 requests through a front left: the ringtail that traced them,
/// its Prometheus port, and by request number the front's SERVER spans, its
/// calls' CLIENT spans and the backend's SERVER spans (each there once).
struct ThroughFront {
    _rt: Ringtail,
    prom: u16,
    fronts: BTreeMap<usize, SpanLine>,
    calls: BTreeMap<usize, SpanLine>,
    backs: BTreeMap<usize, SpanLine>,
    _keep: (Proc, Proc, TempDir),
}

/// 400 requests with unique paths (`/f/<i>`, with `header(i)` if any) from
/// 8 concurrent clients to `front` calling a Python backend for each, traced
/// by a ringtail with `probe` (its `[probe]` lines: the capture backend's);
/// None (skipped) when the front is not installed.
fn through_front(probe: &str, front: Front, header: impl Fn(usize) -> Option<(&'static str, String)> + Sync) -> Option<ThroughFront> {
    let dir = TempDir::new("traces-front");
    let (port, back) = (free_port(), free_port());
    std::fs::create_dir_all(dir.join("www/b")).unwrap();
    for i in 0..400 {
        std::fs::write(dir.join(&format!("www/b/{i}")), format!("{i}\n")).unwrap();
    }
    let backend = python_http_server(back, &dir.join("www"));
    let (rt, prom) = ringtail_probe(probe, &[port, back], &[]);
    let Some(front_proc) = start_front(front, port, back, &dir) else {
        skip(&format!("{front:?} is not installed"));
        return None;
    };
    let header = &header;
    std::thread::scope(|s| {
        for t in 0..8 {
            s.spawn(move || {
                for i in (t..400).step_by(8) {
                    let h = header(i);
                    let extra: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let r = http_get(port, &format!("/f/{i}?port={back}"), &extra).expect("request to the front");
                    assert_eq!(r.status, 200, "{}", r.head);
                }
            });
        }
    });
    let ours = |s: &SpanLine| s.path.starts_with("/f/") || s.path.starts_with("/b/");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| ours(s)).count() >= 1200);
    let of = |kind: &str, prefix: &str| -> BTreeMap<usize, SpanLine> {
        let mut m = BTreeMap::new();
        for s in spans.iter().filter(|s| s.kind == kind && s.path.starts_with(prefix)) {
            let id = s.path[prefix.len()..].parse().expect("a request number");
            assert!(m.insert(id, s.clone()).is_none(), "two {kind} spans for {}", s.path);
        }
        m
    };
    let (fronts, calls, backs) = (of("SERVER", "/f/"), of("CLIENT", "/b/"), of("SERVER", "/b/"));
    let missing = |m: &BTreeMap<usize, SpanLine>| (0..400).filter(|i| !m.contains_key(i)).collect::<Vec<_>>();
    assert_eq!(
        (fronts.len(), calls.len(), backs.len()),
        (400, 400, 400),
        "missing: fronts {:?}, calls {:?}, backends {:?}\nringtail's counters:\n{}\nthe log's end:\n{}",
        missing(&fronts),
        missing(&calls),
        missing(&backs),
        rt.counters(),
        last_lines(&rt.log(), 40)
    );
    Some(ThroughFront { _rt: rt, prom, fronts, calls, backs, _keep: (front_proc, backend, dir) })
}

/// A front service (`front`) calling a Python backend under 8 concurrent
/// clients, 400 requests with unique paths: no call is ever the child of
/// another request's span; those the kernel refused to link are counted;
/// every backend span is the child of its call (same host) and so, where
/// the call was linked, in the front request's trace.
fn front_calls_are_never_linked_to_the_wrong_request(b: &str, front: Front) {
    front_calls_through(&format!("backend = \"{b}\""), front);
}

/// [`front_calls_are_never_linked_to_the_wrong_request`] with `[probe]`
/// lines `probe`; what the calls' and backends' links were: (linked,
/// unlinked, backend spans not joined).
fn front_calls_through(probe: &str, front: Front) -> Option<(u32, u32, u32, u16, ThroughFront)> {
    if !can_trace() {
        return None;
    }
    let t = through_front(probe, front, |_| None)?;
    let (prom, fronts, calls, backs) = (t.prom, &t.fronts, &t.calls, &t.backs);
    let (mut linked, mut unlinked, mut late_calls) = (0, 0, 0);
    let mut not_joined = Vec::new();
    for (id, call) in calls {
        match &call.parent {
            Some(p) => {
                let front = &fronts[id];
                assert_eq!(p, &front.span, "the call for {id} is the child of another request: {}", call.line);
                assert_eq!(call.trace, front.trace);
                linked += 1;
            }
            None => unlinked += 1,
        }
        let back = &backs[id];
        if back.parent.is_none() && back.trace != call.trace {
            late_calls += 1; // its send reported after the backend answered: counted below
            not_joined.push(format!("{}\n  its call: {}", back.line, call.line));
            continue;
        }
        assert_eq!(back.parent.as_deref(), Some(call.span.as_str()), "the backend span is the call's child: {}", back.line);
        assert_eq!(back.trace, call.trace);
    }
    let late = wait_until(WAIT, || {
        metric_value(prom, "ringtail_links_refused_total", &[("reason", "send_reported_late")]).filter(|n| *n >= f64::from(late_calls))
    });
    // (what else could explain a miss, if one is not counted)
    let why = || {
        let text = scrape(prom);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| {
                !l.starts_with('#')
                    && [
                        "ringtail_links_refused",
                        "ringtail_parent_wait",
                        "ringtail_answered_before",
                        "ringtail_same_host_joins",
                        "ringtail_dropped",
                    ]
                    .iter()
                    .any(|m| l.starts_with(m))
            })
            .collect();
        format!("{}\nnot joined:\n{}", lines.join("\n"), not_joined.join("\n"))
    };
    assert_eq!(late.unwrap_or(0.0), f64::from(late_calls), "every backend span not joined is counted; {}", why());
    let refused = |reason| metric_value(prom, "ringtail_links_refused_total", &[("reason", reason)]).unwrap_or(0.0);
    if front == Front::Go {
        // goroutines move between threads: never linked by thread
        assert_eq!(linked, 0);
        assert!(wait_until(WAIT, || Some(refused("thread_shared_by_tasks")).filter(|n| *n > 0.0)).is_some());
    } else {
        // one thread serves every request: a call not linked was refused
        let counted = wait_until(WAIT, || Some(refused("concurrent_requests")).filter(|n| *n >= f64::from(unlinked)));
        assert_eq!(counted, Some(f64::from(unlinked)), "every call not linked is counted");
    }
    eprintln!(
        "{front:?}, 8 concurrent clients, 400 requests: {linked} calls linked, {unlinked} not (refused: {} concurrent_requests, {} thread_shared_by_tasks); {late_calls} backend spans not joined (send reported late)",
        refused("concurrent_requests"),
        refused("thread_shared_by_tasks")
    );
    Some((linked, unlinked, late_calls, prom, t))
}

/// With `probe.carrier` (socket backend): the same 400 requests through a
/// front under 8 concurrent clients. Java's thread pool serves one request a
/// thread: every call is linked, carried in its TCP option, and its backend
/// span is the call's child by that option (matched, not joined). nginx
/// serves them all on one thread: its calls carry nothing (counted), and
/// their backend spans are joined on this host as without the carrier. No
/// wrong link either way (the checks of
/// `front_calls_are_never_linked_to_the_wrong_request`).
#[test]
fn front_calls_with_the_carrier_are_carried_where_certain_and_joined_where_not() {
    let probe = "backend = \"socket\"\ncarrier = true";
    let count = |prom: u16, name: &str, labels: &[(&str, &str)]| metric_value(prom, name, labels).unwrap_or(0.0);
    if let Some((linked, unlinked, late, prom, _t)) = front_calls_through(probe, Front::Java) {
        assert_eq!((linked, unlinked, late), (400, 0, 0), "Java: every call linked and carried");
        let matched = wait_until(WAIT, || Some(count(prom, "ringtail_carrier_matched_total", &[])).filter(|n| *n >= 400.0));
        assert_eq!(matched, Some(400.0), "Java: each backend request matched its call's option");
        assert_eq!(count(prom, "ringtail_carrier_same_host_joins_total", &[]), 0.0);
    }
    if let Some((_, unlinked, late, prom, _t)) = front_calls_through(probe, Front::Nginx) {
        let not_carried = |n: f64| Some(n).filter(|n| *n >= f64::from(unlinked));
        let counted =
            wait_until(WAIT, || not_carried(count(prom, "ringtail_carrier_not_carried_total", &[("reason", "concurrent_requests")])));
        assert_eq!(counted, Some(f64::from(unlinked)), "nginx: every call not linked carried nothing, counted");
        let joined = count(prom, "ringtail_carrier_same_host_joins_total", &[]);
        assert!(
            joined + f64::from(late) >= f64::from(unlinked),
            "nginx: its backend requests were left to the join: {joined} + {late} late"
        );
        eprintln!("nginx with the carrier: {unlinked} calls not carried, {joined} backend requests joined on this host, {late} late");
    }
}

/// A proxy that forwards the `traceparent` its clients send (nginx passes
/// request headers on): with one worker and 8 concurrent clients, the
/// kernel cannot tell which request a call is for, but the call carries the
/// traceparent of exactly one request its process received: every upstream
/// call is the child of the request of the same path, and the backend's
/// span is in that request's trace (its parent is the traceparent's span,
/// the client's, as W3C forwarding has it).
fn nginx_forwarding_traceparent_links_every_call_to_its_request(b: &str) {
    if !can_trace() {
        return;
    }
    // the client's own span for request i (an SDK's: one a request)
    let tp = |i: usize| (format!("{:032x}", 0x7e57_0000 + i), format!("{:016x}", 0x5e4d_0000 + i));
    let header = |i: usize| {
        let (trace, span) = tp(i);
        Some(("traceparent", format!("00-{trace}-{span}-01")))
    };
    let Some(t) = through_front(&format!("backend = \"{b}\""), Front::Nginx, header) else { return };
    let (prom, fronts, calls, backs) = (t.prom, &t.fronts, &t.calls, &t.backs);
    for i in 0..400 {
        let (trace, span) = tp(i);
        let (front, call, back) = (&fronts[&i], &calls[&i], &backs[&i]);
        assert_eq!((front.trace.as_str(), front.parent.as_deref()), (trace.as_str(), Some(span.as_str())), "{}", front.line);
        assert_eq!(
            (call.trace.as_str(), call.parent.as_deref()),
            (trace.as_str(), Some(front.span.as_str())),
            "the call for {i}: {}",
            call.line
        );
        assert_eq!((back.trace.as_str(), back.parent.as_deref()), (trace.as_str(), Some(span.as_str())), "{}", back.line);
    }
    let refused = metric_value(prom, "ringtail_links_refused_total", &[("reason", "concurrent_requests")]).unwrap_or(0.0);
    eprintln!(
        "nginx forwarding traceparent, 8 concurrent clients: 400 of 400 calls under their request ({refused} not linked by the kernel)"
    );
}

fn nginx_front_calls_are_never_linked_to_the_wrong_request(b: &str) {
    front_calls_are_never_linked_to_the_wrong_request(b, Front::Nginx)
}

fn node_front_calls_are_never_linked_to_the_wrong_request(b: &str) {
    front_calls_are_never_linked_to_the_wrong_request(b, Front::Node)
}

fn asyncio_front_calls_are_never_linked_to_the_wrong_request(b: &str) {
    front_calls_are_never_linked_to_the_wrong_request(b, Front::Asyncio)
}

fn go_front_calls_are_never_linked_to_the_wrong_request(b: &str) {
    front_calls_are_never_linked_to_the_wrong_request(b, Front::Go)
}

fn java_front_calls_are_never_linked_to_the_wrong_request(b: &str) {
    front_calls_are_never_linked_to_the_wrong_request(b, Front::Java)
}

on_both_backends!(
    curl_and_the_server_it_calls_are_one_trace,
    curl_and_the_https_server_it_calls_are_one_trace,
    curl_http2_over_tls_and_its_server_are_one_trace,
    curl_upgrading_to_h2c_and_its_server_are_one_trace,
    curl_and_an_https_server_behind_a_veth_pair_are_one_trace,
    curl_http2_over_tls_and_a_server_behind_a_veth_pair_are_one_trace,
    an_http2_client_and_its_server_on_this_host_are_one_trace,
    nginx_front_calls_are_never_linked_to_the_wrong_request,
    nginx_forwarding_traceparent_links_every_call_to_its_request,
    node_front_calls_are_never_linked_to_the_wrong_request,
    asyncio_front_calls_are_never_linked_to_the_wrong_request,
    go_front_calls_are_never_linked_to_the_wrong_request,
    java_front_calls_are_never_linked_to_the_wrong_request,
);
