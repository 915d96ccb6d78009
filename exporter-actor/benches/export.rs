//! How many spans per second one exporter-actor sends over OTLP/gRPC to a
//! local receiver, and its CPU per span: decode a span batch (msgpack),
//! record the duration histograms, encode the OTLP request and send it
//! through the exporter's own trace queue (one request per batch, a few at
//! a time, as the exporter-actor does), until every span is acknowledged.
//! The receiver is rotel from `.venv` (`./ringtail.sh test` installs it);
//! its own CPU is not counted.
//!
//! `cargo bench -p exporter-actor --bench export` (figures go to BENCHMARKS.md);
//! `BENCH_PROTOCOL=http/protobuf` exports over HTTP instead of gRPC,
//! `BENCH_SPANS=grpc` sends gRPC spans (HTTP/2, the stable RPC
//! conventions' attributes, recorded in the RPC histograms) instead of
//! HTTP/1.1 ones, `BENCH_SPANS=edges` HTTP/1.1 server spans that each
//! complete a service-graph edge (their caller's end on this host: the
//! service graph's most costly case), `BENCH_GRAPH=0` records no service
//! graph (`metrics.service_graph = false`), `BENCH_SPAN_METRICS=1` also
//! records span metrics,
//! `BENCH_SECS` sets the measured time (5 s), `BENCH_STEPS=0` leaves out the
//! steps measured alone (for instruction counts under callgrind: two runs of
//! different lengths, the difference divided by the difference in "spans in
//! all").

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use exporter_actor::batch::Spans;
use exporter_actor::meters::Meters;
use exporter_actor::sinks::otlp::spans::TraceEncoder;
use exporter_actor::sinks::otlp::traces::TraceSink;
use exporter_actor::sinks::otlp::{OtlpConfig, Transport};
use ipc_schema::{Body, Call, Component, Envelope, HttpCall, Producer, RpcCall, ServiceResource, Span, SpanBatch, SpanKind, Value};
use ringtail_config::{OtlpProtocol, OtlpSettings};
use runtime_kit::counters::Registry;
use runtime_kit::profiling::cpu_time;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn batch(n: usize, k: u64, grpc: bool, edges: bool) -> SpanBatch {
    let resources: Vec<ServiceResource> = (0..4)
        .map(|i| ServiceResource {
            service_name: format!("svc-{i}"),
            service_instance_id: format!("host:{i}"),
            host_name: "host".into(),
            pid: 1000 + i,
            executable_name: "svc".into(),
            extra: vec![],
        })
        .collect();
    let routes = ["/", "/api/users/*", "/api/orders/*/items", "/static/app.js"];
    let spans: Vec<Span> = (0..n)
        .map(|i| Span {
            resource: (i % 4) as u32,
            kind: SpanKind::Server,
            trace_id: (u128::from(k) << 64) | i as u128 | 1 << 100,
            span_id: (k << 32) | i as u64 | 1,
            parent_span_id: 0,
            trace_flags: 1,
            name: format!("GET {}", routes[i % 4]),
            start_unix_ns: 1_700_000_000_000_000_000 + i as u64 * 1000,
            end_unix_ns: 1_700_000_000_000_200_000 + i as u64 * 1000,
            error: i % 50 == 0,
            server_address: Some("shop.example".into()),
            server_port: 8080,
            peer_address: "10.0.0.7".into(),
            peer_port: 40000 + (i % 1000) as u16,
            export_trace: true,
            export_metrics: true,
            attributes: Vec::new(),
            edge: edges.then(|| ipc_schema::Edge {
                peer_service: format!("svc-{}", (i + 1) % 4),
                peer_duration_ns: 250_000,
                peer_error: i % 50 == 0,
            }),
            links: Vec::new(),
            call: Call::Http(HttpCall {
                method: "GET".into(),
                method_original: None,
                route: Some(routes[i % 4].into()),
                path: "/api/users/12345".into(),
                query: None,
                scheme: "http".into(),
                status: if i % 50 == 0 { 500 } else { 200 },
                client_address: "10.0.0.7".into(),
                client_port: 40000 + (i % 1000) as u16,
                protocol_version: "1.1".into(),
                user_agent: Some("curl/8.5.0".into()),
            }),
        })
        .map(|mut s| {
            if grpc {
                grpc_span(&mut s);
            }
            s
        })
        .collect();
    SpanBatch::of(resources, &spans)
}

/// Makes `s` a gRPC server span as the span-actor makes them (stable
/// conventions): one call in 50 fails with UNAVAILABLE.
fn grpc_span(s: &mut Span) {
    let method = if s.span_id % 2 == 0 { "shop.Orders/Get" } else { "helloworld.Greeter/SayHello" };
    let error = s.error;
    s.name = method.into();
    let Call::Http(mut h) = s.call.clone() else { unreachable!("made an HTTP span") };
    h.method = "POST".into();
    h.path = format!("/{method}");
    h.route = Some(h.path.clone());
    h.status = 200;
    h.protocol_version = "2".into();
    let status = if error { "UNAVAILABLE" } else { "OK" };
    let str = |k: &str, v: &str| (k.to_owned(), Value::Str(v.to_owned()));
    s.attributes = vec![str("rpc.system.name", "grpc"), str("rpc.method", method), str("rpc.response.status_code", status)];
    if error {
        s.attributes.push(str("error.type", status));
    }
    s.attributes.push(str("network.protocol.name", "http"));
    let (service, short) = method.split_once('/').unwrap_or_default();
    s.call = Call::Rpc(
        h,
        RpcCall {
            stable: true,
            experimental: false,
            system: "grpc".into(),
            method: method.into(),
            service_method: Some((service.into(), short.into())),
            code: Some(if error { 14 } else { 0 }),
            status: Some(status.into()),
            error_type: error.then(|| status.into()),
        },
    );
}

fn rotel(port: u16, http: u16) -> Option<Child> {
    let venv = std::env::var_os("RINGTAIL_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv"));
    let out =
        Command::new(venv.join("bin/python")).args(["-c", "import rotel, os; print(os.path.dirname(rotel.__file__))"]).output().ok()?;
    let agent = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("rotel-agent");
    let dir = std::env::temp_dir().join(format!("bench-rotel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    Command::new(agent)
        .args([
            "start",
            "--exporter",
            "blackhole",
            "--otlp-grpc-endpoint",
            &format!("127.0.0.1:{port}"),
            "--otlp-http-endpoint",
            &format!("127.0.0.1:{http}"),
        ])
        .arg("--pid-file")
        .arg(dir.join("pid"))
        .arg("--log-file")
        .arg(dir.join("log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

fn main() {
    let (port, http) = (free_port(), free_port());
    let Some(mut receiver) = rotel(port, http) else {
        println!("SKIPPED: rotel is not installed in .venv (./ringtail.sh test installs it)");
        return;
    };
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let protocol = std::env::var("BENCH_PROTOCOL").unwrap_or_else(|_| "grpc".into());
    let steps = std::env::var("BENCH_STEPS").as_deref() != Ok("0");
    let grpc = std::env::var("BENCH_SPANS").as_deref() == Ok("grpc");
    let edges = std::env::var("BENCH_SPANS").as_deref() == Ok("edges");
    let derived = exporter_actor::meters::Derived {
        service_graph: std::env::var("BENCH_GRAPH").as_deref() != Ok("0"),
        span_metrics: std::env::var("BENCH_SPAN_METRICS").as_deref() == Ok("1"),
    };
    let secs: f64 = std::env::var("BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let result = tokio::task::LocalSet::new().block_on(&rt, async {
        let settings = match protocol.as_str() {
            "http/protobuf" => OtlpSettings {
                endpoint: Some(format!("http://127.0.0.1:{http}").parse().expect("endpoint")),
                protocol: OtlpProtocol::HttpProtobuf,
                ..Default::default()
            },
            _ => OtlpSettings { endpoint: Some(format!("http://127.0.0.1:{port}").parse().expect("endpoint")), ..Default::default() },
        };
        let cfg = OtlpConfig::resolve(&settings, &HashMap::new()).expect("config");
        let transport = Transport::new(cfg.traces_endpoint.as_ref().expect("endpoint"), &cfg).expect("transport");
        let registry = Registry::new(Component::ExporterActor, 1);
        let mut meters = Meters::new(Vec::new(), "host", &registry).derive(derived);
        let me = Producer { component: Component::SpanActor, instance: 3 };
        let inputs: Vec<Vec<u8>> = (0..16)
            .map(|k| ipc_schema::encode(&Envelope::new(me, k + 1, Body::Spans(batch(512, k, grpc, edges)))).expect("encode"))
            .collect();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let queue = 65_536;
        let mut sink = TraceSink::start(transport, &cfg, queue, &registry, done_tx);
        let mut seq = 0u64;
        let mut go = async |d: Duration, meters: &mut Meters, sink: &mut TraceSink| {
            let start = Instant::now();
            let cpu0 = cpu_time();
            let mut spans = 0u64;
            while start.elapsed() < d {
                for input in &inputs {
                    let env = ipc_schema::decode(input).expect("decode");
                    let Body::Spans(b) = env.body else { unreachable!() };
                    let b = Spans::of(&b).expect("reads");
                    // As the receiver does, waiting (not dropping) when the
                    // queue is full.
                    meters.record_batch(&b);
                    while sink.queued() + b.spans.len() > queue / 8 {
                        done_rx.recv().await.expect("worker");
                    }
                    seq += 1;
                    assert!(sink.submit((1, seq), &b, b.spans.len()));
                    spans += b.spans.len() as u64;
                }
            }
            while sink.queued() > 0 {
                done_rx.recv().await.expect("worker");
            }
            (spans, start.elapsed(), cpu_time() - cpu0)
        };
        go(Duration::from_secs_f64(secs / 5.0), &mut meters, &mut sink).await; // warm up
        let full = go(Duration::from_secs_f64(secs), &mut meters, &mut sink).await;
        assert_eq!(registry.counter("ringtail_spans_exported_total", &[]).get(), seq * 512, "every span exported");
        let mut encoder = TraceEncoder::new(Vec::new());
        // Each step alone, for scale (each is part of the figure above).
        let batches: Vec<SpanBatch> = inputs
            .iter()
            .map(|i| match ipc_schema::decode(i).expect("decode").body {
                Body::Spans(b) => b,
                _ => unreachable!(),
            })
            .collect();
        // Each step runs for at least half a second of CPU, three times; the
        // least is kept (other processes only ever add to it).
        let per_span = |f: &mut dyn FnMut(usize)| {
            if !steps {
                return f64::NAN;
            }
            (0..3)
                .map(|_| {
                    let cpu0 = cpu_time();
                    let mut n = 0u64;
                    while cpu_time() - cpu0 < Duration::from_millis(500) {
                        for (i, b) in batches.iter().enumerate() {
                            f(i);
                            n += b.len() as u64;
                        }
                    }
                    (cpu_time() - cpu0).as_secs_f64() * 1e6 / n as f64
                })
                .fold(f64::INFINITY, f64::min)
        };
        let decode = per_span(&mut |i| {
            std::hint::black_box(ipc_schema::decode(&inputs[i]).expect("decode"));
        });
        let read = per_span(&mut |i| {
            std::hint::black_box(Spans::of_own(&batches[i]).spans.len());
        });
        let record = per_span(&mut |i| meters.record_batch(&Spans::of_own(&batches[i])));
        let mut out = Vec::new();
        let encode = per_span(&mut |i| {
            encoder.encode(&Spans::of_own(&batches[i]), &mut out);
        });
        (full, seq * 512, [decode, read, record, encode])
    });
    let _ = receiver.kill();
    let _ = receiver.wait();
    let ((spans, wall, cpu), all, [decode_us, read_us, record_us, encode_us]) = result;
    println!("exporter-actor OTLP ({protocol}) export to a local receiver, batches of 512 spans:");
    println!("  spans/s (wall):       {:>12.0}", spans as f64 / wall.as_secs_f64());
    println!(
        "  CPU per span:         {:>12.3} µs  (this process: decode, histograms, encoding, OTLP client)",
        cpu.as_secs_f64() * 1e6 / spans as f64
    );
    println!("  spans/s per CPU-s:    {:>12.0}", spans as f64 / cpu.as_secs_f64());
    println!("  spans in all:         {all:>12}  (warm-up included: instruction counts per span divide by this)");
    println!("  of which decode:      {decode_us:>12.3} µs  (the message decoded: resources, span bytes kept)");
    println!("           read:        {read_us:>12.3} µs  (its spans read and checked in place: batch::Spans::of)");
    println!("           histograms:  {record_us:>12.3} µs  (Meters::record_batch alone)");
    println!("           encoding:    {encode_us:>12.3} µs  (ExportTraceServiceRequest alone)");
}
