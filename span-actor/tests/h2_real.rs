//! The h2 module against real HTTP/2 traffic, before the kernel half
//! exists: real clients and servers talk through a recording TCP proxy
//! whose reads stand in for the traced process's syscalls; a frame walker
//! here does what the kernel will do (frame headers, the payloads that
//! matter, capture cap) and feeds [`H2Conn`].
//!
//! - Node's `http2` server (h2c): Node's `http2` client (15 streams on one
//!   session, 12 of them concurrent) and `curl --http2-prior-knowledge`.
//! - Python `grpcio` server and client (from the test venv, `.venv` or `$RINGTAIL_TEST_VENV`): unary
//!   OK and error, server streaming, many concurrent calls, an
//!   unimplemented method.
//!
//! Each runs twice: whole capture (exact results) and a 24-byte capture
//! cap per frame (most header blocks cut: streams are dropped or lose
//! optional headers, but none carries a wrong method, path or status).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use span_actor::h2::{frames, grpc, Dir, DropReason, End, H2Conn, H2Stats, Piece, Role, StreamDone};

const PREFACE_LEN: usize = 24;

use ringtail_tests::skip;

/// One read of the proxy: connection, direction seen from the server,
/// monotonic time, bytes.
type Chunk = (usize, Dir, u64, Vec<u8>);

struct Recorder {
    chunks: Mutex<Vec<Chunk>>,
    epoch: Instant,
}

/// A proxy in front of `upstream` that records every read. Returns its
/// port and the copier threads (they end when both sides have closed).
/// The proxy's copier threads.
type Copiers = Arc<Mutex<Vec<thread::JoinHandle<()>>>>;

fn proxy(upstream: u16) -> (u16, Arc<Recorder>, Copiers) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let port = l.local_addr().expect("proxy address").port();
    let rec = Arc::new(Recorder { chunks: Mutex::new(Vec::new()), epoch: Instant::now() });
    let threads = Arc::new(Mutex::new(Vec::new()));
    let (r, t) = (rec.clone(), threads.clone());
    thread::spawn(move || {
        for (conn, client) in l.incoming().enumerate() {
            let Ok(client) = client else { return };
            let server = TcpStream::connect(("127.0.0.1", upstream)).expect("connect upstream");
            for (from, to, dir) in [
                (client.try_clone().expect("clone"), server.try_clone().expect("clone"), Dir::Recv),
                (server.try_clone().expect("clone"), client.try_clone().expect("clone"), Dir::Send),
            ] {
                let r = r.clone();
                t.lock().unwrap().push(thread::spawn(move || copy(conn, from, to, dir, &r)));
            }
        }
    });
    (port, rec, threads)
}

fn copy(conn: usize, mut from: TcpStream, mut to: TcpStream, dir: Dir, rec: &Recorder) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).unwrap_or(0);
        if n == 0 {
            let _ = to.shutdown(Shutdown::Write);
            return;
        }
        {
            // Recorded before forwarding, under one lock: the order of the
            // recording is an order the two sides could have seen.
            let mut c = rec.chunks.lock().unwrap();
            c.push((conn, dir, rec.epoch.elapsed().as_nanos() as u64, buf[..n].to_vec()));
        }
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// What the kernel does for one direction: walk frame headers across
/// syscalls, capture up to `cap` payload bytes of the frames whose payload
/// matters, report the rest of those payloads as lost.
struct Walker {
    skip: usize,
    header: Vec<u8>,
    remaining: u32,
    needed: bool,
    captured: usize,
    cap: usize,
}

impl Walker {
    fn new(preface: bool, cap: usize) -> Self {
        Walker { skip: if preface { PREFACE_LEN } else { 0 }, header: Vec::new(), remaining: 0, needed: false, captured: 0, cap }
    }

    fn payload(&mut self, bytes: &[u8], out: &mut Vec<Piece>, first: Option<[u8; 9]>) {
        let keep = if self.needed { bytes.len().min(self.cap - self.captured) } else { 0 };
        self.captured += keep;
        let lost = if self.needed { bytes.len() - keep } else { 0 };
        if let Some(h) = first {
            out.push(Piece::Frame {
                typ: h[3],
                flags: h[4],
                stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
                len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
                payload: bytes[..keep].to_vec(),
            });
        } else if keep > 0 {
            out.push(Piece::More { payload: bytes[..keep].to_vec() });
        }
        if lost > 0 {
            out.push(Piece::Lost { bytes: lost as u64 });
        }
    }

    fn walk(&mut self, mut b: &[u8]) -> Vec<Piece> {
        let mut out = Vec::new();
        let n = self.skip.min(b.len());
        self.skip -= n;
        b = &b[n..];
        while !b.is_empty() {
            if self.remaining > 0 {
                let take = (self.remaining as usize).min(b.len());
                self.payload(&b[..take], &mut out, None);
                self.remaining -= take as u32;
                b = &b[take..];
                continue;
            }
            let need = 9 - self.header.len();
            let take = need.min(b.len());
            self.header.extend_from_slice(&b[..take]);
            b = &b[take..];
            if self.header.len() < 9 {
                break;
            }
            let h: [u8; 9] = self.header[..].try_into().unwrap();
            self.header.clear();
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
            self.needed = frames::payload_needed(h[3]);
            self.captured = 0;
            let take = (len as usize).min(b.len());
            self.payload(&b[..take], &mut out, Some(h));
            self.remaining = len - take as u32;
            b = &b[take..];
        }
        out
    }
}

/// Replays the recording through the walker into one [`H2Conn`] per
/// connection (server side), then closes them.
fn replay(rec: &Recorder, cap: usize) -> (Vec<StreamDone>, H2Stats) {
    let chunks = rec.chunks.lock().unwrap();
    let conns = chunks.iter().map(|c| c.0).max().map_or(0, |m| m + 1);
    let mut out = Vec::new();
    let mut stats = H2Stats::default();
    for conn in 0..conns {
        let mut c = H2Conn::new(Role::Server, false);
        let mut recv = Walker::new(true, cap);
        let mut send = Walker::new(false, cap);
        let mut last = 0;
        for (_, dir, ts, bytes) in chunks.iter().filter(|c| c.0 == conn) {
            let pieces = match dir {
                Dir::Recv => recv.walk(bytes),
                Dir::Send => send.walk(bytes),
            };
            c.feed(*dir, *ts, &pieces, &mut out);
            last = *ts;
        }
        c.close(last + 1, &mut out);
        stats.add(&c.take_stats());
    }
    (out, stats)
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a server that prints its port on its first line.
fn server(mut cmd: Command) -> (Kill, u16) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("start server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read port");
    let port = line.trim().parse().unwrap_or_else(|_| panic!("server printed {line:?}, not a port"));
    (Kill(child), port)
}

fn run(cmd: &mut Command, deadline: Duration) {
    let mut child = cmd.stdin(Stdio::null()).spawn().expect("start client");
    let until = Instant::now() + deadline;
    loop {
        if let Some(st) = child.try_wait().expect("wait client") {
            assert!(st.success(), "client failed: {st}");
            return;
        }
        assert!(Instant::now() < until, "client still running after {deadline:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn join_all(threads: &Mutex<Vec<thread::JoinHandle<()>>>, deadline: Duration) {
    let until = Instant::now() + deadline;
    loop {
        if threads.lock().unwrap().iter().all(|t| t.is_finished()) {
            return;
        }
        assert!(Instant::now() < until, "proxy connections still open after {deadline:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

const NODE_SERVER: &str = r#"
const http2 = require('http2');
const server = http2.createServer();
server.on('stream', (stream, headers) => {
  const p = headers[':path'];
  const status = p.startsWith('/missing') ? 404 : (headers[':method'] === 'POST' ? 201 : 200);
  stream.respond({ ':status': status, 'content-type': 'text/plain', 'x-path': p });
  stream.end('body of ' + p + '\n');
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
"#;

const NODE_CLIENT: &str = r#"
const http2 = require('http2');
const session = http2.connect(process.argv[1]);
const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
function req(path, method, body) {
  return new Promise((resolve, reject) => {
    const h = { ':path': path, ':method': method || 'GET', 'user-agent': 'node-h2-test', traceparent: tp };
    const r = session.request(h, { endStream: !body });
    if (body) r.end(body);
    r.on('response', () => {});
    r.on('data', () => {});
    r.on('end', resolve);
    r.on('error', reject);
  });
}
(async () => {
  await req('/a');
  await req('/b/c?x=1&y=2');
  await req('/post', 'POST', 'hello');
  const paths = [];
  for (let i = 0; i < 12; i++) paths.push(i % 4 === 3 ? '/missing/' + i : '/p/' + i + '?i=' + i);
  await Promise.all(paths.map((p) => req(p)));
  session.close();
})().catch((e) => { console.error(e); process.exit(1); });
"#;

#[test]
fn node_h2c_and_curl() {
    if !have("node") || !have("curl") {
        skip("node or curl missing");
        return;
    }
    let mut cmd = Command::new("node");
    cmd.args(["-e", NODE_SERVER]);
    let (_srv, upstream) = server(cmd);
    let (port, rec, threads) = proxy(upstream);
    let base = format!("http://127.0.0.1:{port}");
    // One session, sequential then 12 concurrent streams.
    run(Command::new("node").args(["-e", NODE_CLIENT, &base]), Duration::from_secs(20));
    // curl's encoder too (curl 7.88 fails when it reuses a prior-knowledge
    // connection, so one request per connection).
    for p in ["/curl?z=9", "/missing/curl"] {
        run(
            Command::new("curl").args(["-sS", "--http2-prior-knowledge", "-o", "/dev/null"]).arg(format!("{base}{p}")),
            Duration::from_secs(20),
        );
    }
    join_all(&threads, Duration::from_secs(10));

    let (out, stats) = replay(&rec, usize::MAX);
    assert_eq!(stats, H2Stats::default());
    let mut got: Vec<_> = out.iter().map(|d| (d.method.clone(), d.path.clone(), d.query.clone(), d.status)).collect();
    got.sort();
    let s = |m: &str, p: &str, q: Option<&str>, st: u16| (m.to_string(), p.to_string(), q.map(str::to_string), Some(st));
    let mut want = vec![
        s("GET", "/a", None, 200),
        s("GET", "/b/c", Some("x=1&y=2"), 200),
        s("POST", "/post", None, 201),
        s("GET", "/curl", Some("z=9"), 200),
        s("GET", "/missing/curl", None, 404),
    ];
    for i in 0..12 {
        if i % 4 == 3 {
            want.push(s("GET", &format!("/missing/{i}"), None, 404));
        } else {
            want.push(s("GET", &format!("/p/{i}"), Some(&format!("i={i}")), 200));
        }
    }
    want.sort();
    assert_eq!(got, want);
    for d in &out {
        assert_eq!(d.end, End::Complete);
        assert!(d.start_ns < d.end_ns);
        assert_eq!(d.scheme.as_deref(), Some("http"));
        assert_eq!(d.authority.as_deref(), Some(format!("127.0.0.1:{port}").as_str()));
        let curl = d.path.contains("curl");
        assert_eq!(d.user_agent.as_deref().is_some_and(|u| u.starts_with("curl/")), curl);
        assert_eq!(d.traceparent.is_some(), !curl);
        assert!(d.response_body_bytes > 0);
        assert!(!d.headers_incomplete);
    }
    assert_eq!(out.iter().find(|d| d.method == "POST").map(|d| d.request_body_bytes), Some(5));
    let ids: std::collections::BTreeSet<u32> = out.iter().map(|d| d.stream_id).collect();
    assert!(ids.contains(&29), "the node session carried 15 streams (1..=29): {ids:?}");

    never_wrong_when_cut(&rec, &out);
}

/// With a tiny capture cap, what comes out is a subset of the whole
/// capture's streams, each with the same method, path and status.
fn never_wrong_when_cut(rec: &Recorder, whole: &[StreamDone]) {
    let (cut, stats) = replay(rec, 24);
    assert!(stats.header_blocks_truncated > 0);
    for d in &cut {
        assert!(
            whole.iter().any(|w| w.stream_id == d.stream_id
                && w.method == d.method
                && w.path == d.path
                && w.query == d.query
                && w.status == d.status),
            "wrong stream out of cut blocks: {d:?}"
        );
    }
    let dropped: u64 = stats.dropped.iter().sum();
    assert_eq!(cut.len() as u64 + dropped, whole.len() as u64, "every stream out or counted: {stats:?}");
    assert_eq!(stats.dropped(DropReason::FramingLost), 0);
}

const GRPC_SERVER: &str = r#"
import sys, grpc
from concurrent import futures
def say(req, ctx):
    if req == b'missing':
        ctx.abort(grpc.StatusCode.NOT_FOUND, 'no such user')
    return b'hello ' + req
def stream(req, ctx):
    for i in range(5):
        yield b'part %d' % i
h = grpc.method_handlers_generic_handler('helloworld.Greeter', {
    'SayHello': grpc.unary_unary_rpc_method_handler(say),
    'Parts': grpc.unary_stream_rpc_method_handler(stream),
})
s = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
s.add_generic_rpc_handlers((h,))
port = s.add_insecure_port('127.0.0.1:0')
s.start()
print(port, flush=True)
s.wait_for_termination()
"#;

const GRPC_CLIENT: &str = r#"
import sys, grpc
ch = grpc.insecure_channel(sys.argv[1])
say = ch.unary_unary('/helloworld.Greeter/SayHello')
assert say(b'ann', timeout=10) == b'hello ann'
try:
    say(b'missing', timeout=10)
    sys.exit('expected NOT_FOUND')
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.NOT_FOUND, e
parts = list(ch.unary_stream('/helloworld.Greeter/Parts')(b'x', timeout=10))
assert len(parts) == 5, parts
futs = [say.future(b'u%d' % i, timeout=10) for i in range(20)]
assert all(f.result() == b'hello u%d' % i for i, f in enumerate(futs))
try:
    ch.unary_unary('/helloworld.Greeter/Nope')(b'', timeout=10)
    sys.exit('expected UNIMPLEMENTED')
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e
ch.close()
"#;

fn venv_python() -> Option<PathBuf> {
    let py = ringtail_tests::venv().join("bin/python");
    let ok = Command::new(&py).args(["-c", "import grpc"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    ok.then_some(py)
}

#[test]
fn grpcio_client_and_server() {
    let Some(py) = venv_python() else {
        skip(&format!("{} has no Python with grpcio (./ringtail.sh test installs it)", ringtail_tests::venv().display()));
        return;
    };
    let mut cmd = Command::new(&py);
    cmd.args(["-c", GRPC_SERVER]);
    let (_srv, upstream) = server(cmd);
    let (port, rec, threads) = proxy(upstream);
    run(Command::new(&py).args(["-c", GRPC_CLIENT, &format!("127.0.0.1:{port}")]), Duration::from_secs(30));
    join_all(&threads, Duration::from_secs(10));

    let (out, stats) = replay(&rec, usize::MAX);
    assert_eq!(stats, H2Stats::default());
    assert_eq!(out.len(), 24, "{out:#?}");
    let mut by_status = std::collections::BTreeMap::new();
    for d in &out {
        assert_eq!(d.method, "POST");
        assert_eq!(d.status, Some(200));
        assert_eq!(d.end, End::Complete);
        assert!(!d.headers_incomplete);
        let g = d.grpc.as_ref().expect("gRPC stream");
        assert_eq!(g.service.as_deref(), Some("helloworld.Greeter"));
        let o = grpc::outcome(d).expect("outcome");
        *by_status.entry((g.method.clone().unwrap(), g.status_code)).or_insert(0) += 1;
        match g.status_code {
            Some(0) => assert!(!o.is_error),
            Some(5) => {
                assert_eq!(g.message.as_deref(), Some("no such user"));
                assert!(!o.is_error, "NOT_FOUND is not a server error");
            }
            Some(12) => {
                assert!(o.is_error);
                assert_eq!(grpc::span_name(&o), "grpc");
            }
            s => panic!("unexpected grpc-status {s:?}"),
        }
    }
    let want: std::collections::BTreeMap<(String, Option<i32>), i32> = [
        (("SayHello".to_string(), Some(0)), 21),
        (("SayHello".to_string(), Some(5)), 1),
        (("Parts".to_string(), Some(0)), 1),
        (("Nope".to_string(), Some(12)), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_status, want);
    let parts = out.iter().find(|d| d.path.ends_with("/Parts")).unwrap();
    assert!(parts.response_body_bytes >= 5 * (5 + 6), "five length-prefixed messages");

    never_wrong_when_cut(&rec, &out);
}
