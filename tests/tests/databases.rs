//! Database calls read off the wire: real servers from Debian packages
//! (PostgreSQL, Redis), started by each test in its own directory on its
//! own port (`probe.db_ports`), real clients (psql, redis-cli, and Python's
//! psycopg and redis-py from PyPI), a real OTLP receiver. Exact spans with
//! the database conventions' attributes, and no value a client sent (a
//! parameter, a stored value, a literal) anywhere in what ringtail wrote.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ringtail_tests::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_millis(500);

/// Whether the tools a test needs are here (a loud skip otherwise).
fn ready(tools: &[&str]) -> bool {
    if !can_trace() {
        return false;
    }
    if !Rotel::available() {
        skip("the rotel OTLP receiver is not installed");
        return false;
    }
    for tool in tools {
        if !have(tool) && !Path::new(tool).exists() {
            skip(&format!("{tool} is not installed"));
            return false;
        }
    }
    true
}

/// ringtail on backend `b` exporting to `rotel`, tracing the processes
/// `exe_names` selects, reading database calls to `port`.
fn ringtail(b: &str, rotel: &Rotel, exe_names: &str, port: u16) -> Ringtail {
    ringtail_with(b, rotel, exe_names, &[port], "")
}

/// [`ringtail`] reading database calls to every port of `ports`, with
/// `extra` configuration (a Prometheus endpoint).
fn ringtail_with(b: &str, rotel: &Rotel, exe_names: &str, ports: &[u16], extra: &str) -> Ringtail {
    let ports = ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
    Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\ndb_ports = [{ports}]\n[pipeline]\nbatch_timeout = \"20ms\"\n\
         [discovery]\nexe_names = {exe_names}\n[export]\nstdout = true\n[export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n{extra}",
        rotel.grpc
    ))
}

/// What a database span is compared by: its name, operation, query text
/// and status code.
type DbKey = (String, Option<String>, Option<String>, Option<String>);

fn db_key(s: &Value) -> DbKey {
    (
        s["name"].as_str().unwrap_or_default().to_owned(),
        attr(s, "db.operation.name"),
        attr(s, "db.query.text"),
        attr(s, "db.response.status_code"),
    )
}

/// Keeps the spans whose operation is one of `names`.
fn ops<'a>(names: &'a [&'a str]) -> impl Fn(&Value) -> bool + 'a {
    move |s| attr(s, "db.operation.name").is_some_and(|op| names.contains(&op.as_str()))
}

/// Keeps the spans of process `pid` whose operation is not one of
/// `chatter` (what a client library says on connect).
fn of_pid<'a>(pid: u32, chatter: &'a [&'a str]) -> impl Fn(&Value) -> bool + 'a {
    move |s| {
        res_attr(s, "process.pid") == Some(pid.to_string())
            && !attr(s, "db.operation.name").is_some_and(|op| chatter.contains(&op.as_str()))
    }
}

fn k(name: &str, op: &str, text: Option<&str>, status: Option<&str>) -> DbKey {
    (name.to_owned(), Some(op.to_owned()), text.map(str::to_owned), status.map(str::to_owned))
}

/// Waits until the receiver holds the database spans of `system` that
/// `keep` keeps (see [`ops`], [`of_pid`]), as many as `want` says, lets more arrive for SETTLE, and
/// checks them against `want` exactly; returns them.
fn expect_db_spans(rotel: &Rotel, rt: &Ringtail, system: &str, keep: impl Fn(&Value) -> bool, want: &[(DbKey, usize)]) -> Vec<Value> {
    let ours = |s: &Value| attr(s, "db.system.name").as_deref() == Some(system) && keep(s);
    let n: usize = want.iter().map(|(_, n)| n).sum();
    wait_until(WAIT, || (rotel.spans().iter().filter(|s| ours(s)).count() >= n).then_some(())).unwrap_or_else(|| {
        panic!(
            "the receiver got {:?}\nstdout:\n{}\nlog:\n{}",
            rotel.spans().iter().filter(|s| attr(s, "db.system.name").is_some()).map(db_key).collect::<Vec<_>>(),
            rt.stdout(),
            rt.log()
        )
    });
    std::thread::sleep(SETTLE);
    let spans: Vec<Value> = rotel.spans().into_iter().filter(|s| ours(s)).collect();
    let mut got: BTreeMap<DbKey, usize> = BTreeMap::new();
    for s in &spans {
        *got.entry(db_key(s)).or_default() += 1;
    }
    let want: BTreeMap<DbKey, usize> = want.iter().cloned().collect();
    assert_eq!(got, want, "stdout:\n{}", rt.stdout());
    for s in &spans {
        assert_eq!(s["kind"], 3, "a database call is a CLIENT span: {s}");
        for key in ["http.request.method", "url.path", "url.scheme", "http.response.status_code"] {
            assert_eq!(attr(s, key), None, "{key} on a database span: {s}");
        }
    }
    spans
}

/// Whether a span's status is ERROR (the receiver writes its code).
fn is_error(s: &Value) -> bool {
    let status = s["status"].as_str().unwrap_or_default().to_lowercase();
    status.contains('2') || status.contains("error")
}

/// No byte string of `secrets` in anything ringtail exported or printed.
fn assert_nowhere(rotel: &Rotel, rt: &Ringtail, secrets: &[&str]) {
    let spans = serde_json::to_string(&rotel.spans()).unwrap_or_default();
    let metrics = serde_json::to_string(&rotel.metrics()).unwrap_or_default();
    let (stdout, log) = (rt.stdout(), rt.log());
    for secret in secrets {
        for (what, text) in [("spans", &spans), ("metrics", &metrics), ("stdout", &stdout), ("log", &log)] {
            assert!(!text.contains(secret), "{secret:?} is in ringtail's {what}");
        }
    }
}

/// A redis-server of its own on `port`, keeping nothing on disk.
fn redis_server(port: u16, dir: &TempDir) -> Proc {
    let p = Proc::spawn(
        "redis-server",
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", &dir.0.display().to_string()]),
    );
    assert!(wait_port(port, Duration::from_secs(10)), "redis-server did not listen on {port}");
    p
}

/// redis-py: a pipeline of 100 SETs (one write, 100 answers), then a
/// MULTI/EXEC transaction, on one connection.
const REDIS_PY: &str = r#"
import sys, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), protocol=2)
p = r.pipeline(transaction=False)
for i in range(100):
    p.set("key:%d" % i, "stored-secret-%d" % i)
assert all(p.execute())
t = r.pipeline(transaction=True)
t.incr("counter")
t.get("key:7")
assert t.execute() == [1, b"stored-secret-7"]
"#;

/// redis-cli and redis-py against a real redis-server: one CLIENT span per
/// command (a pipeline of 100 is 100 spans, paired with their answers in
/// order; MULTI, each queued command and EXEC are one each), an error reply
/// is the span's status code, and no stored value is exported.
fn redis_commands_and_pipelines(b: &str) {
    let python = venv_python("redis");
    if !ready(&["redis-server", "redis-cli"]) {
        return;
    }
    let Some(python) = python else {
        skip("redis-py is not installed in the test venv");
        return;
    };
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("redis");
    let _server = redis_server(port, &dir);
    let rt = ringtail(b, &rotel, "[\"^redis-cli$\", \"^python\"]", port);
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(args).output().expect("run redis-cli");
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(cli(&["SET", "greeting", "cli-secret-value"]).trim(), "OK");
    assert_eq!(cli(&["GET", "greeting"]).trim(), "cli-secret-value");
    assert!(cli(&["LPUSH", "greeting", "x"]).contains("WRONGTYPE"));
    let out = Command::new(&python).args(["-c", REDIS_PY, &port.to_string()]).output().expect("run python");
    assert!(out.status.success(), "redis-py: {out:?}");
    // (redis-py also says CLIENT SETINFO on connect, which this server
    // refuses: not counted here; its `incr` is INCRBY)
    let counted = ["SET", "GET", "LPUSH", "MULTI", "INCRBY", "EXEC"];
    let spans = expect_db_spans(
        &rotel,
        &rt,
        "redis",
        ops(&counted),
        &[
            (k("SET", "SET", Some("SET ? ?"), None), 101),
            (k("GET", "GET", Some("GET ?"), None), 2),
            (k("LPUSH", "LPUSH", Some("LPUSH ? ?"), Some("WRONGTYPE")), 1),
            (k("MULTI", "MULTI", Some("MULTI"), None), 1),
            (k("INCRBY", "INCRBY", Some("INCRBY ? ?"), None), 1),
            (k("EXEC", "EXEC", Some("EXEC"), None), 1),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "server.port"), Some(port.to_string()), "{s}");
        assert_eq!(attr(s, "db.namespace").as_deref(), Some("0"), "{s}");
    }
    let failed = spans.iter().find(|s| attr(s, "db.operation.name").as_deref() == Some("LPUSH")).expect("the LPUSH span");
    assert_eq!(attr(failed, "error.type").as_deref(), Some("WRONGTYPE"));
    assert!(is_error(failed), "span status ERROR: {failed}");
    assert_nowhere(&rotel, &rt, &["cli-secret-value", "stored-secret", "greeting", "key:7"]);
}

/// PostgreSQL's server binaries (Debian installs them off PATH).
fn pg_bin(tool: &str) -> String {
    let mut versions: Vec<_> = std::fs::read_dir("/usr/lib/postgresql").into_iter().flatten().flatten().map(|e| e.path()).collect();
    versions.sort();
    versions.last().map(|v| v.join("bin").join(tool).display().to_string()).unwrap_or_else(|| tool.to_owned())
}

/// A PostgreSQL cluster of its own (trust authentication, no fsync) on
/// `port`, run by the `postgres` user the package made.
fn postgres_server(port: u16, dir: &TempDir) -> Proc {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let st = Command::new("chown").args(["-R", "postgres:postgres", &dir.0.display().to_string()]).status().expect("chown");
    assert!(st.success());
    let st = Command::new("runuser")
        .args(["-u", "postgres", "--", &pg_bin("initdb"), "-D", &data.display().to_string(), "--auth=trust", "-U", "postgres"])
        .args(["--no-sync", "-E", "UTF8"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run initdb");
    assert!(st.success(), "initdb failed");
    let p = Proc::spawn(
        "postgres",
        Command::new("runuser").args(["-u", "postgres", "--", &pg_bin("postgres"), "-D", &data.display().to_string()]).args([
            "-p",
            &port.to_string(),
            "-k",
            &dir.0.display().to_string(),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
        ]),
    );
    assert!(wait_port(port, Duration::from_secs(30)), "postgres did not listen on {port}");
    p
}

/// psycopg: a query with a bound parameter (the extended protocol), then a
/// pipeline of seven (the last two through a named prepared statement:
/// psycopg prepares a query it has run five times), in one transaction.
const PSYCOPG: &str = r#"
import sys, psycopg
with psycopg.connect(host="127.0.0.1", port=int(sys.argv[1]), user="postgres", dbname="postgres", sslmode="disable") as c:
    assert c.execute("SELECT %s::int + 1", (42424242,)).fetchone() == (42424243,)
    with c.pipeline():
        curs = [c.execute("SELECT %s::text", ("param-secret-%d" % i,)) for i in range(7)]
    assert [cur.fetchone()[0] for cur in curs] == ["param-secret-%d" % i for i in range(7)]
"#;

/// psql (simple queries: a literal, a 10,000-row result, a syntax error)
/// and psycopg (bound parameters, a pipeline, prepared statements) against
/// a real PostgreSQL: one CLIENT span per query, sanitized text, the
/// SQLSTATE of the error, the row count of the large result, and no
/// literal or parameter value anywhere.
fn postgres_psql_and_psycopg(b: &str) {
    let python = venv_python("psycopg");
    if !ready(&["psql", "runuser", &pg_bin("postgres")]) {
        return;
    }
    let Some(python) = python else {
        skip("psycopg is not installed in the test venv");
        return;
    };
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("postgres");
    let _server = postgres_server(port, &dir);
    let rt = ringtail(b, &rotel, "[\"^psql$\", \"^python\"]", port);
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "postgres", "-X", "-q"])
        .args(["-c", "SELECT 1", "-c", "SELECT count(*) FROM pg_class WHERE relname = 'literal-secret'"])
        .args(["-c", "SELECT g FROM generate_series(1, 10000) g", "-c", "SELEC 1"])
        .output()
        .expect("run psql");
    assert!(String::from_utf8_lossy(&out.stderr).contains("syntax error"), "psql: {out:?}");
    let out = Command::new(&python).args(["-c", PSYCOPG, &port.to_string()]).output().expect("run python");
    assert!(out.status.success(), "psycopg: {out:?}");
    let spans = expect_db_spans(
        &rotel,
        &rt,
        "postgresql",
        |_| true,
        &[
            (k("SELECT", "SELECT", Some("SELECT ?"), None), 1),
            (k("SELECT pg_class", "SELECT", Some("SELECT count(*) FROM pg_class WHERE relname = ?"), None), 1),
            (k("SELECT generate_series", "SELECT", Some("SELECT g FROM generate_series(?, ?) g"), None), 1),
            // (not an operation the conventions know: named by the system)
            (("postgresql".into(), None, Some("SELEC ?".into()), Some("42601".into())), 1),
            (k("BEGIN", "BEGIN", Some("BEGIN"), None), 1),
            (k("SELECT", "SELECT", Some("SELECT $1::int + ?"), None), 1),
            (k("SELECT", "SELECT", Some("SELECT $1::text"), None), 7),
            (k("COMMIT", "COMMIT", Some("COMMIT"), None), 1),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "server.port"), Some(port.to_string()), "{s}");
        assert_eq!(attr(s, "db.namespace").as_deref(), Some("postgres"), "{s}");
    }
    let big = spans.iter().find(|s| attr(s, "db.query.text").is_some_and(|t| t.contains("generate_series"))).expect("the large result");
    assert_eq!(attr(big, "db.response.returned_rows").as_deref(), Some("10000"), "{big}");
    let failed = spans.iter().find(|s| attr(s, "db.response.status_code").is_some()).expect("the failed query");
    assert_eq!(attr(failed, "error.type").as_deref(), Some("42601"));
    assert!(is_error(failed), "span status ERROR: {failed}");
    assert_nowhere(&rotel, &rt, &["literal-secret", "42424242", "param-secret"]);
}

on_both_backends!(redis_commands_and_pipelines, postgres_psql_and_psycopg);
