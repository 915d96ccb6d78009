//! How spans connect into traces, with no change to any application:
//! a client and the server it calls on the same host are one trace (the
//! same TCP connection seen from both ends), and a client call is the
//! child of the server request its thread serves only when that is certain
//! (never a wrong parent; what is not linked is counted).
//!
//! Every test runs once per capture backend (`socket::…`, `syscalls::…`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;

const WAIT: Duration = Duration::from_secs(60);

/// A ringtail on capture backend `b` that prints spans, serves Prometheus
/// and selects `ports` and the executables `exes`.
fn ringtail_for(b: &str, ports: &[u16], exes: &[&str]) -> (Ringtail, u16) {
    let prom = free_port();
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let exes: Vec<String> = exes.iter().map(|e| format!("\"{e}\"")).collect();
    let rt = Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{}]\nexe_names = [{}]\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
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
    let st = Command::new("curl").args(["-s", &format!("http://127.0.0.1:{port}/t/[0-199]")]).stdout(Stdio::null()).status().expect("curl");
    assert!(st.success());
    let ours = |s: &SpanLine| s.path.starts_with("/t/");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| ours(s)).count() >= 400);
    let spans: Vec<SpanLine> = spans.into_iter().filter(|s| ours(s)).collect();
    assert_eq!(spans.len(), 400, "200 client and 200 server spans:\n{}", rt.stdout());
    let by_trace = traces(&spans);
    assert_eq!(by_trace.len(), 200, "one trace per request:\n{}", rt.stdout());
    let mut paths = BTreeSet::new();
    for (trace, t) in &by_trace {
        let client = t.iter().find(|s| s.kind == "CLIENT").unwrap_or_else(|| panic!("trace {trace} has no client span: {t:?}"));
        let server = t.iter().find(|s| s.kind == "SERVER").unwrap_or_else(|| panic!("trace {trace} has no server span: {t:?}"));
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(client.path, server.path);
        assert_eq!(client.parent, None, "{}", client.line);
        assert_eq!(server.parent.as_deref(), Some(client.span.as_str()), "{}", server.line);
        assert_eq!(client.service, "curl");
        paths.insert(client.path.clone());
    }
    assert_eq!(paths.len(), 200);
    // (the loader's counters reach the endpoint with its next report)
    let joins = wait_until(WAIT, || metric_value(prom, "ringtail_same_host_joins_total", &[]).filter(|n| *n >= 200.0));
    assert_eq!(joins, Some(200.0), "every server request was joined in the kernel");
    assert_eq!(metric_value(prom, "ringtail_parent_wait_timeouts_total", &[]), Some(0.0));
}

/// nginx (one worker, an event loop) proxying to Python under 8 concurrent
/// clients, 400 requests with unique paths: no upstream call is ever the
/// child of another request's span; those not linked are counted exactly;
/// every backend span is in its nginx call's trace, and, where that call
/// was linked, in the front request's trace.
fn an_event_loop_proxy_never_links_a_call_to_the_wrong_request(b: &str) {
    if !can_trace() || !have("nginx") {
        return;
    }
    let dir = TempDir::new("traces-nginx");
    let (front, back) = (free_port(), free_port());
    std::fs::create_dir_all(dir.join("www/p")).unwrap();
    for i in 0..400 {
        std::fs::write(dir.join(&format!("www/p/{i}")), format!("{i}\n")).unwrap();
    }
    let _backend = python_http_server(back, &dir.join("www"));
    let (rt, prom) = ringtail_for(b, &[front, back], &[]);
    let _nginx = nginx_with(
        front,
        &dir.0,
        1,
        &format!("upstream back {{ server 127.0.0.1:{back}; keepalive 8; }}"),
        "location /p/ { proxy_pass http://back; proxy_http_version 1.1; proxy_set_header Connection \"\"; }",
    );
    std::thread::scope(|s| {
        for t in 0..8 {
            s.spawn(move || {
                for i in (t..400).step_by(8) {
                    let r = http_get(front, &format!("/p/{i}"), &[]).expect("request through nginx");
                    assert_eq!(r.status, 200, "{}", r.head);
                }
            });
        }
    });
    let ours = |s: &SpanLine| s.path.starts_with("/p/");
    let spans = rt.spans_when(WAIT, SETTLE, |s| s.iter().filter(|s| ours(s)).count() >= 1200);
    let spans: Vec<SpanLine> = spans.into_iter().filter(|s| ours(s)).collect();
    let of = |kind: &str, nginx: bool| -> BTreeMap<String, SpanLine> {
        let mut m = BTreeMap::new();
        for s in spans.iter().filter(|s| s.kind == kind && (s.service == "nginx") == nginx) {
            assert!(m.insert(s.path.clone(), s.clone()).is_none(), "two {kind} spans of {} for {}", s.service, s.path);
        }
        m
    };
    let (fronts, calls, backs) = (of("SERVER", true), of("CLIENT", true), of("SERVER", false));
    assert_eq!((fronts.len(), calls.len(), backs.len()), (400, 400, 400), "spans:\n{}", rt.stdout());
    let (mut linked, mut unlinked) = (0, 0);
    for (path, call) in &calls {
        match &call.parent {
            Some(p) => {
                let front = &fronts[path];
                assert_eq!(p, &front.span, "the call for {path} is the child of another request: {}", call.line);
                assert_eq!(call.trace, front.trace);
                linked += 1;
            }
            None => unlinked += 1,
        }
        let back = &backs[path];
        assert_eq!(back.parent.as_deref(), Some(call.span.as_str()), "the backend span is the call's child: {}", back.line);
        assert_eq!(back.trace, call.trace);
    }
    let refused = wait_until(WAIT, || {
        metric_value(prom, "ringtail_links_refused_total", &[("reason", "concurrent_requests")]).filter(|n| *n >= f64::from(unlinked))
    })
    .unwrap_or(0.0);
    eprintln!("nginx, 8 concurrent clients, 400 requests: {linked} calls linked, {unlinked} not ({refused} refused as concurrent)");
    assert_eq!(refused, f64::from(unlinked), "every call not linked is counted");
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod socket {
            $( #[test] fn $name() { super::$name("socket") } )*
        }
        mod syscalls {
            $( #[test] fn $name() { super::$name("syscalls") } )*
        }
    };
}

on_both_backends!(curl_and_the_server_it_calls_are_one_trace, an_event_loop_proxy_never_links_a_call_to_the_wrong_request);
