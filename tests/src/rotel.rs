//! [`Rotel`]: a real OTLP collector (rotel, from PyPI in `.venv`) whose
//! processor hook writes every span and metric it receives as JSON lines;
//! [`attr`] and [`res_attr`] read the spans' attributes; [`assert_nowhere`]
//! checks that no secret reached anything ringtail wrote.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::{free_port, skip, venv, wait_port, workspace, Proc, Ringtail, TempDir, Value};

/// A real OTLP receiver.
pub struct Rotel {
    proc: Option<Proc>,
    dir: TempDir,
    /// The address it listens on.
    host: String,
    pub grpc: u16,
    pub http: u16,
}

impl Rotel {
    fn agent() -> Option<PathBuf> {
        let py = venv().join("bin/python");
        let out = Command::new(&py).args(["-c", "import rotel, os; print(os.path.dirname(rotel.__file__))"]).output().ok()?;
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("rotel-agent");
        p.exists().then_some(p)
    }

    /// True if rotel is installed; otherwise says the test is skipped.
    pub fn available() -> bool {
        let ok = Self::agent().is_some();
        if !ok {
            skip(&format!("rotel is not installed in {} (./ringtail.sh test installs it)", venv().display()));
        }
        ok
    }

    /// Starts rotel on two free ports (gRPC, HTTP).
    pub fn start() -> Rotel {
        let grpc = free_port();
        // Two calls may give the same port (each binds port 0 and lets go).
        let http = std::iter::repeat_with(free_port).find(|p| *p != grpc).expect("a second free port");
        Rotel::start_at("127.0.0.1", grpc, http)
    }

    /// Starts rotel listening on `host` (another host's ringtail exports to
    /// it), gRPC on `grpc`, HTTP on `http`.
    pub fn start_at(host: &str, grpc: u16, http: u16) -> Rotel {
        let mut r = Rotel { proc: None, dir: TempDir::new("rotel"), host: host.to_owned(), grpc, http };
        r.restart();
        r
    }

    /// (Re)starts the collector on the same ports, keeping what it received.
    pub fn restart(&mut self) {
        let agent = Self::agent().expect("rotel installed");
        let processor = workspace().join("tests/fixtures/rotel_processor.py");
        let log = std::fs::File::create(self.dir.join("rotel.out")).expect("rotel log");
        let p = Proc::spawn(
            "rotel",
            Command::new(agent)
                .args(["start", "--exporter", "blackhole", "--otlp-grpc-endpoint"])
                .arg(format!("{}:{}", self.host, self.grpc))
                .arg("--otlp-http-endpoint")
                .arg(format!("{}:{}", self.host, self.http))
                .arg("--otlp-with-trace-processor")
                .arg(&processor)
                .arg("--otlp-with-metrics-processor")
                .arg(&processor)
                .arg("--pid-file")
                .arg(self.dir.join("rotel.pid"))
                .arg("--log-file")
                .arg(self.dir.join("rotel.log"))
                .env("SPAN_OUT", self.dir.join("spans.jsonl"))
                .env("METRIC_OUT", self.dir.join("metrics.jsonl"))
                .stdout(log.try_clone().expect("dup log"))
                .stderr(log),
        );
        self.proc = Some(p);
        if !(wait_port(self.grpc, Duration::from_secs(60)) && wait_port(self.http, Duration::from_secs(5))) {
            let log = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            panic!("rotel did not start on {} and {}:\n{}\n{}", self.grpc, self.http, log("rotel.log"), log("rotel.out"));
        }
    }

    /// Stops the collector (SIGKILL: an outage, not a goodbye).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    fn read(&self, file: &str) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Value> {
        self.read("spans.jsonl")
    }

    /// Every metric received so far (one entry per metric per export).
    pub fn metrics(&self) -> Vec<Value> {
        self.read("metrics.jsonl")
    }
}

/// `(name, value)` of a span attribute, as a string.
pub fn attr(span: &Value, key: &str) -> Option<String> {
    span["attributes"].get(key).map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// A resource attribute of a span.
pub fn res_attr(span: &Value, key: &str) -> Option<String> {
    span["resource"].get(key).map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// No byte string of `secrets` in anything ringtail exported (to `rotel`)
/// or printed (`rt`'s stdout and log).
pub fn assert_nowhere(rotel: &Rotel, rt: &Ringtail, secrets: &[&str]) {
    let spans = serde_json::to_string(&rotel.spans()).unwrap_or_default();
    let metrics = serde_json::to_string(&rotel.metrics()).unwrap_or_default();
    let (stdout, log) = (rt.stdout(), rt.log());
    for secret in secrets {
        for (what, text) in [("spans", &spans), ("metrics", &metrics), ("stdout", &stdout), ("log", &log)] {
            assert!(!text.contains(secret), "{secret:?} is in ringtail's {what}");
        }
    }
}
