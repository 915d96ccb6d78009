use super::*;
use crate::http1::PIPELINED_HEADS;
use crate::ledger::Ledger;
use ipc_schema::{ConnHead, Links, RawEvent, RawH2, RawStream};
use ipc_schema::{ProcessInfo, SockAddr};
use ringtail_ipc::protocol::{InboundSeq, Verdict};

const INST: u64 = 0xabcdef;
const OFFSET: i64 = 1_700_000_000_000_000_000;

fn v4(a: [u8; 4], port: u16) -> SockAddr {
    let mut ip = [0u8; 16];
    ip[..4].copy_from_slice(&a);
    SockAddr::from_bytes(false, ip, port)
}

fn event(role: Role, conn: u64, seq: u32, req: &[u8], status: u16) -> RawEvent {
    RawEvent {
        conn: ConnHead {
            role,
            pid: 100,
            tid: 101,
            fd: 5,
            proc_start_ns: 7,
            conn_id: conn,
            local: v4([127, 0, 0, 1], 8000),
            peer: v4([10, 0, 0, 9], 50_123),
            tls: false,
        },
        seq,
        parent: None,
        start_mono_ns: 1_000_000,
        end_mono_ns: 3_500_000,
        status,
        request_len: req.len() as u32,
        truncated: false,
        orphan: false,
        h2c: false,
        unlinked: false,
        propagated: None,
        kernel_ids: None,
        request: req.to_vec(),
    }
}

/// The same event over TLS.
fn tls(ev: RawEvent) -> RawEvent {
    RawEvent { conn: ConnHead { tls: true, ..ev.conn }, ..ev }
}

fn batch(events: Vec<RawEvent>) -> RawBatch {
    RawBatch::of(OFFSET, 0, vec![process(100, None)], &events, &[], &[])
}

/// Process `pid` (python3), named `service` by its `OTEL_SERVICE_NAME`.
fn process(pid: u32, service: Option<&str>) -> ProcessInfo {
    ProcessInfo {
        pid,
        proc_start_ns: 7,
        comm: "python3".into(),
        exe_name: Some("python3.11".into()),
        exe_path: Some("/usr/bin/python3.11".into()),
        env_service_name: service.map(Into::into),
        env_resource_attributes: None,
        container_id: None,
    }
}

/// The raw consumer's sequence tracking and the publisher's ledger, as
/// the actors combine them.
struct Acks {
    seq: InboundSeq,
    ledger: Ledger,
}

impl Acks {
    fn ack(&self) -> Option<ipc_schema::Ack> {
        self.seq.ack()
    }

    fn release(&mut self, inst: u64, seq: u64, n: usize) {
        if self.ledger.release((inst, seq), n) {
            self.seq.done(seq);
        }
    }
}

struct Rig {
    t: Transformer,
    ledger: Acks,
    seq: u64,
    registry: Registry,
}

impl Rig {
    fn new(f: impl FnOnce(&mut Settings)) -> Rig {
        let mut s = Settings::default();
        f(&mut s);
        let registry = Registry::new(ipc_schema::Component::SpanActor, 1);
        let mut ledger = Acks { seq: InboundSeq::default(), ledger: Ledger::default() };
        ledger.seq.observe(ipc_schema::Producer { component: ipc_schema::Component::ProbeLoader, instance: INST }, 1);
        Rig { t: Transformer::new(&s, &registry), ledger, seq: 0, registry }
    }

    fn run(&mut self, events: Vec<RawEvent>) -> Vec<Produced> {
        self.run_batch(batch(events))
    }

    fn run_batch(&mut self, batch: RawBatch) -> Vec<Produced> {
        self.seq += 1;
        assert_eq!(self.ledger.seq.receive(self.seq), Verdict::New);
        let mut out = Vec::new();
        let made = self.t.transform(INST, self.seq, &batch, Instant::now(), &mut out);
        if self.ledger.ledger.made((INST, self.seq), made.total()) {
            self.ledger.seq.done(self.seq);
        }
        out
    }

    fn count(&self, name: &str, reason: Option<&str>) -> f64 {
        self.registry
            .report()
            .points
            .iter()
            .filter(|p| p.name == name && reason.is_none_or(|r| p.labels.iter().any(|(k, v)| k == "reason" && v == r)))
            .map(|p| p.value)
            .sum()
    }
}

#[test]
fn server_span_follows_semantic_conventions() {
    let mut rig = Rig::new(|_| {});
    let out =
        rig.run(vec![event(Role::Server, 1, 1, b"GET /users/42?x=1 HTTP/1.1\r\nHost: shop:8000\r\nUser-Agent: curl/8.1\r\n\r\n", 200)]);
    assert_eq!(out.len(), 1);
    let p = &out[0];
    let s = &p.span;
    assert_eq!(s.kind, SpanKind::Server);
    assert_eq!(s.name, "GET /users/*");
    assert_eq!(s.h().method, "GET");
    assert_eq!(s.h().method_original, None);
    assert_eq!(s.h().route.as_deref(), Some("/users/*"));
    assert_eq!(s.h().path, "/users/42");
    assert_eq!(s.h().query.as_deref(), Some("x=1"));
    assert_eq!(s.h().status, 200);
    assert!(!s.error);
    assert_eq!(s.server_address.as_deref(), Some("shop"));
    assert_eq!(s.server_port, 8000);
    assert_eq!((s.h().client_address.as_str(), s.h().client_port), ("10.0.0.9", 50_123));
    assert_eq!(s.h().protocol_version, "1.1");
    assert_eq!(s.h().user_agent.as_deref(), Some("curl/8.1"));
    assert_eq!(s.parent_span_id, 0);
    assert_ne!(s.trace_id, 0);
    assert_ne!(s.span_id, 0);
    // monotonic → Unix: exactly offset + monotonic
    assert_eq!(s.start_unix_ns, (OFFSET + 1_000_000) as u64);
    assert_eq!(s.end_unix_ns, (OFFSET + 3_500_000) as u64);
    assert_eq!(p.resource.service_name, "python3.11");
    assert_eq!(p.resource.pid, 100);
    assert_eq!(p.origin, (INST, 1));
    // the batch is safe once its span is
    assert_eq!(rig.ledger.ack().unwrap().upto, 0);
    rig.ledger.release(INST, 1, 1);
    assert_eq!(rig.ledger.ack().unwrap().upto, 1);
}

/// A TLS connection's request (the plaintext the TLS uprobes read) makes
/// the same span as a cleartext one but for `url.scheme`, on either side.
#[test]
fn tls_requests_have_the_https_scheme_and_nothing_else_differs() {
    let mut rig = Rig::new(|_| {});
    let req = b"GET /users/42 HTTP/1.1\r\nHost: shop\r\n\r\n";
    let plain = rig.run(vec![event(Role::Server, 1, 1, req, 200), event(Role::Client, 2, 1, req, 200)]);
    let tls = rig.run(vec![tls(event(Role::Server, 1, 1, req, 200)), tls(event(Role::Client, 2, 1, req, 200))]);
    assert_eq!(plain.len(), 2);
    assert_eq!(tls.len(), 2);
    for (p, t) in plain.iter().zip(&tls) {
        assert_eq!(p.span.h().scheme, "http");
        assert_eq!(t.span.h().scheme, "https");
        let mut same = t.span.clone();
        if let ipc_schema::Call::Http(h) = &mut same.call {
            h.scheme = "http".into();
        }
        assert_eq!(same, p.span);
    }
}

#[test]
fn status_to_error_by_kind() {
    let mut rig = Rig::new(|_| {});
    let out = rig.run(vec![
        event(Role::Server, 1, 1, b"GET /a HTTP/1.1\r\n\r\n", 404),
        event(Role::Server, 1, 2, b"GET /a HTTP/1.1\r\n\r\n", 503),
        event(Role::Client, 2, 1, b"GET /a HTTP/1.1\r\n\r\n", 404),
    ]);
    let errs: Vec<bool> = out.iter().map(|p| p.span.error).collect();
    assert_eq!(errs, [false, true, true]);
}

#[test]
fn unknown_method_is_other() {
    let mut rig = Rig::new(|_| {});
    let out = rig.run(vec![event(Role::Server, 1, 1, b"PURGE /cache HTTP/1.1\r\n\r\n", 200)]);
    let s = &out[0].span;
    assert_eq!((s.h().method.as_str(), s.h().method_original.as_deref(), s.name.as_str()), ("_OTHER", Some("PURGE"), "HTTP /cache"));
}

#[test]
fn traceparent_joins_the_callers_trace() {
    let mut rig = Rig::new(|_| {});
    let out = rig.run(vec![event(
        Role::Server,
        1,
        1,
        b"GET / HTTP/1.1\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00\r\n\r\n",
        200,
    )]);
    let s = &out[0].span;
    assert_eq!(s.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
    assert_eq!(s.parent_span_id, 0x00f067aa0ba902b7);
    assert_eq!(s.trace_flags, 0);
}

#[test]
fn a_propagated_client_span_carries_the_ids_the_kernel_wrote_and_its_server_names_it() {
    let mut rig = Rig::new(|_| {});
    let mut client = event(Role::Client, 9, 1, b"GET /call HTTP/1.1\r\nHost: backend\r\n\r\n", 200);
    client.propagated = Some((0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331));
    // what the server on this host read: the request with the line written in
    let server = event(
        Role::Server,
        10,
        1,
        b"GET /call HTTP/1.1\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nHost: backend\r\n\r\n",
        200,
    );
    let out = rig.run(vec![client, server]);
    assert_eq!(out.len(), 2);
    let srv = out.iter().find(|p| p.span.kind == SpanKind::Server).unwrap();
    let cli = out.iter().find(|p| p.span.kind == SpanKind::Client).unwrap();
    assert_eq!((cli.span.trace_id, cli.span.span_id, cli.span.parent_span_id), (0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331, 0));
    assert_eq!((srv.span.trace_id, srv.span.parent_span_id), (cli.span.trace_id, cli.span.span_id));
    assert_eq!(rig.t.held(), 0);
}

/// probe.carrier: the kernel's ids are final, over a same-host join and
/// over a `traceparent` header, and a call linked to a server span whose ids
/// the kernel decided names that span's id as its parent, whichever comes
/// first.
#[test]
fn the_kernel_s_ids_are_final_and_children_name_the_span_id_it_decided() {
    let mut rig = Rig::new(|_| {});
    let (trace, srv_span, caller) = (0x0af7651916cd43dd8448eb211c80319c_u128, 0x1111_2222_3333_4444_u64, 0xb7ad6b7169203331_u64);
    let mut server = event(
        Role::Server,
        1,
        1,
        b"GET /outer HTTP/1.1\r\ntraceparent: 00-99999999999999999999999999999999-8888888888888888-01\r\n\r\n",
        200,
    );
    server.parent = Some((50, 1)); // a same-host join, which the kernel's ids override
    server.kernel_ids = Some((trace, srv_span, caller));
    // a call linked in-process without ids of its own (as a database's
    // call is): its parent is the kernel's span id, not one derived here
    let mut inner = event(Role::Client, 9, 1, b"GET /inner HTTP/1.1\r\nHost: b\r\n\r\n", 200);
    inner.parent = Some((1, 1));
    // the call first: it waits for its parent, then names its span id
    let out = rig.run(vec![inner.clone(), server.clone()]);
    let srv = out.iter().find(|p| p.span.kind == SpanKind::Server).unwrap();
    let cli = out.iter().find(|p| p.span.kind == SpanKind::Client).unwrap();
    assert_eq!((srv.span.trace_id, srv.span.span_id, srv.span.parent_span_id), (trace, srv_span, caller));
    assert_eq!((cli.span.trace_id, cli.span.parent_span_id), (trace, srv_span));
    // and with the server first
    let mut rig = Rig::new(|_| {});
    let out = rig.run(vec![server, inner]);
    let cli = out.iter().find(|p| p.span.kind == SpanKind::Client).unwrap();
    assert_eq!((cli.span.trace_id, cli.span.parent_span_id), (trace, srv_span));
    assert_eq!(rig.t.held(), 0);
}

#[test]
fn client_call_inside_a_server_request_is_its_child() {
    let mut rig = Rig::new(|_| {});
    let mut client = event(Role::Client, 9, 1, b"GET /inner HTTP/1.1\r\nHost: backend:9000\r\n\r\n", 200);
    client.parent = Some((1, 1));
    client.conn.local = v4([127, 0, 0, 1], 40_000);
    client.conn.peer = v4([127, 0, 0, 2], 9000);
    // The client exchange finishes first; the server span (with an incoming
    // traceparent) comes after it in the same batch.
    let server = event(
        Role::Server,
        1,
        1,
        b"GET /outer HTTP/1.1\r\ntraceparent: 00-11111111111111111111111111111111-2222222222222222-01\r\n\r\n",
        200,
    );
    let out = rig.run(vec![client, server]);
    assert_eq!(out.len(), 2);
    let srv = out.iter().find(|p| p.span.kind == SpanKind::Server).unwrap();
    let cli = out.iter().find(|p| p.span.kind == SpanKind::Client).unwrap();
    assert_eq!(cli.span.parent_span_id, srv.span.span_id);
    assert_eq!(cli.span.trace_id, 0x11111111111111111111111111111111);
    assert_eq!(cli.span.name, "GET");
    assert_eq!(cli.span.h().route, None);
    assert_eq!(cli.span.server_address.as_deref(), Some("backend"));
    assert_eq!(cli.span.server_port, 9000);
    assert_eq!(cli.span.peer_address, "127.0.0.2");
    assert_eq!(rig.t.held(), 0);
}

#[test]
fn client_call_ending_after_its_server_response_joins_the_trace() {
    let mut rig = Rig::new(|_| {});
    let server = event(
        Role::Server,
        1,
        1,
        b"GET /outer HTTP/1.1\r\ntraceparent: 00-11111111111111111111111111111111-2222222222222222-01\r\n\r\n",
        200,
    );
    let srv = rig.run(vec![server]).remove(0).span;
    // Many other requests later (in other slots, mostly), the late call ends.
    for conn in 100..2_000 {
        rig.run(vec![event(Role::Server, conn, 1, b"GET / HTTP/1.1\r\n\r\n", 200)]);
    }
    let mut client = event(Role::Client, 9, 1, b"GET /inner HTTP/1.1\r\n\r\n", 200);
    client.parent = Some((1, 1));
    let out = rig.run(vec![client]);
    assert_eq!(out.len(), 1, "sent at once, not held");
    assert_eq!(out[0].span.trace_id, 0x11111111111111111111111111111111);
    assert_eq!(out[0].span.parent_span_id, srv.span_id);
    assert_eq!(out[0].span.trace_flags, 1);
    // A parent that was never seen: held.
    let mut stray = event(Role::Client, 10, 1, b"GET /inner HTTP/1.1\r\n\r\n", 200);
    stray.parent = Some((5_000, 1));
    assert!(rig.run(vec![stray]).is_empty());
    assert_eq!(rig.t.held(), 1);
}

/// A proxy on an event loop (nginx) forwards the `traceparent` it received
/// into its upstream call; the kernel could not link the call (its thread
/// served several requests): the call is the child of the server request of
/// the same process that carried that traceparent in, whichever is reported
/// first; a call that was linked by the kernel, or that its thread did not
/// make while serving, or of another process, is not linked this way.
#[test]
fn a_forwarded_traceparent_links_an_unlinked_call_to_the_request_that_carried_it() {
    let mut rig = Rig::new(|s| s.pipeline.parent_wait = Duration::from_millis(10));
    let tp = |span: &str| format!("traceparent: 00-0af7651916cd43dd8448eb211c80319c-{span}-01\r\n");
    let inbound = |conn: u64, span: &str| event(Role::Server, conn, 1, format!("GET /a HTTP/1.1\r\n{}\r\n", tp(span)).as_bytes(), 200);
    let call = |conn: u64, span: &str| {
        let mut c = event(Role::Client, conn, 1, format!("GET /a HTTP/1.1\r\nHost: up\r\n{}\r\n", tp(span)).as_bytes(), 200);
        c.unlinked = true;
        c
    };
    // the call first (a proxy's upstream answer comes before its own): held
    assert!(rig.run(vec![call(20, "00000000000000a1")]).is_empty());
    assert_eq!(rig.t.held(), 1);
    let out = rig.run(vec![inbound(10, "00000000000000b2"), inbound(11, "00000000000000a1")]);
    assert_eq!(out.len(), 3);
    let front = out.iter().find(|p| p.span.kind == SpanKind::Server && p.span.parent_span_id == 0xa1).unwrap();
    let cli = out.iter().find(|p| p.span.kind == SpanKind::Client).unwrap();
    assert_eq!((cli.span.trace_id, cli.span.parent_span_id), (0x0af7651916cd43dd8448eb211c80319c, front.span.span_id));
    assert_eq!(rig.t.held(), 0);
    // the request first: the call finds it at once
    let out = rig.run(vec![call(21, "00000000000000b2")]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].span.parent_span_id, ids::span_id(INST, 10, 1, 0, Role::Server));
    // linked by the kernel: its link stands
    let mut linked = call(22, "00000000000000b2");
    (linked.unlinked, linked.parent) = (false, Some((11, 1)));
    assert_eq!(rig.run(vec![linked])[0].span.parent_span_id, ids::span_id(INST, 11, 1, 0, Role::Server));
    // not made while serving: a trace of its own
    let mut alone = call(23, "00000000000000b2");
    alone.unlinked = false;
    let out = rig.run(vec![alone]);
    assert_eq!((out[0].span.trace_id, out[0].span.parent_span_id), (ids::trace_id(INST, 23, 1, 0), 0));
    // another process's call with that traceparent: waits, in vain
    let mut other = call(24, "00000000000000b2");
    other.conn.pid = 200;
    assert!(rig.run(vec![other]).is_empty());
    let mut out = Vec::new();
    rig.t.expire(Instant::now() + Duration::from_millis(20), &mut out);
    assert_eq!((out[0].span.trace_id, out[0].span.parent_span_id), (ids::trace_id(INST, 24, 1, 0), 0));
    assert_eq!(rig.count("ringtail_parent_wait_timeouts_total", None), 1.0);
}

/// A process whose calls carry their own traceparent (an application's
/// SDK makes a span a call) never forwards one: after FORWARD_TRIES vain
/// waits its calls go out at once; a request whose span is not exported
/// releases the calls that forward its traceparent.
#[test]
fn calls_that_never_forward_stop_waiting_and_an_unexported_request_releases_its_calls() {
    let mut rig = Rig::new(|s| {
        s.pipeline.parent_wait = Duration::from_millis(10);
        s.routes.ignored = vec!["/health".parse().unwrap()];
    });
    let call = |conn: u64, path: &str| {
        let mut c = event(
            Role::Client,
            conn,
            1,
            format!("GET {path} HTTP/1.1\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-{conn:016x}-01\r\n\r\n").as_bytes(),
            200,
        );
        c.unlinked = true;
        c
    };
    for i in 0..u64::from(FORWARD_TRIES) {
        assert!(rig.run(vec![call(100 + i, "/x")]).is_empty());
        let mut out = Vec::new();
        rig.t.expire(Instant::now() + Duration::from_millis(20), &mut out);
        assert_eq!(out.len(), 1);
    }
    assert_eq!(rig.run(vec![call(200, "/x")]).len(), 1, "not held any more");
    assert_eq!(rig.t.held(), 0);
    // another process: a call held, then its request, not exported, releases it
    let mut held = call(300, "/x");
    held.conn.pid = 300;
    assert!(rig.run(vec![held]).is_empty());
    let mut health = event(
        Role::Server,
        301,
        1,
        format!("GET /health HTTP/1.1\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-{:016x}-01\r\n\r\n", 300).as_bytes(),
        200,
    );
    health.conn.pid = 300;
    let out = rig.run(vec![health]);
    assert_eq!(out.len(), 1, "only the call");
    assert_eq!((out[0].span.kind, out[0].span.parent_span_id), (SpanKind::Client, 0));
    assert_eq!(rig.t.held(), 0);
}

#[test]
fn orphaned_child_is_sent_after_parent_wait() {
    let mut rig = Rig::new(|s| s.pipeline.parent_wait = Duration::from_millis(10));
    let mut client = event(Role::Client, 9, 1, b"GET /inner HTTP/1.1\r\n\r\n", 200);
    client.parent = Some((1, 1));
    let out = rig.run(vec![client]);
    assert!(out.is_empty());
    assert_eq!(rig.t.held(), 1);
    let mut out = Vec::new();
    rig.t.expire(Instant::now() + Duration::from_millis(20), &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].span.trace_id, ids::trace_id(INST, 1, 1, 0));
    assert_eq!(out[0].span.parent_span_id, ids::span_id(INST, 1, 1, 0, Role::Server));
    assert_eq!(rig.count("ringtail_parent_wait_timeouts_total", None), 1.0);
}

/// A server span called by a client on this host (the kernel's parent on a
/// server event): reported first, it waits for its caller and joins its
/// trace; a chain front server → client → back server ends in the front's
/// trace whatever the order.
#[test]
fn server_span_joins_its_caller_on_this_host_in_either_order() {
    let mut rig = Rig::new(|_| {});
    // back server (conn 30) called by client request (conn 20, seq 1), made
    // while serving front request (conn 10, seq 1) which carried a traceparent
    let mut back = event(Role::Server, 30, 1, b"GET /back HTTP/1.1\r\n\r\n", 200);
    back.parent = Some((20, 1));
    let mut call = event(Role::Client, 20, 1, b"GET /back HTTP/1.1\r\n\r\n", 200);
    call.parent = Some((10, 1));
    let front = event(
        Role::Server,
        10,
        1,
        b"GET /front HTTP/1.1\r\ntraceparent: 00-11111111111111111111111111111111-2222222222222222-01\r\n\r\n",
        200,
    );
    assert!(rig.run(vec![back]).is_empty(), "the back server waits for its caller");
    assert!(rig.run(vec![call]).is_empty(), "the call waits for its parent");
    assert_eq!(rig.t.held(), 2);
    let out = rig.run(vec![front]);
    assert_eq!(out.len(), 3);
    assert_eq!(rig.t.held(), 0);
    let by_path = |p: &str| out.iter().find(|s| s.span.h().path == p && (p != "/back" || s.span.kind == SpanKind::Server)).unwrap();
    let call_span = out.iter().find(|s| s.span.kind == SpanKind::Client).unwrap();
    for s in &out {
        assert_eq!(s.span.trace_id, 0x11111111111111111111111111111111, "{:?}", s.span.h().path);
    }
    assert_eq!(call_span.span.parent_span_id, by_path("/front").span.span_id);
    assert_eq!(by_path("/back").span.parent_span_id, call_span.span.span_id);
    assert_eq!(call_span.span.span_id, ids::span_id(INST, 20, 1, 0, Role::Client));
    // caller first: the server span goes out at once
    let caller = event(Role::Client, 21, 4, b"GET /x HTTP/1.1\r\n\r\n", 200);
    let c = rig.run(vec![caller]).remove(0).span;
    let mut called = event(Role::Server, 31, 1, b"GET /x HTTP/1.1\r\n\r\n", 200);
    called.parent = Some((21, 4));
    let out = rig.run(vec![called]);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].span.trace_id, out[0].span.parent_span_id), (c.trace_id, c.span_id));
    // a traceparent the request carried wins over the caller
    let mut carried =
        event(Role::Server, 32, 1, b"GET /y HTTP/1.1\r\ntraceparent: 00-33333333333333333333333333333333-4444444444444444-01\r\n\r\n", 200);
    carried.parent = Some((21, 4));
    let out = rig.run(vec![carried]);
    assert_eq!((out[0].span.trace_id, out[0].span.parent_span_id), (0x33333333333333333333333333333333, 0x4444444444444444));
    assert_eq!(rig.count("ringtail_parent_wait_timeouts_total", None), 0.0);
}

/// The service graph's edge of a call on this host: the server span joined
/// to its caller carries the caller's end (its service, duration, error),
/// whichever of the two comes first, along a chain too; a server span
/// joined to nothing (a `traceparent`, a caller never reported) and every
/// client span carry none; with `metrics.service_graph` off, none does.
#[test]
fn a_server_span_joined_to_its_caller_carries_the_callers_end_of_the_edge() {
    let procs = || vec![process(100, Some("front")), process(200, Some("back"))];
    let run = |rig: &mut Rig, events: Vec<RawEvent>| rig.run_batch(RawBatch::of(OFFSET, 0, procs(), &events, &[], &[]));
    let pair = |conn: u64, seq: u32, status: u16| {
        let mut call = event(Role::Client, conn, seq, b"GET /b HTTP/1.1\r\n\r\n", status);
        (call.start_mono_ns, call.end_mono_ns) = (1_000_000, 9_000_000);
        let mut served = event(Role::Server, conn + 1, seq, b"GET /b HTTP/1.1\r\n\r\n", status);
        served.conn.pid = 200;
        served.parent = Some((conn, seq));
        (call, served)
    };
    type Ends = Vec<(SpanKind, Option<(String, u64, bool)>)>;
    let edge = |out: &[Produced]| -> Ends {
        out.iter()
            .map(|p| (p.span.kind, p.span.edge.as_ref().map(|e| (e.peer_service.to_string(), e.peer_duration_ns, e.peer_error))))
            .collect()
    };
    let mut rig = Rig::new(|_| {});
    // the server span first (the usual order): it waits, its caller completes it
    let (call, served) = pair(20, 1, 200);
    assert!(run(&mut rig, vec![served]).is_empty());
    let out = run(&mut rig, vec![call]);
    let mut got = edge(&out);
    got.sort_by_key(|(k, _)| *k == SpanKind::Client);
    assert_eq!(got, [(SpanKind::Server, Some(("front".to_owned(), 8_000_000, false))), (SpanKind::Client, None)]);
    assert_eq!(out.iter().find(|p| p.span.kind == SpanKind::Server).map(|p| p.resource.service_name.as_str()), Some("back"));
    // the caller first: its end is kept for the server span (a 503: the
    // client's end failed)
    let (call, served) = pair(40, 3, 503);
    assert_eq!(edge(&run(&mut rig, vec![call])), [(SpanKind::Client, None)]);
    assert_eq!(edge(&run(&mut rig, vec![served])), [(SpanKind::Server, Some(("front".to_owned(), 8_000_000, true)))]);
    // in one batch, either order
    for swap in [false, true] {
        let (call, served) = pair(60 + u64::from(swap) * 10, 1, 200);
        let events = if swap { vec![call, served] } else { vec![served, call] };
        let out = run(&mut rig, events);
        assert_eq!(out.iter().filter(|p| p.span.edge.is_some()).count(), 1, "swap {swap}: {:?}", edge(&out));
    }
    // joined to nothing: a traceparent it carried, a caller never reported
    let mut carried =
        event(Role::Server, 81, 1, b"GET /y HTTP/1.1\r\ntraceparent: 00-33333333333333333333333333333333-4444444444444444-01\r\n\r\n", 200);
    carried.parent = Some((40, 3));
    assert_eq!(edge(&run(&mut rig, vec![carried])), [(SpanKind::Server, None)]);
    let (_, orphan) = pair(90, 1, 200);
    assert!(run(&mut rig, vec![orphan]).is_empty());
    let mut out = Vec::new();
    rig.t.expire(Instant::now() + Duration::from_secs(60), &mut out);
    assert_eq!(edge(&out), [(SpanKind::Server, None)]);
    // the graph off: no edge in either order
    let mut rig = Rig::new(|s| s.metrics.service_graph = false);
    let (call, served) = pair(20, 1, 200);
    assert!(run(&mut rig, vec![served]).is_empty());
    assert!(run(&mut rig, vec![call]).iter().all(|p| p.span.edge.is_none()));
    let (call, served) = pair(40, 1, 200);
    run(&mut rig, vec![call]);
    assert!(run(&mut rig, vec![served]).iter().all(|p| p.span.edge.is_none()));
}

/// The service graph's edge of a call `probe.carrier` took on this host:
/// both spans' ids are the kernel's (not joined), the server span's parent
/// is the call's span id; whichever comes second carries the other's end
/// (a CLIENT span names the server as its peer), once. A server span whose
/// caller is on another host, and a database call's span, meet nothing.
#[test]
fn a_carried_call_on_this_host_makes_its_edge_whichever_end_comes_second() {
    let procs = || vec![process(100, Some("front")), process(200, Some("back"))];
    let run = |rig: &mut Rig, events: Vec<RawEvent>| rig.run_batch(RawBatch::of(OFFSET, 0, procs(), &events, &[], &[]));
    let trace = 0x0af7651916cd43dd8448eb211c80319c_u128;
    let pair = |n: u64, status: u16| {
        let (front_span, call_span, back_span) = (0x100 + n, 0x200 + n, 0x300 + n);
        let mut call = event(Role::Client, 20 + n, 1, b"GET /b HTTP/1.1\r\n\r\n", status);
        (call.start_mono_ns, call.end_mono_ns) = (1_000_000, 9_000_000);
        call.kernel_ids = Some((trace, call_span << 40, front_span << 40));
        let mut served = event(Role::Server, 40 + n, 1, b"GET /b HTTP/1.1\r\n\r\n", status);
        served.conn.pid = 200;
        served.kernel_ids = Some((trace, back_span << 40, call_span << 40));
        (call, served)
    };
    type Ends = Vec<(SpanKind, String, Option<(String, u64, bool)>)>;
    let edges = |out: &[Produced]| -> Ends {
        out.iter()
            .map(|p| {
                let e = p.span.edge.as_ref().map(|e| (e.peer_service.to_string(), e.peer_duration_ns, e.peer_error));
                (p.span.kind, p.resource.service_name.clone(), e)
            })
            .collect()
    };
    let mut rig = Rig::new(|_| {});
    // the server first (the usual order): the call completes the edge, its
    // peer the server (its duration, its error)
    let (call, served) = pair(1, 503);
    assert_eq!(edges(&run(&mut rig, vec![served])), [(SpanKind::Server, "back".to_owned(), None)], "out at once: not held");
    let back_ns = 1_000_000; // (event(): a server's exchange lasts 1 ms)
    let got = edges(&run(&mut rig, vec![call]));
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].1.as_str()), (SpanKind::Client, "front"));
    assert_eq!(got[0].2.as_ref().map(|(s, _, e)| (s.as_str(), *e)), Some(("back", true)));
    assert!(got[0].2.as_ref().is_some_and(|(_, d, _)| *d > 0 && *d <= 8 * back_ns), "{got:?}");
    // the call first: the server completes it, as a joined one does
    let (call, served) = pair(2, 200);
    assert_eq!(edges(&run(&mut rig, vec![call])), [(SpanKind::Client, "front".to_owned(), None)]);
    assert_eq!(edges(&run(&mut rig, vec![served])), [(SpanKind::Server, "back".to_owned(), Some(("front".to_owned(), 8_000_000, false)))]);
    // each end once: the same server span again meets nothing
    let (_, again) = pair(2, 200);
    assert_eq!(edges(&run(&mut rig, vec![again])), [(SpanKind::Server, "back".to_owned(), None)]);
    // a caller on another host (never here): nothing
    let (_, remote) = pair(3, 200);
    assert_eq!(edges(&run(&mut rig, vec![remote])), [(SpanKind::Server, "back".to_owned(), None)]);
    // the graph off: none
    let mut rig = Rig::new(|s| s.metrics.service_graph = false);
    let (call, served) = pair(4, 200);
    assert!(run(&mut rig, vec![served, call]).iter().all(|p| p.span.edge.is_none()));
}

/// Along a chain front server → its call → back server, reported back
/// first: the back server's edge is completed by the call when the call is
/// itself released by its parent.
#[test]
fn an_edge_is_completed_when_its_caller_is_released_from_its_own_wait() {
    let procs = vec![process(100, Some("front")), process(200, Some("back"))];
    let mut rig = Rig::new(|_| {});
    let mut back = event(Role::Server, 30, 1, b"GET /back HTTP/1.1\r\n\r\n", 200);
    (back.conn.pid, back.parent) = (200, Some((20, 1)));
    let mut call = event(Role::Client, 20, 1, b"GET /back HTTP/1.1\r\n\r\n", 200);
    call.parent = Some((10, 1));
    let front = event(Role::Server, 10, 1, b"GET /front HTTP/1.1\r\n\r\n", 200);
    assert!(rig.run_batch(RawBatch::of(OFFSET, 0, procs.clone(), &[back], &[], &[])).is_empty());
    assert!(rig.run_batch(RawBatch::of(OFFSET, 0, procs.clone(), &[call], &[], &[])).is_empty());
    let out = rig.run_batch(RawBatch::of(OFFSET, 0, procs, &[front], &[], &[]));
    assert_eq!(out.len(), 3);
    let edges: Vec<_> =
        out.iter().filter_map(|p| Some((p.span.h().path.to_string(), p.span.edge.as_ref()?.peer_service.to_string()))).collect();
    assert_eq!(edges, [("/back".to_owned(), "front".to_owned())], "only the back server has a caller on this host");
}

/// A caller never reported: after `parent_wait` the server span goes out in
/// a trace of its own, counted; a span joined to one that makes no span (an
/// ignored route) goes out at once.
#[test]
fn a_caller_never_seen_or_not_exported_does_not_hold_a_span_longer_than_parent_wait() {
    let mut rig = Rig::new(|s| {
        s.pipeline.parent_wait = Duration::from_millis(10);
        s.routes.ignored = vec!["/health".parse().unwrap()];
    });
    let mut called = event(Role::Server, 40, 1, b"GET /z HTTP/1.1\r\n\r\n", 200);
    called.parent = Some((41, 1));
    assert!(rig.run(vec![called]).is_empty());
    let mut out = Vec::new();
    rig.t.expire(Instant::now() + Duration::from_millis(20), &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].span.trace_id, ids::trace_id(INST, 40, 1, 0));
    assert_eq!(out[0].span.parent_span_id, 0);
    assert_eq!(rig.count("ringtail_parent_wait_timeouts_total", None), 1.0);
    assert_eq!(rig.t.held(), 0);
    // a call made while serving an ignored request: held, then out at once
    let mut call = event(Role::Client, 43, 1, b"GET /z HTTP/1.1\r\n\r\n", 200);
    call.parent = Some((42, 1));
    assert!(rig.run(vec![call.clone()]).is_empty());
    let out = rig.run(vec![event(Role::Server, 42, 1, b"GET /health HTTP/1.1\r\n\r\n", 200)]);
    assert_eq!(out.len(), 1, "only the call");
    assert_eq!(out[0].span.trace_id, ids::trace_id(INST, 42, 1, 0));
    assert_eq!(rig.t.held(), 0);
    // and one made later goes out at once too
    call.conn.conn_id = 44;
    assert_eq!(rig.run(vec![call]).len(), 1);
    assert_eq!(rig.count("ringtail_parent_wait_timeouts_total", None), 1.0);
}

/// Spans that wait for each other (no real exchange makes this; a record
/// could) go out within three waits, and nothing stays held.
#[test]
fn spans_waiting_for_each_other_are_released() {
    let mut rig = Rig::new(|s| s.pipeline.parent_wait = Duration::from_millis(10));
    let mut a = event(Role::Server, 50, 1, b"GET /a HTTP/1.1\r\n\r\n", 200);
    a.parent = Some((51, 1));
    let mut b = event(Role::Client, 51, 1, b"GET /b HTTP/1.1\r\n\r\n", 200);
    b.parent = Some((50, 1));
    assert!(rig.run(vec![a, b]).is_empty());
    let mut out = Vec::new();
    let now = Instant::now();
    for i in 1..=4 {
        rig.t.expire(now + Duration::from_millis(20 * i), &mut out);
    }
    assert_eq!(out.len(), 2);
    assert_eq!(rig.t.held(), 0);
}

#[test]
fn pipelined_requests_pair_with_their_responses() {
    let mut rig = Rig::new(|_| {});
    let first = event(Role::Server, 3, 1, b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\n\r\n", 200);
    let mut o2 = event(Role::Server, 3, 1, b"", 404);
    o2.orphan = true;
    o2.end_mono_ns = 4_000_000;
    let mut o3 = o2.clone();
    o3.status = 500;
    o3.end_mono_ns = 5_000_000;
    let out = rig.run(vec![first, o2, o3]);
    let got: Vec<(&str, u16)> = out.iter().map(|p| (p.span.h().path.as_str(), p.span.h().status)).collect();
    assert_eq!(got, [("/1", 200), ("/2", 404), ("/3", 500)]);
    // each starts when the previous response ended
    assert_eq!(out[2].span.start_unix_ns, (OFFSET + 4_000_000) as u64);
    let ids: std::collections::HashSet<u64> = out.iter().map(|p| p.span.span_id).collect();
    assert_eq!(ids.len(), 3);
    // a response nobody asked for is counted, not invented
    let mut stray = event(Role::Server, 77, 1, b"", 200);
    stray.orphan = true;
    assert!(rig.run(vec![stray]).is_empty());
    assert_eq!(rig.count("ringtail_dropped_events_total", Some("unmatched_response")), 1.0);
}

#[test]
fn ignored_routes_and_garbage_are_counted() {
    let mut rig = Rig::new(|s| s.routes.ignored = vec!["/health".parse().unwrap()]);
    let out = rig.run(vec![
        event(Role::Server, 1, 1, b"GET /health HTTP/1.1\r\n\r\n", 200),
        event(Role::Server, 1, 2, b"\x00\x01garbage", 200),
        event(Role::Server, 1, 3, b"GET /ok HTTP/1.1\r\n\r\n", 200),
    ]);
    assert_eq!(out.len(), 1);
    assert_eq!(rig.count("ringtail_ignored_requests_total", None), 1.0);
    assert_eq!(rig.count("ringtail_dropped_events_total", Some("unparsable_request")), 1.0);
}

#[test]
fn same_request_same_ids_across_transformers() {
    let a = Rig::new(|_| {}).run(vec![event(Role::Server, 5, 2, b"GET / HTTP/1.1\r\n\r\n", 200)]);
    let b = Rig::new(|_| {}).run(vec![event(Role::Server, 5, 2, b"GET / HTTP/1.1\r\n\r\n", 200)]);
    assert_eq!((a[0].span.trace_id, a[0].span.span_id), (b[0].span.trace_id, b[0].span.span_id));
}

#[test]
fn secrets_never_reach_a_span() {
    let mut rig = Rig::new(|s| s.redaction.query_keys = vec!["token".parse().unwrap()]);
    let out = rig.run(vec![
        event(Role::Server, 1, 1, b"GET /a?sig=S1&Token=T1&x=1 HTTP/1.1\r\nHost: u:P1@shop:8000\r\n\r\n", 200),
        event(Role::Client, 2, 1, b"GET http://u:P2@api:81/b?AWSAccessKeyId=A1 HTTP/1.1\r\n\r\n", 200),
    ]);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].span.h().query.as_deref(), Some("sig=REDACTED&Token=REDACTED&x=1"));
    assert_eq!(out[0].span.server_address.as_deref(), Some("shop"));
    assert_eq!(out[1].span.h().query.as_deref(), Some("AWSAccessKeyId=REDACTED"));
    assert_eq!(out[1].span.server_address.as_deref(), Some("api"));
    let all = format!("{out:?}");
    for secret in ["S1", "T1", "P1", "P2", "A1"] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
    let mut rig = Rig::new(|s| s.redaction.drop_query = true);
    let out = rig.run(vec![event(Role::Server, 1, 1, b"GET /a?q=personal HTTP/1.1\r\n\r\n", 200)]);
    assert_eq!(out[0].span.h().query, None);
}

fn h2_record(conn: u64, send: bool, start: bool, pieces: Vec<u8>, mono_ns: u64) -> RawH2 {
    RawH2 { conn: event(Role::Server, conn, 1, b"", 0).conn, mono_ns, send, start, close: false, upgrade: false, caller: None, pieces }
}

/// The same record, of the client's side.
fn client_side(r: RawH2) -> RawH2 {
    RawH2 { conn: ConnHead { role: Role::Client, ..r.conn }, ..r }
}

/// A PIECE_FRAME piece with its payload as a PIECE_MORE piece, as the kernel writes them.
fn frame(typ: u8, flags: u8, stream: u8, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut v = vec![1, 0, 0, n as u8, typ, flags, 0, 0, 0, stream];
    if n > 0 {
        v.extend_from_slice(&[2, n as u8, 0]);
        v.extend_from_slice(payload);
    }
    v
}

#[test]
fn h2_streams_become_spans_and_bad_records_are_counted() {
    let s = Settings::default();
    let registry = Registry::new(ipc_schema::Component::SpanActor, 1);
    let mut t = Transformer::new(&s, &registry);
    // GET / (static table), END_STREAM | END_HEADERS; answered 404.
    let mut b = batch(vec![]);
    for r in [
        h2_record(9, false, true, frame(1, 0x5, 1, &[0x82, 0x84, 0x86]), 1_000_000),
        h2_record(9, true, false, frame(1, 0x5, 1, &[0x8d]), 2_000_000),
        h2_record(9, false, false, vec![9, 9, 9], 3_000_000),
    ] {
        b.push_h2(&r);
    }
    let mut out = Vec::new();
    let made = t.transform(INST, 1, &b, Instant::now(), &mut out);
    assert_eq!(made.spans, 1);
    let span = &out[0].span;
    assert_eq!((span.kind, span.h().method.as_str(), span.h().path.as_str(), span.h().status), (SpanKind::Server, "GET", "/", 404));
    assert_eq!(span.h().protocol_version, "2");
    assert_eq!(span.start_unix_ns, OFFSET as u64 + 1_000_000);
    assert_eq!(span.end_unix_ns, OFFSET as u64 + 2_000_000);
    // the malformed record gave the connection up, counted
    assert_eq!(t.h2_connections(), 0);
    let report = registry.report();
    let malformed = report.points.iter().find(|p| p.labels.iter().any(|(_, v)| v == "h2_malformed_record"));
    assert_eq!(malformed.map(|p| p.value), Some(1.0), "{report:?}");
}

/// An HTTP/2 server connection opened by a client on this host (the
/// kernel names it in a record, `caller`): each server stream joins the
/// client's stream of the same id, in either order.
#[test]
fn h2_server_streams_join_their_callers_streams() {
    let mut rig = Rig::new(|_| {});
    let client = |send: bool, start: bool, pieces: Vec<u8>, ns: u64| client_side(h2_record(70, send, start, pieces, ns));
    let server = |send: bool, start: bool, pieces: Vec<u8>, ns: u64| RawH2 { caller: Some(70), ..h2_record(71, send, start, pieces, ns) };
    let mut b = batch(vec![]);
    // the server's stream 1 ends (reported first), then the client's
    for r in [
        server(false, true, frame(1, 0x5, 1, &[0x82, 0x84, 0x86]), 1_000_000),
        server(true, false, frame(1, 0x5, 1, &[0x88]), 2_000_000),
        client(true, true, frame(1, 0x5, 1, &[0x82, 0x84, 0x86]), 900_000),
        client(false, false, frame(1, 0x5, 1, &[0x88]), 2_100_000),
    ] {
        b.push_h2(&r);
    }
    rig.seq += 1;
    assert_eq!(rig.ledger.seq.receive(rig.seq), Verdict::New);
    let mut out = Vec::new();
    rig.t.transform(INST, rig.seq, &b, Instant::now(), &mut out);
    assert_eq!(out.len(), 2, "{out:?}");
    let c = out.iter().find(|p| p.span.kind == SpanKind::Client).unwrap();
    let s = out.iter().find(|p| p.span.kind == SpanKind::Server).unwrap();
    assert_eq!(c.span.span_id, ids::span_id(INST, 70, 1, H2_SUB, Role::Client));
    assert_eq!((s.span.trace_id, s.span.parent_span_id), (c.span.trace_id, c.span.span_id));
    assert_eq!(rig.t.held(), 0);
}

#[test]
fn h2c_upgrade_request_is_stream_one() {
    let s = Settings::default();
    let registry = Registry::new(ipc_schema::Component::SpanActor, 1);
    let mut t = Transformer::new(&s, &registry);
    // The HTTP/1 request answered 101 (no span of its own), then the
    // server's SETTINGS and stream 1's response as HTTP/2.
    let up = b"GET /up?x=1 HTTP/1.1\r\nHost: shop:8000\r\nUser-Agent: curl/8\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n";
    let mut b = batch(vec![RawEvent { h2c: true, ..event(Role::Server, 9, 1, up, 101) }]);
    let mut first = frame(4, 0, 0, &[]);
    first.extend(frame(1, 0x4, 1, &[0x88])); // :status 200, END_HEADERS
    let mut start = h2_record(9, true, true, first, 4_000_000);
    start.upgrade = true;
    b.push_h2(&start);
    b.push_h2(&h2_record(9, true, false, frame(0, 0x1, 1, b"ok"), 5_000_000));
    let mut out = Vec::new();
    let made = t.transform(INST, 1, &b, Instant::now(), &mut out);
    assert_eq!(made.spans, 1, "{out:?}");
    let span = &out[0].span;
    assert_eq!((span.kind, span.h().method.as_str(), span.h().path.as_str(), span.h().status), (SpanKind::Server, "GET", "/up", 200));
    assert_eq!(span.h().query.as_deref(), Some("x=1"));
    assert_eq!(span.h().protocol_version, "2");
    assert_eq!(span.server_address.as_deref(), Some("shop"));
    assert_eq!(span.h().user_agent.as_deref(), Some("curl/8"));
    assert_eq!(span.start_unix_ns, OFFSET as u64 + 1_000_000);
    assert_eq!(span.end_unix_ns, OFFSET as u64 + 5_000_000);
    // An upgrade start whose request never came: stream 1 is counted.
    let mut start = h2_record(10, true, true, frame(1, 0x5, 1, &[0x88]), 6_000_000);
    start.upgrade = true;
    let mut b = batch(vec![]);
    b.push_h2(&start);
    b.push_h2(&RawH2 { close: true, ..h2_record(10, true, false, vec![], 7_000_000) });
    assert_eq!(t.transform(INST, 2, &b, Instant::now(), &mut out).spans, 0);
    let report = registry.report();
    let unseen = report.points.iter().find(|p| p.labels.iter().any(|(_, v)| v == "h2_request_unseen"));
    assert_eq!(unseen.map(|p| p.value), Some(1.0), "{report:?}");
}

#[test]
fn h2c_upgraded_server_streams_join_their_callers_streams() {
    let mut rig = Rig::new(|_| {});
    // Both ends of one `Upgrade: h2c` connection on this host: the server's
    // 101 names the client's request (the kernel's same-host join), so its
    // connection's caller is the client's, for stream 1 and those after it.
    let up = b"GET /up HTTP/1.1\r\nHost: shop\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n";
    let mut b = batch(vec![
        RawEvent { h2c: true, ..event(Role::Client, 80, 1, up, 101) },
        RawEvent { h2c: true, parent: Some((80, 1)), ..event(Role::Server, 81, 1, up, 101) },
    ]);
    let client =
        |send: bool, start: bool, pieces: Vec<u8>, ns: u64| RawH2 { upgrade: start, ..client_side(h2_record(80, send, start, pieces, ns)) };
    let server = |send: bool, start: bool, pieces: Vec<u8>, ns: u64| RawH2 { upgrade: start, ..h2_record(81, send, start, pieces, ns) };
    for r in [
        server(true, true, frame(1, 0x5, 1, &[0x88]), 2_900_000),
        client(false, true, frame(1, 0x5, 1, &[0x88]), 3_000_000),
        client(true, false, frame(1, 0x5, 3, &[0x82, 0x84, 0x86]), 4_000_000),
        server(false, false, frame(1, 0x5, 3, &[0x82, 0x84, 0x86]), 4_100_000),
        server(true, false, frame(1, 0x5, 3, &[0x88]), 4_200_000),
        client(false, false, frame(1, 0x5, 3, &[0x88]), 4_300_000),
    ] {
        b.push_h2(&r);
    }
    rig.seq += 1;
    assert_eq!(rig.ledger.seq.receive(rig.seq), Verdict::New);
    let mut out = Vec::new();
    rig.t.transform(INST, rig.seq, &b, Instant::now(), &mut out);
    assert_eq!(out.len(), 4, "{out:?}");
    for stream in [1, 3] {
        let span = |kind: SpanKind, conn: u64, role: Role| {
            let id = ids::span_id(INST, conn, stream, H2_SUB, role);
            out.iter().find(|p| p.span.kind == kind && p.span.span_id == id).unwrap_or_else(|| panic!("stream {stream}: {out:?}"))
        };
        let (c, s) = (span(SpanKind::Client, 80, Role::Client), span(SpanKind::Server, 81, Role::Server));
        assert_eq!(c.span.h().path, s.span.h().path);
        assert_eq!((s.span.trace_id, s.span.parent_span_id), (c.span.trace_id, c.span.span_id), "stream {stream}");
    }
    assert_eq!(rig.t.held(), 0);
}

/// A kernel frame piece of any stream id and a payload up to 64 KiB.
fn frame_to(typ: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut v = vec![1, (n >> 16) as u8, (n >> 8) as u8, n as u8, typ, flags];
    v.extend_from_slice(&stream.to_be_bytes());
    if n > 0 {
        v.push(2);
        v.extend_from_slice(&(n as u16).to_le_bytes());
        v.extend_from_slice(payload);
    }
    v
}

/// A request header block: GET, http, and a literal (not indexed)
/// `:path` of `len` bytes.
fn request_block(len: usize) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x04];
    // the length, an HPACK integer with a 7-bit prefix
    if len < 127 {
        b.push(len as u8);
    } else {
        b.push(127);
        let mut rest = len - 127;
        while rest >= 128 {
            b.push((rest % 128) as u8 | 0x80);
            rest /= 128;
        }
        b.push(rest as u8);
    }
    b.push(b'/');
    b.extend(std::iter::repeat_n(b'a', len - 1));
    b
}

/// Many connections full of streams that never end (a remote client's
/// flood): what every connection holds together stays within
/// `pipeline.conn_state_mb`, the largest connections are forgotten first,
/// every stream dropped with them is counted, and a small connection
/// opened before the flood is still followed after it.
#[test]
fn h2_state_is_bounded_host_wide_and_what_is_refused_is_counted() {
    let mut rig = Rig::new(|s| s.pipeline.conn_state_mb = 1);
    let budget = 1 << 20;
    let feed = |rig: &mut Rig, records: Vec<RawH2>| {
        let mut b = batch(vec![]);
        for r in &records {
            b.push_h2(r);
        }
        rig.seq += 1;
        let mut out = Vec::new();
        rig.t.transform(INST, rig.seq, &b, Instant::now(), &mut out);
        out
    };
    // The ordinary client: one stream, still open.
    let legit = 1;
    feed(&mut rig, vec![h2_record(legit, false, true, frame_to(1, 0x5, 1, &request_block(16)), 1)]);
    let (conns, streams) = (24u64, 100u32);
    let mut most = 0;
    for c in 0..conns {
        for i in 0..streams {
            // 600-byte paths, no END_STREAM: each stream stays open.
            let r = h2_record(100 + c, false, i == 0, frame_to(1, 0x4, 2 * i + 1, &request_block(600)), 2);
            feed(&mut rig, vec![r]);
            let held = rig.t.h2_state_bytes();
            assert_eq!(held, rig.t.h2_state_bytes_recounted(), "the running count is what is held");
            assert!(held <= budget, "{held} bytes held, over the budget after conn {c} stream {i}");
            most = most.max(held);
        }
    }
    assert!(most > budget / 2, "the flood reached the budget: {most}");
    let refused = rig.count("ringtail_dropped_events_total", Some("h2_state_full"));
    let open = rig.t.h2_open_streams() as f64;
    assert!(refused > 0.0);
    assert_eq!(refused + open, f64::from(streams) * conns as f64 + 1.0, "every stream is open or counted");
    assert!(rig.count("ringtail_h2_connections_evicted_total", None) >= 1.0);
    assert_eq!(rig.count("ringtail_h2_state_bytes", None), rig.t.h2_state_bytes() as f64);
    // The small connection was never the largest: its stream ends as a span.
    let out = feed(&mut rig, vec![h2_record(legit, true, false, frame_to(1, 0x5, 1, &[0x88]), 3)]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].span.h().path.len(), out[0].span.h().status), (16, 200));
}

/// Pipelined heads waiting for answers are bounded across connections:
/// past the bound they are forgotten and counted, not kept.
#[test]
fn pipelined_heads_are_bounded_host_wide() {
    let mut rig = Rig::new(|_| {});
    let one = b"GET /p HTTP/1.1\r\nHost: h\r\n\r\n";
    let req: Vec<u8> = one.iter().copied().cycle().take(one.len() * 16).collect();
    let conns = PIPELINED_HEADS / 15 + 10;
    for c in 0..conns {
        rig.run(vec![event(Role::Server, c as u64 + 1, 1, &req, 200)]);
        assert!(rig.t.pipelined_heads() <= PIPELINED_HEADS);
    }
    let forgotten = rig.count("ringtail_dropped_events_total", Some("pipelined_unanswered"));
    assert_eq!(forgotten + rig.t.pipelined_heads() as f64, 15.0 * conns as f64, "every head is waiting or counted");
    assert!(forgotten > 0.0);
}

// ------------------------------------------------------------- databases

/// A database connection's stream record of process 100, the client, to
/// the server at 10.0.0.5:`port`, its bytes captured whole.
fn db_record(conn: u64, port: u16, send: bool, bytes: &[u8], mono_ns: u64, parent: Option<(u64, u32)>) -> RawStream {
    let mut pieces = Vec::new();
    crate::db::pieces::encode(&mut pieces, crate::db::pieces::Piece::Bytes(bytes));
    RawStream {
        conn: ConnHead {
            role: Role::Client,
            pid: 100,
            tid: 101,
            fd: 6,
            proc_start_ns: 7,
            conn_id: conn,
            local: v4([127, 0, 0, 1], 41_000),
            peer: v4([10, 0, 0, 5], port),
            tls: false,
        },
        mono_ns,
        send,
        start: false,
        close: false,
        links: Links { parent: if send { parent } else { None }, unlinked: false },
        pieces,
    }
}

/// The record the kernel ships when database connection `conn` closes.
fn db_close(conn: u64, port: u16, mono_ns: u64) -> RawStream {
    RawStream { close: true, send: false, pieces: Vec::new(), ..db_record(conn, port, false, b"", mono_ns, None) }
}

/// A PostgreSQL message: type, length, body.
fn pg_msg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// psql's startup message for user alice, database shop.
fn pg_startup() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0alice\0database\0shop\0application_name\0psql\0\0");
    let mut v = (body.len() as u32 + 4).to_be_bytes().to_vec();
    v.extend(body);
    v
}

/// A `Rig::run` with database stream records after the events.
fn run_records(rig: &mut Rig, events: Vec<RawEvent>, records: &[RawStream]) -> Vec<Produced> {
    rig.seq += 1;
    assert_eq!(rig.ledger.seq.receive(rig.seq), Verdict::New);
    let mut b = batch(events);
    for r in records {
        b.push_stream(r);
    }
    let mut out = Vec::new();
    let made = rig.t.transform(INST, rig.seq, &b, Instant::now(), &mut out);
    if rig.ledger.ledger.made((INST, rig.seq), made.total()) {
        rig.ledger.seq.done(rig.seq);
    }
    out
}

/// A database span is no HTTP exchange (nor an RPC) and has no other
/// attribute.
fn assert_no_http(s: &Span<Text>) {
    assert!(s.call.http().is_none() && s.call.rpc().is_none(), "{s:?}");
    assert!(s.attributes.is_empty(), "{s:?}");
}

/// The HTTP exchange of a span (of an HTTP or RPC call).
trait HttpOf {
    fn h(&self) -> &ipc_schema::HttpCall<Text>;
}

impl HttpOf for Span<Text> {
    fn h(&self) -> &ipc_schema::HttpCall<Text> {
        self.call.http().expect("an HTTP span")
    }
}

/// A PostgreSQL simple query and a Redis pipeline (one write, three
/// commands, one refused) from one process: one CLIENT span per call,
/// named by its summary, with its `db` fields and the server its peer;
/// the span ids differ call by call; a close forgets the connection and
/// counts what was still waiting for an answer.
#[test]
fn database_calls_become_client_spans() {
    let mut rig = Rig::new(|_| {});
    let pg_answer = [
        pg_msg(b'T', &[&[0, 1][..], b"id\0", &[0, 0, 0x40, 1, 0, 1, 0, 0, 0, 23, 0, 4, 0xff, 0xff, 0xff, 0xff, 0, 0]].concat()),
        pg_msg(b'D', &[0, 1, 0, 0, 0, 1, b'1']),
        pg_msg(b'C', b"SELECT 1\0"),
        pg_msg(b'Z', b"I"),
    ]
    .concat();
    let records = [
        db_record(20, 5432, true, &pg_startup(), 1_000_000, None),
        db_record(20, 5432, false, &[pg_msg(b'R', &[0, 0, 0, 0]), pg_msg(b'Z', b"I")].concat(), 1_100_000, None),
        db_record(20, 5432, true, &pg_msg(b'Q', b"SELECT id FROM users WHERE email = 'bob@example.com'\0"), 2_000_000, None),
        db_record(20, 5432, false, &pg_answer, 2_500_000, None),
        db_record(
            21,
            6379,
            true,
            b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$6\r\nsecret\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n*3\r\n$5\r\nLPUSH\r\n$1\r\na\r\n$1\r\nx\r\n",
            3_000_000,
            None,
        ),
        db_record(
            21,
            6379,
            false,
            b"+OK\r\n$6\r\nsecret\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            3_400_000,
            None,
        ),
    ];
    let out = run_records(&mut rig, vec![], &records);
    assert_eq!(out.len(), 4, "{:?}", out.iter().map(|p| &p.span.name).collect::<Vec<_>>());
    assert_eq!(rig.t.streams.connections(), 2);
    for p in &out {
        let s = &p.span;
        assert_eq!(s.kind, SpanKind::Client);
        assert_eq!(s.server_address.as_deref(), Some("10.0.0.5"));
        assert_eq!((s.peer_address.as_str(), s.peer_port), ("10.0.0.5", s.server_port));
        assert_no_http(s);
        assert_eq!((s.parent_span_id, s.trace_flags), (0, 1), "no parent: a trace of its own");
        assert_ne!(s.trace_id, 0);
        assert!(s.export_trace && s.export_metrics);
        let db = s.call.db().expect("a database span has db");
        assert_eq!(Some(s.name.as_str()), db.query_summary.as_deref(), "named by its summary");
        for f in [&db.query_text, &db.query_summary, &db.namespace, &db.collection].into_iter().flatten() {
            assert!(!f.contains("secret") && !f.contains("bob@"), "a value exported: {db:?}");
        }
    }
    let pg = &out[0].span;
    let db = pg.call.db().unwrap();
    assert_eq!(pg.name, "SELECT users");
    assert_eq!(pg.server_port, 5432);
    assert_eq!((pg.start_unix_ns, pg.end_unix_ns), (OFFSET as u64 + 2_000_000, OFFSET as u64 + 2_500_000));
    assert!(!pg.error);
    assert_eq!(db.system, "postgresql");
    assert_eq!(db.namespace.as_deref(), Some("shop"));
    assert_eq!(db.operation.as_deref(), Some("SELECT"));
    assert_eq!(db.collection.as_deref(), Some("users"));
    assert_eq!(db.query_text.as_deref(), Some("SELECT id FROM users WHERE email = ?"));
    assert_eq!((db.status_code.as_deref(), db.error_type.as_deref(), db.returned_rows), (None, None, Some(1)));
    let redis: Vec<_> = out[1..].iter().map(|p| &p.span).collect();
    let ops: Vec<_> = redis.iter().map(|s| (s.name.as_str(), s.call.db().unwrap().query_text.as_deref().unwrap())).collect();
    assert_eq!(ops, [("SET", "SET ? ?"), ("GET", "GET ?"), ("LPUSH", "LPUSH ? ?")]);
    for s in &redis {
        let db = s.call.db().unwrap();
        assert_eq!((db.system.as_str(), db.namespace.as_deref(), s.server_port), ("redis", Some("0"), 6379));
        assert_eq!((s.start_unix_ns, s.end_unix_ns), (OFFSET as u64 + 3_000_000, OFFSET as u64 + 3_400_000));
    }
    let failed = redis[2];
    let db = failed.call.db().unwrap();
    assert!(failed.error);
    assert_eq!((db.status_code.as_deref(), db.error_type.as_deref()), (Some("WRONGTYPE"), Some("WRONGTYPE")));
    assert!(!redis[0].error && !redis[1].error);
    // Each call its span id (and trace), whatever the connection.
    let ids: HashSet<u64> = out.iter().map(|p| p.span.span_id).collect();
    assert_eq!(ids.len(), out.len(), "span ids collide");
    let traces: HashSet<u128> = out.iter().map(|p| p.span.trace_id).collect();
    assert_eq!(traces.len(), out.len(), "a parentless call starts its own trace");
    // The same records again (another transformer): the same ids.
    let mut again = Rig::new(|_| {});
    let ids_again: Vec<u64> = run_records(&mut again, vec![], &records).iter().map(|p| p.span.span_id).collect();
    assert_eq!(ids_again, out.iter().map(|p| p.span.span_id).collect::<Vec<_>>());
    // A query left unanswered, then the close: forgotten, counted.
    let unanswered = rig.count("ringtail_dropped_events_total", Some("db_unanswered"));
    let out = run_records(
        &mut rig,
        vec![],
        &[db_record(20, 5432, true, &pg_msg(b'Q', b"SELECT 1\0"), 4_000_000, None), db_close(20, 5432, 4_100_000)],
    );
    assert!(out.is_empty());
    assert_eq!(rig.t.streams.connections(), 1);
    assert_eq!(rig.count("ringtail_dropped_events_total", Some("db_unanswered")) - unanswered, 1.0);
    assert!(run_records(&mut rig, vec![], &[db_close(21, 6379, 4_200_000)]).is_empty());
    assert_eq!(rig.t.streams.connections(), 0);
    // A close of a connection never seen is nothing.
    assert!(run_records(&mut rig, vec![], &[db_close(22, 6379, 4_300_000)]).is_empty());
    assert_eq!(rig.t.streams.connections(), 0);
}

/// A database call sent while its thread served a request (the kernel's
/// `Links::parent`, as a client HTTP request's `parent`) is that server
/// span's child, in the trace the request carried in; with no link it
/// is a trace of its own.
#[test]
fn database_call_inside_a_server_request_is_its_child() {
    let mut rig = Rig::new(|_| {});
    let server = event(
        Role::Server,
        1,
        1,
        b"GET /orders HTTP/1.1\r\ntraceparent: 00-11111111111111111111111111111111-2222222222222222-01\r\n\r\n",
        200,
    );
    let records = [
        db_record(30, 6379, true, b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n", 1_500_000, Some((1, 1))),
        db_record(30, 6379, false, b"$-1\r\n", 1_600_000, None),
        // (a later call of the same connection, sent outside any request)
        db_record(30, 6379, true, b"*1\r\n$4\r\nPING\r\n", 5_000_000, None),
        db_record(30, 6379, false, b"+PONG\r\n", 5_100_000, None),
    ];
    let out = run_records(&mut rig, vec![server], &records);
    assert_eq!(out.len(), 3, "{out:?}");
    let srv = out.iter().find(|p| p.span.kind == SpanKind::Server).expect("the server span");
    let get = out.iter().find(|p| p.span.name == "GET").expect("the GET span");
    let ping = out.iter().find(|p| p.span.name == "PING").expect("the PING span");
    assert_eq!(get.span.kind, SpanKind::Client);
    assert_eq!(get.span.trace_id, 0x11111111111111111111111111111111);
    assert_eq!((get.span.trace_id, get.span.parent_span_id), (srv.span.trace_id, srv.span.span_id));
    assert_eq!(ping.span.parent_span_id, 0);
    assert_ne!(ping.span.trace_id, srv.span.trace_id);
    assert_ne!(ping.span.span_id, get.span.span_id);
    assert_eq!(rig.t.held(), 0);
}

/// A database call its thread made while serving several requests (the
/// kernel could not link it: `unlinked`) carries no `traceparent` to be
/// matched: it goes out at once, in a trace of its own, never held.
#[test]
fn an_unlinked_database_call_is_not_held() {
    let mut rig = Rig::new(|_| {});
    let mut send = db_record(40, 6379, true, b"*1\r\n$4\r\nPING\r\n", 1_000_000, None);
    send.links = Links { parent: None, unlinked: true };
    let out = run_records(&mut rig, vec![], &[send, db_record(40, 6379, false, b"+PONG\r\n", 1_100_000, None)]);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].span.name.as_str(), out[0].span.parent_span_id), ("PING", 0));
    assert_eq!(rig.t.held(), 0);
}

// ------------------------------------------------------------- messaging

/// A broker's client goes through the stream table like a database's: an
/// MQTT 3.1.1 publisher (as captured against mosquitto, on its port)
/// makes a PRODUCER span a publish, named and attributed by the
/// messaging conventions, the one it sent while serving a request that
/// request's child, the others traces of their own; nothing of the
/// payloads is in them.
#[test]
fn mqtt_publishes_are_producer_spans_children_of_the_request_that_made_them() {
    let mut rig = Rig::new(|_| {});
    let server = event(
        Role::Server,
        1,
        1,
        b"GET /orders HTTP/1.1\r\ntraceparent: 00-11111111111111111111111111111111-2222222222222222-01\r\n\r\n",
        200,
    );
    let chunks = crate::messaging::testing::capture(include_str!("../messaging/testdata/mqtt311_publisher.txt"));
    let mut sends = 0;
    let records: Vec<RawStream> = chunks
        .iter()
        .enumerate()
        .map(|(i, (send, bytes))| {
            // the first PUBLISH (the second send: CONNECT first) while serving
            sends += usize::from(*send);
            let parent = (*send && sends == 2).then_some((1, 1));
            RawStream { start: i == 0, ..db_record(60, 1883, *send, bytes, 1_500_000 + i as u64 * 100_000, parent) }
        })
        .collect();
    let out = run_records(&mut rig, vec![server], &records);
    let srv = out.iter().find(|p| p.span.kind == SpanKind::Server).expect("the server span");
    let producers: Vec<&Produced> = out.iter().filter(|p| p.span.kind == SpanKind::Producer).collect();
    assert_eq!((out.len(), producers.len()), (4, 3), "{out:?}");
    for p in &producers {
        assert_eq!(p.span.name, "publish sensors/k1/temp");
        let ipc_schema::Call::Messaging(m) = &p.span.call else { panic!("a messaging call: {:?}", p.span.call) };
        assert_eq!(
            (m.system.as_str(), m.operation_type.as_deref(), m.destination.as_deref()),
            ("mqtt", Some("send"), Some("sensors/k1/temp"))
        );
        assert!(!format!("{:?}", p.span).contains("secret"), "{:?}", p.span);
    }
    assert_eq!((producers[0].span.trace_id, producers[0].span.parent_span_id), (srv.span.trace_id, srv.span.span_id));
    for p in &producers[1..] {
        assert_eq!(p.span.parent_span_id, 0);
        assert_ne!(p.span.trace_id, srv.span.trace_id);
    }
    assert_eq!(rig.t.streams.connections(), 1);
    assert_eq!(rig.t.held(), 0);
}

// ------------------------------------------------------------- messaging

/// Connection `n`'s records of a client run (`messaging/testdata/e2e_*.txt`),
/// as the kernel ships them for connection `conn` to the broker at
/// 10.0.0.5:9092, from `mono_ns` on; a send with `parent` is made while
/// serving that request.
fn kafka_records(file: &str, n: usize, conn: u64, mono_ns: u64, parent: Option<(u64, u32)>) -> Vec<RawStream> {
    kafka_capture(file, n)
        .into_iter()
        .enumerate()
        .map(|(i, (send, b))| db_record(conn, 9092, send, &b, mono_ns + i as u64 * 1000, parent))
        .collect()
}

/// Connection `n`'s records of a client run: (sent, bytes).
fn kafka_capture(file: &str, n: usize) -> Vec<(bool, Vec<u8>)> {
    let text = std::fs::read_to_string(format!("{}/src/messaging/testdata/{file}", env!("CARGO_MANIFEST_DIR"))).expect("testdata");
    let prefix = format!("{n} ");
    let lines = text.lines().filter_map(|l| l.strip_prefix(&prefix)).collect::<Vec<_>>().join("\n");
    crate::messaging::testing::capture(&lines)
}

/// The links of the one CONSUMER span of `out`.
fn consumer_links(out: &[Produced]) -> Vec<SpanLink> {
    let consumers: Vec<_> = out.iter().filter(|p| p.span.kind == SpanKind::Consumer).collect();
    assert_eq!(consumers.len(), 1, "{:?}", out.iter().map(|p| &p.span.name).collect::<Vec<_>>());
    consumers[0].span.links.clone()
}

/// The producer's node connection (5 sends, one record each, offsets 0-4,
/// each with a `traceparent` header) and the consumer's (one poll of
/// offsets 0-4): the poll links to the 5 traceparents the records
/// carried and to the 5 producer spans that sent them, by their offsets,
/// whichever of the two ringtail hears of first; a poll of messages
/// whose producer is not known links to none, counted.
#[test]
fn a_kafka_consumer_links_the_producer_spans_of_its_messages_by_their_offsets() {
    let header = SpanLink { trace_id: 0x0af7651916cd43dd8448eb211c80319c, span_id: 0xb7ad6b7169203331, trace_flags: 1 };
    // Producer first.
    let mut rig = Rig::new(|_| {});
    let out = run_records(&mut rig, vec![], &kafka_records("e2e_kafka_produce.txt", 4, 30, 1_000_000, None));
    let producers: Vec<SpanLink> = out
        .iter()
        .filter(|p| p.span.kind == SpanKind::Producer)
        .map(|p| SpanLink { trace_id: p.span.trace_id, span_id: p.span.span_id, trace_flags: 1 })
        .collect();
    assert_eq!(producers.len(), 5);
    let out = run_records(&mut rig, vec![], &kafka_records("e2e_kafka_consume.txt", 2, 31, 9_000_000, None));
    let links = consumer_links(&out);
    assert_eq!(links[..5], [header; 5], "the record headers' first");
    let mut by_offset = links[5..].to_vec();
    by_offset.sort_by_key(|l| l.span_id);
    let mut want = producers.clone();
    want.sort_by_key(|l| l.span_id);
    assert_eq!(by_offset, want);
    assert_eq!(rig.count("ringtail_links_refused_total", Some("producer_unknown")), 0.0);
    assert_eq!(rig.t.held(), 0);
    let poll = out.iter().find(|p| p.span.kind == SpanKind::Consumer).expect("the poll");
    assert_eq!(poll.span.call.messaging().and_then(|m| m.consumer_group.as_ref()), None, "no group was seen");

    // The consumer's coordinator connection first (JoinGroup, SyncGroup:
    // its group): its poll is of that group; its notes make no span.
    let mut rig = Rig::new(|_| {});
    let coordinator = kafka_records("e2e_kafka_consume.txt", 3, 32, 5_000_000, None);
    // (its OffsetCommit request: API key 8)
    let commit = kafka_capture("e2e_kafka_consume.txt", 3)
        .iter()
        .position(|(send, b)| *send && b.get(4..6) == Some(&[0, 8][..]))
        .expect("the commit");
    let notes = run_records(&mut rig, vec![], &coordinator[..commit]);
    assert!(notes.is_empty(), "{:?}", notes.iter().map(|p| &p.span.name).collect::<Vec<_>>());
    let out = run_records(&mut rig, vec![], &kafka_records("e2e_kafka_consume.txt", 2, 31, 9_000_000, None));
    let poll = out.iter().find(|p| p.span.kind == SpanKind::Consumer).expect("the poll");
    assert_eq!(poll.span.call.messaging().and_then(|m| m.consumer_group.as_ref()).map(|g| g.as_str()), Some("billing"));
    let out = run_records(&mut rig, vec![], &coordinator[commit..]);
    let names: Vec<_> = out.iter().map(|p| p.span.name.as_str()).collect();
    assert_eq!(names, ["commit orders"]);

    // The consumer first, while the producer's last three answers have
    // not come: it waits for them (its batch is not acknowledged), then
    // links all five.
    let mut rig = Rig::new(|_| {});
    let produce = kafka_records("e2e_kafka_produce.txt", 4, 30, 1_000_000, None);
    // (the connection's records up to its second Produce's answer)
    let split = produce.iter().enumerate().filter(|(_, r)| !r.send).nth(2).map(|(i, _)| i + 1).expect("answers");
    let early = run_records(&mut rig, vec![], &produce[..split]);
    assert_eq!(early.iter().filter(|p| p.span.kind == SpanKind::Producer).count(), 2);
    let out = run_records(&mut rig, vec![], &kafka_records("e2e_kafka_consume.txt", 2, 31, 9_000_000, None));
    assert!(out.iter().all(|p| p.span.kind != SpanKind::Consumer), "it waits");
    assert_eq!(rig.t.held(), 1);
    let consumer_batch = rig.seq;
    let late = run_records(&mut rig, vec![], &produce[split..]);
    let links = consumer_links(&late);
    let consumer = late.iter().find(|p| p.span.kind == SpanKind::Consumer).expect("the poll");
    assert_eq!(consumer.origin, (INST, consumer_batch), "acknowledged with the batch it came in");
    assert_eq!(links.len(), 10);
    let mut by_offset = links[5..].to_vec();
    by_offset.sort_by_key(|l| l.span_id);
    let mut want: Vec<SpanLink> = early
        .iter()
        .chain(&late)
        .filter(|p| p.span.kind == SpanKind::Producer)
        .map(|p| SpanLink { trace_id: p.span.trace_id, span_id: p.span.span_id, trace_flags: 1 })
        .collect();
    want.sort_by_key(|l| l.span_id);
    assert_eq!(by_offset, want);
    assert_eq!(rig.t.held(), 0);

    // No producer of these messages here: no link but the headers', no wait.
    let mut rig = Rig::new(|_| {});
    let out = run_records(&mut rig, vec![], &kafka_records("e2e_kafka_consume.txt", 2, 31, 9_000_000, None));
    assert_eq!(consumer_links(&out), [header; 5]);
    assert_eq!(rig.count("ringtail_links_refused_total", Some("producer_unknown")), 5.0);
}

/// A send made while serving a request waits for that request's span (its
/// trace); the poll of its message waits for the send, and links to it in
/// the request's trace. A producer that never comes: the poll goes out
/// after `parent_wait` with what is known, the rest counted.
#[test]
fn a_kafka_consumer_waits_for_a_producer_span_that_waits_for_its_parent() {
    let header = SpanLink { trace_id: 0x0af7651916cd43dd8448eb211c80319c, span_id: 0xb7ad6b7169203331, trace_flags: 1 };
    let mut rig = Rig::new(|s| s.pipeline.parent_wait = Duration::from_millis(50));
    let produce = kafka_records("e2e_kafka_produce.txt", 4, 30, 1_000_000, Some((1, 1)));
    let out = run_records(&mut rig, vec![], &produce);
    assert!(out.iter().all(|p| p.span.kind != SpanKind::Producer), "held for request (1, 1)");
    let out = run_records(&mut rig, vec![], &kafka_records("e2e_kafka_consume.txt", 2, 31, 9_000_000, None));
    assert!(out.iter().all(|p| p.span.kind != SpanKind::Consumer), "held for its producers");
    let server = event(Role::Server, 1, 1, b"POST /order HTTP/1.1\r\n\r\n", 201);
    let out = rig.run(vec![server]);
    let trace = out.iter().find(|p| p.span.kind == SpanKind::Server).expect("the request").span.trace_id;
    assert_eq!(out.iter().filter(|p| p.span.kind == SpanKind::Producer && p.span.trace_id == trace).count(), 5);
    let links = consumer_links(&out);
    assert_eq!(links.iter().filter(|l| l.trace_id == trace).count(), 5, "{links:?}");
    assert_eq!(rig.t.held(), 0);

    // Two sends seen, a poll of five: it waits for the other three, which
    // never come.
    let mut rig = Rig::new(|s| s.pipeline.parent_wait = Duration::from_millis(50));
    let produce = kafka_records("e2e_kafka_produce.txt", 4, 30, 1_000_000, None);
    let split = produce.iter().enumerate().filter(|(_, r)| !r.send).nth(2).map(|(i, _)| i + 1).expect("answers");
    run_records(&mut rig, vec![], &produce[..split]);
    let out = run_records(&mut rig, vec![], &kafka_records("e2e_kafka_consume.txt", 2, 31, 9_000_000, None));
    assert!(out.is_empty() || out.iter().all(|p| p.span.kind != SpanKind::Consumer));
    assert!(rig.t.next_expiry().is_some());
    let mut out = Vec::new();
    rig.t.expire(Instant::now() + Duration::from_millis(100), &mut out);
    assert_eq!(consumer_links(&out).iter().filter(|l| **l != header).count(), 2, "two producers'");
    assert_eq!(rig.count("ringtail_links_refused_total", Some("producer_unknown")), 3.0);
    assert_eq!(rig.t.held(), 0);
}
