//! Database calls read off the wire: real servers from Debian packages
//! (PostgreSQL, Redis), started by each test in its own directory on its
//! own port (`probe.stream_ports`), real clients (psql, redis-cli, and Python's
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
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\nstream_ports = [{ports}]\n[pipeline]\nbatch_timeout = \"20ms\"\n\
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
    if !ready_to_trace(&["redis-server", "redis-cli"]) {
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
    postgres_server_with(port, dir, &[])
}

/// [`postgres_server`] with more settings (`ssl=on`), each given as `-c`.
fn postgres_server_with(port: u16, dir: &TempDir, settings: &[&str]) -> Proc {
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
        Command::new("runuser")
            .args(["-u", "postgres", "--", &pg_bin("postgres"), "-D", &data.display().to_string()])
            .args(["-p", &port.to_string(), "-k", &dir.0.display().to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(settings.iter().flat_map(|c| ["-c", c])),
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
    if !ready_to_trace(&["psql", "runuser", &pg_bin("postgres")]) {
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

/// A MariaDB server of its own on `port` (no privilege tables: any user,
/// no password), its data in `dir`, run by the `mysql` user the package
/// made.
fn mariadb_server(port: u16, dir: &TempDir) -> Proc {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let st = Command::new("chown").args(["-R", "mysql:mysql", &dir.0.display().to_string()]).status().expect("chown");
    assert!(st.success());
    let out = Command::new("mariadb-install-db")
        .args(["--no-defaults", "--user=mysql", "--auth-root-authentication-method=normal", "--skip-test-db"])
        .arg(format!("--datadir={}", data.display()))
        .output()
        .expect("run mariadb-install-db");
    assert!(out.status.success(), "mariadb-install-db failed: {out:?}");
    let p = Proc::spawn(
        "mariadbd",
        Command::new("mariadbd")
            .args(["--no-defaults", "--user=mysql", "--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-name-resolve"])
            // (the hostile test's connections must not get 127.0.0.1 blocked)
            .args(["--skip-log-bin", "--innodb-buffer-pool-size=16M", "--max-connect-errors=1000000"])
            .arg(format!("--port={port}"))
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.join("sock").display()))
            .arg(format!("--log-error={}", dir.join("error.log").display())),
    );
    assert!(wait_port(port, Duration::from_secs(30)), "mariadbd did not listen on {port}");
    p
}

/// PyMySQL: a parameter (PyMySQL quotes it into the query text), a change
/// of database (COM_INIT_DB), a five-row result; then, on the same
/// connection, a server-side prepared statement by hand (PyMySQL has no
/// COM_STMT_PREPARE; nor has any other client here): prepared once,
/// executed twice with a bound string, closed.
const PYMYSQL: &str = r#"
import struct, sys, pymysql
from pymysql.constants import COMMAND
c = pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root", database="mysql", autocommit=None)
with c.cursor() as cur:
    cur.execute("SELECT %s", ("param-secret-quoted",))
    assert cur.fetchone() == ("param-secret-quoted",)
    c.select_db("information_schema")
    assert cur.execute("SELECT TABLE_NAME FROM TABLES LIMIT 5") == 5

def result():
    # An OK, or a result set: columns, their definitions, EOF, rows, EOF.
    p = c._read_packet()
    if p.is_ok_packet():
        return []
    cols = [c._read_packet() for _ in range(p.read_length_encoded_integer())]
    assert c._read_packet().is_eof_packet()
    rows = []
    while not (p := c._read_packet()).is_eof_packet():
        rows.append(p.get_all_data())
    return rows

c._execute_command(COMMAND.COM_STMT_PREPARE, "SELECT CONCAT(?, 'literal-secret')")
p = c._read_packet()
stmt, ncols, nparams = struct.unpack("<xIHH", p.read(9))
assert (ncols, nparams) == (1, 1)
for n in (nparams, ncols):
    # the parameters' definitions, then the columns', each ended by an EOF
    for _ in range(n):
        c._read_packet()
    assert c._read_packet().is_eof_packet()
for i in range(2):
    v = b"param-secret-bound-%d" % i
    # flags 0, one iteration, no NULLs, types bound: VAR_STRING
    c._execute_command(COMMAND.COM_STMT_EXECUTE, struct.pack("<IBIBBBB", stmt, 0, 1, 0, 1, 0xFD, 0) + bytes([len(v)]) + v)
    rows = result()
    assert len(rows) == 1 and b"param-secret-bound-%d" % i in rows[0], rows
c._execute_command(COMMAND.COM_STMT_CLOSE, struct.pack("<I", stmt))
c.close()
"#;

/// The `mariadb` client and PyMySQL against a real MariaDB: one CLIENT
/// span per query (`db.system.name` `mariadb`, from the greeting),
/// sanitized text, the error number of a syntax error, `db.namespace`
/// following `USE` (COM_INIT_DB), a prepared statement's executions with
/// its text, and no literal or parameter anywhere.
fn mariadb_client_and_pymysql(b: &str) {
    let python = venv_python("pymysql");
    if !ready_to_trace(&["mariadb", "mariadbd", "mariadb-install-db", "chown"]) {
        return;
    }
    let Some(python) = python else {
        skip("pymysql is not installed in the test venv");
        return;
    };
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("mariadb");
    let _server = mariadb_server(port, &dir);
    let rt = ringtail(b, &rotel, "[\"^mariadb$\", \"^python\"]", port);
    let mariadb = |db: &[&str], sql: &str| {
        Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-P", &port.to_string(), "-u", "root"])
            .args(db)
            .args(["-e", sql])
            .output()
            .expect("run mariadb")
    };
    let out = mariadb(
        &["-D", "mysql"],
        "SELECT COUNT(*) FROM user WHERE User = 'literal-secret'; USE information_schema; SELECT COUNT(*) FROM TABLES WHERE TABLE_NAME = 'literal-secret'",
    );
    assert!(out.status.success(), "mariadb: {out:?}");
    let out = mariadb(&["-D", "mysql"], "SELEC 1");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ERROR 1064"), "mariadb: {out:?}");
    // PREPARE/EXECUTE statements are text queries (COM_QUERY) like any other.
    let out = mariadb(&[], "PREPARE s FROM 'SELECT ? + 1'; SET @v = 'literal-secret'; EXECUTE s USING @v; DEALLOCATE PREPARE s");
    assert!(out.status.success(), "mariadb: {out:?}");
    let out = Command::new(&python).args(["-c", PYMYSQL, &port.to_string()]).output().expect("run python");
    assert!(out.status.success(), "pymysql: {out:?}");
    let spans = expect_db_spans(
        &rotel,
        &rt,
        "mariadb",
        |_| true,
        &[
            (k("SELECT user", "SELECT", Some("SELECT COUNT(*) FROM user WHERE User = ?"), None), 1),
            // (the client's `USE` asks for the current database first)
            (k("SELECT", "SELECT", Some("SELECT DATABASE()"), None), 1),
            (k("SELECT TABLES", "SELECT", Some("SELECT COUNT(*) FROM TABLES WHERE TABLE_NAME = ?"), None), 1),
            (("mariadb".into(), None, Some("SELEC ?".into()), Some("1064".into())), 1),
            (k("PREPARE", "PREPARE", Some("PREPARE s FROM ?"), None), 1),
            (k("SET", "SET", Some("SET @v = ?"), None), 1),
            (k("EXECUTE", "EXECUTE", Some("EXECUTE s USING @v"), None), 1),
            (k("DEALLOCATE", "DEALLOCATE", Some("DEALLOCATE PREPARE s"), None), 1),
            // (PyMySQL's on connect)
            (k("SET", "SET", Some("SET NAMES utf8mb4"), None), 1),
            (k("SELECT", "SELECT", Some("SELECT ?"), None), 1),
            (k("SELECT TABLES", "SELECT", Some("SELECT TABLE_NAME FROM TABLES LIMIT ?"), None), 1),
            (k("SELECT", "SELECT", Some("SELECT CONCAT(?, ?)"), None), 2),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "server.port"), Some(port.to_string()), "{s}");
    }
    let namespace = |text: &str| {
        let s = spans.iter().find(|s| attr(s, "db.query.text").as_deref() == Some(text)).unwrap_or_else(|| panic!("no span {text:?}"));
        attr(s, "db.namespace")
    };
    assert_eq!(namespace("SELECT COUNT(*) FROM user WHERE User = ?").as_deref(), Some("mysql"));
    assert_eq!(namespace("SELECT COUNT(*) FROM TABLES WHERE TABLE_NAME = ?").as_deref(), Some("information_schema"));
    assert_eq!(namespace("SELECT ?").as_deref(), Some("mysql"));
    assert_eq!(namespace("SELECT TABLE_NAME FROM TABLES LIMIT ?").as_deref(), Some("information_schema"));
    assert_eq!(namespace("SELECT DATABASE()").as_deref(), Some("mysql"));
    assert_eq!(namespace("SELECT CONCAT(?, ?)").as_deref(), Some("information_schema"));
    assert_eq!(namespace("PREPARE s FROM ?"), None);
    let five = spans.iter().find(|s| attr(s, "db.query.text").is_some_and(|t| t.contains("LIMIT"))).expect("the five rows");
    assert_eq!(attr(five, "db.response.returned_rows").as_deref(), Some("5"), "{five}");
    let failed = spans.iter().find(|s| attr(s, "db.response.status_code").is_some()).expect("the failed query");
    assert_eq!(attr(failed, "error.type").as_deref(), Some("1064"));
    assert!(is_error(failed), "span status ERROR: {failed}");
    assert_nowhere(&rotel, &rt, &["literal-secret", "param-secret"]);
}

/// A memcached of its own on `port` (TCP only).
fn memcached_server(port: u16) -> Proc {
    let p =
        Proc::spawn("memcached", Command::new("memcached").args(["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0", "-u", "nobody"]));
    assert!(wait_port(port, Duration::from_secs(10)), "memcached did not listen on {port}");
    p
}

/// pymemcache (waiting for every answer: its default is `noreply`): two
/// sets, a get, a get of three keys (one missing), a delete of a missing
/// key, an incr of a value that is not a number.
const PYMEMCACHE: &str = r#"
import sys
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError
c = Client(("127.0.0.1", int(sys.argv[1])))
assert c.set("mc-key-1", "stored-secret-1", noreply=False)
assert c.set("mc-key-2", "stored-secret-2", noreply=False)
assert c.get("mc-key-1") == b"stored-secret-1"
assert c.get_many(["mc-key-1", "mc-key-2", "mc-missing"]) == {"mc-key-1": b"stored-secret-1", "mc-key-2": b"stored-secret-2"}
assert c.delete("mc-missing", noreply=False) is False
try:
    c.incr("mc-key-1", 1, noreply=False)
    raise SystemExit("incr of a string succeeded")
except MemcacheClientError:
    pass
"#;

/// pymemcache against a real memcached: one CLIENT span per command, one
/// `?` per key, the number of values a get returned, NOT_FOUND an
/// answer, CLIENT_ERROR an error; no key or value anywhere.
fn memcached_pymemcache(b: &str) {
    let python = venv_python("pymemcache");
    if !ready_to_trace(&["memcached"]) {
        return;
    }
    let Some(python) = python else {
        skip("pymemcache is not installed in the test venv");
        return;
    };
    let rotel = Rotel::start();
    let port = free_port();
    let _server = memcached_server(port);
    let rt = ringtail(b, &rotel, "[\"^python\"]", port);
    let out = Command::new(&python).args(["-c", PYMEMCACHE, &port.to_string()]).output().expect("run python");
    assert!(out.status.success(), "pymemcache: {out:?}");
    let spans = expect_db_spans(
        &rotel,
        &rt,
        "memcached",
        |_| true,
        &[
            (k("set", "set", Some("set ?"), None), 2),
            (k("get", "get", Some("get ?"), None), 1),
            (k("get", "get", Some("get ? ? ?"), None), 1),
            (k("delete", "delete", Some("delete ?"), None), 1),
            (k("incr", "incr", Some("incr ?"), Some("CLIENT_ERROR")), 1),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "server.port"), Some(port.to_string()), "{s}");
        let failed = attr(s, "db.operation.name").as_deref() == Some("incr");
        assert_eq!(is_error(s), failed, "only the incr failed: {s}");
        assert_eq!(attr(s, "error.type").is_some(), failed, "{s}");
    }
    let rows = |text: &str| {
        spans.iter().find(|s| attr(s, "db.query.text").as_deref() == Some(text)).and_then(|s| attr(s, "db.response.returned_rows"))
    };
    assert_eq!(rows("get ? ? ?").as_deref(), Some("2"));
    assert_eq!(rows("get ?").as_deref(), Some("1"));
    assert_nowhere(&rotel, &rt, &["stored-secret", "mc-key", "mc-missing"]);
}

/// memcached's own count of the calls it served (`stats`: get and set
/// commands, a key a get; flush and touch, which memcslap does not send).
fn memcached_calls(port: u16) -> u64 {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to memcached");
    std::io::Write::write_all(&mut c, b"stats\r\nquit\r\n").expect("ask memcached's stats");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut c, &mut text).expect("read memcached's stats");
    let stat = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    stat("cmd_get") + stat("cmd_set") + stat("cmd_flush") + stat("cmd_touch")
}

/// The database calls ringtail measured (one a span), and those it counted
/// as not traced for want of a record (`db_calls_lost`, the loader's sends
/// and the span-actor's calls in flight when it learned of a gap) or of an
/// answer (`db_unanswered`), once the counters stop moving.
fn db_calls_accounted(prom: u16) -> (f64, f64) {
    let read = || {
        let text = scrape(prom);
        let spans = metric(&text, "db_client_operation_duration_seconds_count", &[]);
        let lost = metric(&text, "ringtail_dropped_events_total", &[("reason", "db_calls_lost")]);
        let unanswered = metric(&text, "ringtail_dropped_events_total", &[("reason", "db_unanswered")]);
        (spans, lost + unanswered)
    };
    let mut last = read();
    let mut since = std::time::Instant::now();
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = read();
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        } else if since.elapsed() >= Duration::from_millis(2500) && now.0 > 0.0 {
            // (heartbeats every second: two and a half without a change)
            return now;
        }
    }
    panic!("ringtail's database counters still moving after {WAIT:?}: {last:?}\n{}", scrape(prom));
}

/// memcslap (Debian's libmemcached-tools) against a real memcached, paced
/// by the CPU it may use (15% of one: ~7,000 calls a second here, a set or
/// a get of a 0.1–5 KiB value each; at full speed the records outrun the
/// debug build's pipeline on a busy machine): under 1% of its calls are
/// not traced. Then the same while the loader is stopped long enough for
/// the ring to fill: records are lost, and every call is still a span or
/// counted as not traced (`db_calls_lost`: the loader's sends lost, the
/// span-actor's calls in flight when the next record told it of the gap;
/// `db_unanswered`). A memcslap connection's `quit`, which memcached does
/// not count, may be counted too when its record is lost.
fn memcached_under_load_every_call_is_a_span_or_counted(b: &str) {
    if !ready_to_trace(&["memcached", "memcslap"]) {
        return;
    }
    const CONNS: u64 = 2;
    let Some(paced) = cgroups::cpu_limited(&format!("ringtail-test-memcslap-{}", std::process::id()), 15) else {
        skip("no cgroup cpu controller to pace memcslap with");
        return;
    };
    let port = free_port();
    let prom = free_port();
    let _server = memcached_server(port);
    let rt = Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nstream_ports = [{port}]\n[discovery]\nexe_names = [\"^memcslap$\"]\n[export]\nstdout = false\n{}",
        prometheus(prom)
    ));
    let memcslap = || {
        paced
            .command("memcslap")
            .args(["-s", &format!("127.0.0.1:{port}"), "-t", "get", "-c", &CONNS.to_string(), "-e", "20000"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run memcslap")
    };
    let why = || {
        let text = scrape(prom);
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("reason=\"db_") || l.starts_with("ringtail_db_")).collect();
        format!("{}\nthe log's end:\n{}", lines.join("\n"), last_lines(&rt.log(), 20))
    };
    // Every call of a run is a span or counted (`before`: the counters
    // before it); returns (calls, spans, counted) of the run.
    let accounted = |before: (u64, u64, u64), out: std::process::Output| {
        assert!(out.status.success(), "memcslap: {out:?}");
        let calls = memcached_calls(port) - before.0;
        assert!(calls >= 60_000, "memcached served {calls} calls");
        let (spans, counted) = db_calls_accounted(prom);
        let (spans, counted) = (spans as u64 - before.1, counted as u64 - before.2);
        eprintln!(
            "memcslap: {calls} calls, {spans} spans, {counted} counted not traced ({:.3}%), {} records lost in all\n{}",
            100.0 * counted as f64 / calls as f64,
            metric(&scrape(prom), "ringtail_db_records_lost_total", &[]),
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            spans + counted >= calls,
            "{} of {calls} calls neither a span nor counted ({spans} spans, {counted} counted):\n{}",
            calls - spans - counted,
            why()
        );
        assert!(spans + counted <= calls + CONNS, "{spans} spans and {counted} counted for {calls} calls (and {CONNS} quits):\n{}", why());
        (calls, spans, counted)
    };
    let (calls, spans, counted) = accounted((0, 0, 0), memcslap().wait_with_output().expect("wait for memcslap"));
    assert!(counted * 100 < calls, "{counted} of {calls} calls not traced: over 1%\n{}", why());

    // The loader stopped while memcached serves 4,000 calls: their records
    // (~2.6 KiB a call) are more than the ring (4 MiB) holds.
    let before = (memcached_calls(port), spans, counted);
    let load = memcslap();
    assert!(wait_until(WAIT, || (memcached_calls(port) >= before.0 + 2_000).then_some(())).is_some(), "memcslap never got going");
    let loader = rt.pid("probe-loader").expect("the loader's pid");
    // SAFETY: signals to a child of this test's ringtail.
    unsafe { libc::kill(loader as i32, libc::SIGSTOP) };
    let at = memcached_calls(port);
    let filled = wait_until(WAIT, || (memcached_calls(port) >= at + 4_000).then_some(()));
    // SAFETY: as above.
    unsafe { libc::kill(loader as i32, libc::SIGCONT) };
    assert!(filled.is_some(), "memcslap stalled too");
    let (_, _, lost) = accounted(before, load.wait_with_output().expect("wait for memcslap"));
    assert!(lost > 0, "the stall lost nothing:\n{}", why());
}

/// psql over TLS (`sslmode=require`: libpq's SSLRequest, then libssl)
/// against a real PostgreSQL with a self-signed certificate: the spans are
/// those of the same queries in clear text (read from the plaintext
/// libssl's uprobes see).
fn postgres_psql_over_tls(b: &str) {
    if !ready_to_trace(&["psql", "runuser", "openssl", &pg_bin("postgres")]) {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("pgtls");
    let (cert, key) = certificate(&dir.0);
    let _server = postgres_server_with(port, &dir, &["ssl=on", &format!("ssl_cert_file={cert}"), &format!("ssl_key_file={key}")]);
    let rt = ringtail(b, &rotel, "[\"^psql$\"]", port);
    let out = Command::new("psql")
        .arg(format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=require"))
        .args(["-X", "-q", "-t", "-A", "-c", "SELECT 1", "-c", "SELECT count(*) FROM pg_class WHERE relname = 'literal-secret'"])
        .args(["-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", "-c", "SELEC 1"])
        .output()
        .expect("run psql");
    assert!(String::from_utf8_lossy(&out.stderr).contains("syntax error"), "psql: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().nth(2), Some("t"), "the connection is TLS: {out:?}");
    let spans = expect_db_spans(
        &rotel,
        &rt,
        "postgresql",
        |_| true,
        &[
            (k("SELECT", "SELECT", Some("SELECT ?"), None), 1),
            (k("SELECT pg_class", "SELECT", Some("SELECT count(*) FROM pg_class WHERE relname = ?"), None), 1),
            (k("SELECT pg_stat_ssl", "SELECT", Some("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), None), 1),
            (("postgresql".into(), None, Some("SELEC ?".into()), Some("42601".into())), 1),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "server.port"), Some(port.to_string()), "{s}");
        assert_eq!(attr(s, "db.namespace").as_deref(), Some("postgres"), "{s}");
    }
    assert_nowhere(&rotel, &rt, &["literal-secret"]);
}

/// A Prometheus endpoint on `port`, for [`ringtail_with`].
fn prometheus(port: u16) -> String {
    format!("[export.prometheus]\nlisten = \"127.0.0.1:{port}\"\n")
}

/// redis-py pub/sub: one connection subscribes, another publishes three
/// messages, the first reads them.
const REDIS_PUBSUB: &str = r#"
import sys, redis
port = int(sys.argv[1])
sub = redis.Redis(host="127.0.0.1", port=port, protocol=2).pubsub()
sub.subscribe("news-channel")
assert sub.get_message(timeout=5)["type"] == "subscribe"
pub = redis.Redis(host="127.0.0.1", port=port, protocol=2)
for i in range(3):
    assert pub.publish("news-channel", "pushed-secret-%d" % i) == 1
got = []
while len(got) < 3:
    m = sub.get_message(timeout=5)
    assert m is not None, got
    got.append(m["data"])
assert got == [b"pushed-secret-%d" % i for i in range(3)], got
sub.close()
"#;

/// redis-py pub/sub against a real redis-server: SUBSCRIBE (ended by its
/// confirmation) and the three PUBLISHes are calls; the three messages
/// pushed to the subscriber are not (counted `db_pushes_ignored`), and
/// their contents are nowhere.
fn redis_pubsub(b: &str) {
    let python = venv_python("redis");
    if !ready_to_trace(&["redis-server"]) {
        return;
    }
    let Some(python) = python else {
        skip("redis-py is not installed in the test venv");
        return;
    };
    let rotel = Rotel::start();
    let port = free_port();
    let prom = free_port();
    let dir = TempDir::new("redis");
    let _server = redis_server(port, &dir);
    let rt = ringtail_with(b, &rotel, "[\"^python\"]", &[port], &prometheus(prom));
    let out = Command::new(&python).args(["-c", REDIS_PUBSUB, &port.to_string()]).output().expect("run python");
    assert!(out.status.success(), "redis-py: {out:?}");
    // (redis-py says CLIENT SETINFO on each connection: not counted here)
    let spans = expect_db_spans(
        &rotel,
        &rt,
        "redis",
        |s| !attr(s, "db.operation.name").is_some_and(|op| op.starts_with("CLIENT")),
        &[(k("SUBSCRIBE", "SUBSCRIBE", Some("SUBSCRIBE ?"), None), 1), (k("PUBLISH", "PUBLISH", Some("PUBLISH ? ?"), None), 3)],
    );
    for s in &spans {
        assert!(!is_error(s), "{s}");
    }
    let pushes = || metric_value(prom, "ringtail_dropped_events_total", &[("reason", "db_pushes_ignored")]).filter(|n| *n >= 3.0);
    let pushes = wait_until(WAIT, pushes).unwrap_or_else(|| panic!("no db_pushes_ignored >= 3:\n{}", scrape(prom)));
    assert_eq!(pushes, 3.0, "{}", scrape(prom));
    assert_nowhere(&rotel, &rt, &["pushed-secret", "news-channel"]);
}

/// Hostile clients, seeded: to each server (PostgreSQL, Redis, MariaDB,
/// memcached), connections that send random bytes, random bytes after a
/// valid start, and valid messages cut short, then close.
const HOSTILE: &str = r#"
import random, socket, struct, sys
rng = random.Random(int(sys.argv[1]))
pg, rd, my, mc = (int(p) for p in sys.argv[2:6])
def talk(port, data, greeting=False):
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    try:
        if greeting:
            s.recv(65536)
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
    except OSError:
        pass
    finally:
        s.close()
def noise():
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000)))
def cut(b):
    return b[:rng.randint(1, len(b) - 1)]
params = b"user\0postgres\0database\0postgres\0\0"
startup = struct.pack("!ii", 8 + len(params), 196608) + params
query = b"Q" + struct.pack("!i", 13) + b"SELECT 1\0"
login = struct.pack("<IIB23x", 0x000FA685, 1 << 24, 33) + b"root\0\0"
login = struct.pack("<I", len(login))[:3] + b"\x01" + login
com_query = b"\x03SELECT 1"
com_query = struct.pack("<I", len(com_query))[:3] + b"\x00" + com_query
resp = b"*3\r\n$3\r\nSET\r\n$7\r\nhostile\r\n$5\r\nvalue\r\n"
mcset = b"set hostile 0 0 10\r\n0123456789\r\nget hostile\r\n"
servers = [
    (pg, False, [startup + query], [startup, startup + b"Q\x00\x01\x00\x00", b"\x00\x00\x00\x08\x04\xd2\x16\x2f"]),
    (rd, False, [resp], [b"*2\r\n$", b"*9999999\r\n", b"$-7\r\n"]),
    (my, True, [login + com_query], [login, com_query, b"\xff\xff\xff\x00"]),
    (mc, False, [mcset], [b"get ", b"set k 0 0 99999999\r\n", b"incr k\r\n"]),
]
for port, greeting, goods, starts in servers:
    for _ in range(10):
        talk(port, noise(), greeting)
        talk(port, rng.choice(starts) + noise(), greeting)
        talk(port, cut(rng.choice(goods)), greeting)
"#;

/// One good call to each server, after the hostile ones.
const GOOD: &str = r#"
import sys, psycopg, redis, pymysql
from pymemcache.client.base import Client
pg, rd, my, mc = (int(p) for p in sys.argv[1:5])
with psycopg.connect(host="127.0.0.1", port=pg, user="postgres", dbname="postgres", sslmode="disable", autocommit=True) as c:
    assert c.execute("SELECT 1").fetchone() == (1,)
assert redis.Redis(host="127.0.0.1", port=rd, protocol=2).get("absent") is None
c = pymysql.connect(host="127.0.0.1", port=my, user="root", autocommit=None)
with c.cursor() as cur:
    cur.execute("SELECT 1")
c.close()
assert Client(("127.0.0.1", mc)).get("absent") is None
"#;

/// Random bytes and truncated messages (seeded) to a real PostgreSQL,
/// Redis, MariaDB and memcached, then a good client: ringtail's processes
/// live on (none restarted), the good client's calls are its spans
/// exactly, and what the parsers could not follow is counted
/// (`ringtail_dropped_events_total{reason="db_*"}`).
fn hostile_bytes_to_every_server(b: &str) {
    let python = venv_python("psycopg, redis, pymysql, pymemcache");
    if !ready_to_trace(&["runuser", &pg_bin("postgres"), "redis-server", "mariadbd", "mariadb-install-db", "memcached"]) {
        return;
    }
    let Some(python) = python else {
        skip("psycopg, redis-py, pymysql or pymemcache is not installed in the test venv");
        return;
    };
    let rotel = Rotel::start();
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let prom = free_port();
    let (pg_dir, redis_dir, mariadb_dir) = (TempDir::new("postgres"), TempDir::new("redis"), TempDir::new("mariadb"));
    let _servers = [
        postgres_server(ports[0], &pg_dir),
        redis_server(ports[1], &redis_dir),
        mariadb_server(ports[2], &mariadb_dir),
        memcached_server(ports[3]),
    ];
    let rt = ringtail_with(b, &rotel, "[\"^python\"]", &ports, &prometheus(prom));
    let components = ["probe-loader", "span-actor", "exporter-actor"];
    let pids: Vec<_> = components.iter().map(|c| rt.pid(c).unwrap_or_else(|| panic!("{c}'s pid"))).collect();
    let port_args: Vec<String> = ports.iter().map(u16::to_string).collect();
    for seed in [1, 2] {
        let out = Command::new(&python).args(["-c", HOSTILE, &seed.to_string()]).args(&port_args).output().expect("run python");
        assert!(out.status.success(), "hostile client (seed {seed}): {out:?}");
    }
    let good = Command::new(&python).args(["-c", GOOD]).args(&port_args).spawn().expect("run python");
    let pid = good.id();
    let out = good.wait_with_output().expect("wait for python");
    assert!(out.status.success(), "good client: {out:?}");
    // (what redis-py and PyMySQL say on connect)
    let chatter = ["CLIENT SETINFO", "SET"];
    expect_db_spans(&rotel, &rt, "postgresql", of_pid(pid, &chatter), &[(k("SELECT", "SELECT", Some("SELECT ?"), None), 1)]);
    expect_db_spans(&rotel, &rt, "redis", of_pid(pid, &chatter), &[(k("GET", "GET", Some("GET ?"), None), 1)]);
    expect_db_spans(&rotel, &rt, "mariadb", of_pid(pid, &chatter), &[(k("SELECT", "SELECT", Some("SELECT ?"), None), 1)]);
    expect_db_spans(&rotel, &rt, "memcached", of_pid(pid, &chatter), &[(k("get", "get", Some("get ?"), None), 1)]);
    for (c, p) in components.iter().zip(&pids) {
        assert_eq!(rt.pid(c), Some(*p), "{c} restarted:\n{}", rt.log());
        assert!(Path::new(&format!("/proc/{p}")).exists(), "{c} is gone:\n{}", rt.log());
    }
    let text = scrape(prom);
    let db_drops: Vec<&str> =
        text.lines().filter(|l| l.starts_with("ringtail_dropped_events_total{") && l.contains("reason=\"db_")).collect();
    eprintln!("{}", db_drops.join("\n"));
    for reason in ["db_unknown_protocol", "db_unanswered", "db_desync", "db_too_large"] {
        let n = metric(&text, "ringtail_dropped_events_total", &[("reason", reason)]);
        assert!(n >= 1.0, "no {reason} counted:\n{text}");
    }
}

/// Issue 44: the session's quoting rule, as real servers say it. A
/// PostgreSQL started with `standard_conforming_strings = off` (its
/// ParameterStatus says so) and a MariaDB session set to
/// NO_BACKSLASH_ESCAPES (its OKs' status flags say so) run the statements
/// their clients escape for those rules; no literal reaches the exported
/// text, which keeps the code both rules agree on. Also Redis commands
/// that are no command (`_OTHER`, never their name) and memcached `quit`.
fn quoting_rules_and_names_follow_the_servers(b: &str) {
    if !ready_to_trace(&[
        "psql",
        "runuser",
        &pg_bin("postgres"),
        "mariadb",
        "mariadbd",
        "mariadb-install-db",
        "chown",
        "redis-cli",
        "redis-server",
    ]) {
        return;
    }
    let rotel = Rotel::start();
    let (pg_port, my_port, redis_port) = (free_port(), free_port(), free_port());
    let (pg_dir, my_dir, redis_dir) = (TempDir::new("pg-quoting"), TempDir::new("my-quoting"), TempDir::new("redis-names"));
    let _pg = postgres_server_with(pg_port, &pg_dir, &["standard_conforming_strings=off", "escape_string_warning=off"]);
    let _my = mariadb_server(my_port, &my_dir);
    let _redis = redis_server(redis_port, &redis_dir);
    let rt = ringtail_with(b, &rotel, "[\"^psql$\", \"^mariadb$\", \"^redis-cli$\"]", &[pg_port, my_port, redis_port], "");
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &pg_port.to_string(), "-U", "postgres", "-d", "postgres", "-X", "-q"])
        .args(["-c", "SELECT 'it\\'s PGSECRET here' AS a, 1 AS b", "-c", "SELECT E'\\'PGSECRET2' AS c"])
        .output()
        .expect("run psql");
    assert!(out.status.success(), "psql: {out:?}");
    // A GBK session (its client encoding): 乗 is 0x81 0x5C in GBK, its
    // second byte a backslash to anyone who reads bytes, not characters
    // (the first string ends at its second quote; read by bytes, at its
    // third, and the secret between would be code; a quote after them —
    // an escaped one in a third string, or one in a comment, as
    // PostgreSQL refuses `\'` in a client-only encoding — closes the
    // string a byte-wise reading opened, so that reading is not in doubt).
    let gbk = |s: &str| -> std::ffi::OsString {
        use std::os::unix::ffi::OsStringExt;
        let mut b = Vec::new();
        for c in s.chars() {
            match c {
                '乗' => b.extend([0x81, 0x5C]),
                c => b.extend(c.to_string().bytes()),
            }
        }
        std::ffi::OsString::from_vec(b)
    };
    let out = Command::new("psql")
        .env("PGCLIENTENCODING", "GBK")
        .args(["-h", "127.0.0.1", "-p", &pg_port.to_string(), "-U", "postgres", "-d", "postgres", "-X", "-q"])
        .arg("-c")
        .arg(gbk("SELECT E'乗' AS d, 'x PGSECRET3 x' AS e -- '"))
        .output()
        .expect("run psql");
    assert!(out.status.success(), "psql (GBK): {out:?}");
    let out = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", &my_port.to_string(), "-u", "root"])
        .args(["-e", "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'; SELECT 'C:\\' AS p, 'MYSECRET' AS q"])
        .output()
        .expect("run mariadb");
    assert!(out.status.success(), "mariadb: {out:?}");
    let out = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", &my_port.to_string(), "-u", "root", "--default-character-set=gbk", "-e"])
        .arg(gbk("SELECT '乗' AS g, 'x MYSECRET2 x' AS h, 'a\\'b' AS i"))
        .output()
        .expect("run mariadb");
    assert!(out.status.success(), "mariadb (gbk): {out:?}");
    let out = Command::new("redis-cli").args(["-p", &redis_port.to_string(), "REDISSECRET", "x"]).output().expect("run redis-cli");
    assert!(String::from_utf8_lossy(&out.stdout).contains("unknown command"), "redis-cli: {out:?}");
    // (the statements above: each has an alias; what the clients say on
    // their own has none)
    let aliased = |s: &Value| attr(s, "db.query.text").is_some_and(|t| t.contains(" AS "));
    expect_db_spans(
        &rotel,
        &rt,
        "postgresql",
        aliased,
        &[
            (k("SELECT", "SELECT", Some("SELECT ? AS a, ? AS b"), None), 1),
            (k("SELECT", "SELECT", Some("SELECT ? AS c"), None), 1),
            (k("SELECT", "SELECT", Some("SELECT ? AS d, ? AS e"), None), 1),
        ],
    );
    expect_db_spans(
        &rotel,
        &rt,
        "mariadb",
        aliased,
        &[
            (k("SELECT", "SELECT", Some("SELECT ? AS p, ? AS q"), None), 1),
            (k("SELECT", "SELECT", Some("SELECT ? AS g, ? AS h, ? AS i"), None), 1),
        ],
    );
    expect_db_spans(&rotel, &rt, "redis", ops(&["_OTHER"]), &[(("redis".into(), Some("_OTHER".into()), None, Some("ERR".into())), 1)]);
    assert_nowhere(&rotel, &rt, &["PGSECRET", "MYSECRET", "REDISSECRET"]);
}

on_both_backends!(
    quoting_rules_and_names_follow_the_servers,
    redis_commands_and_pipelines,
    postgres_psql_and_psycopg,
    mariadb_client_and_pymysql,
    memcached_pymemcache,
    postgres_psql_over_tls,
    redis_pubsub,
    hostile_bytes_to_every_server,
    memcached_under_load_every_call_is_a_span_or_counted,
);
