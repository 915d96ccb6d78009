//! Kubernetes for the tests: the stand-in API server
//! (`tests/fixtures/kube_apiserver.py`, the real list/watch protocol over
//! recorded object shapes, scripted here), a kubeconfig that reaches it, and
//! the k8s-actor run alone.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::{bin_dir, fixture, free_port, wait_port, Proc, TempDir};

/// The bearer token the stand-in asks for.
pub const TOKEN: &str = "ringtail-test-token";

/// One container of a pod as the stand-in renders it.
pub fn container(name: &str, id: &str, image: &str) -> Value {
    json!({"name": name, "id": id, "image": image})
}

/// A running stand-in API server, its state kept in a file so that it can
/// be killed and started again as the same cluster.
pub struct StandIn {
    proc: Option<Proc>,
    pub dir: TempDir,
    pub port: u16,
}

impl StandIn {
    /// A stand-in on a free port (not started: see [`StandIn::start`]).
    pub fn new() -> StandIn {
        StandIn { proc: None, dir: TempDir::new("kube"), port: free_port() }
    }

    /// Starts it (again) on its port with its state.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("apiserver.log")).expect("log");
        let p = Proc::spawn(
            "kube stand-in",
            Command::new("python3")
                .arg(fixture("kube_apiserver.py"))
                .arg("--port")
                .arg(self.port.to_string())
                .arg("--state")
                .arg(self.dir.join("state.json"))
                .arg("--token")
                .arg(TOKEN)
                .stdout(Stdio::null())
                .stderr(log),
        );
        self.proc = Some(p);
        assert!(wait_port(self.port, Duration::from_secs(10)), "the stand-in API server did not listen");
    }

    /// Kills it (SIGKILL: an outage, open watches cut).
    pub fn kill(&mut self) {
        drop(self.proc.take());
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("apiserver.log")).unwrap_or_default()
    }

    /// A kubeconfig that reaches it with its token: the k8s-actor's user's
    /// (`ringtail-k8s`), 0600, as the k8s-actor reads credentials only
    /// from a file no other unprivileged user may read.
    pub fn kubeconfig(&self) -> PathBuf {
        let path = self.dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: http://127.0.0.1:{}\nusers:\n- name: ringtail\n  user:\n    token: {TOKEN}\ncontexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: ringtail\ncurrent-context: stand-in\n",
                self.port
            ),
        )
        .expect("write kubeconfig");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod kubeconfig");
        if let Some((uid, gid)) = crate::k8s_actor_ids() {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown kubeconfig");
        }
        path
    }

    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to the stand-in");
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}", body.len())
            .expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let text = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        (status, serde_json::from_str(text).unwrap_or(Value::Null))
    }

    /// Adds or replaces a pod (see the fixture's doc for `desc`'s keys);
    /// returns the object as the API server now has it.
    pub fn pod(&self, desc: Value) -> Value {
        let (status, obj) = self.request("POST", "/_test/pod", Some(&desc));
        assert_eq!(status, 200, "{obj}");
        obj
    }

    /// Deletes a pod.
    pub fn delete(&self, namespace: &str, name: &str) {
        let (status, obj) = self.request("DELETE", &format!("/_test/pod/{namespace}/{name}"), None);
        assert_eq!(status, 200, "{obj}");
    }

    /// Adds a Job (owned by `cronjob` if given).
    pub fn job(&self, namespace: &str, name: &str, cronjob: Option<&str>) {
        let (status, obj) = self.request("POST", "/_test/job", Some(&json!({"namespace": namespace, "name": name, "cronjob": cronjob})));
        assert_eq!(status, 200, "{obj}");
    }

    /// Forgets the watch history: open watches get 410 Gone.
    pub fn expire(&self) {
        assert_eq!(self.request("POST", "/_test/expire", Some(&json!({}))).0, 200);
    }

    /// The API requests served so far.
    pub fn requests(&self) -> Vec<Value> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.write_all(b"GET /_test/requests HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("").lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// Edits the state file of a stopped stand-in (a change made while it
    /// was down, e.g. a pod deleted).
    pub fn edit_state(&self, f: impl FnOnce(&mut Value)) {
        assert!(self.proc.is_none(), "stop it first");
        let path = self.dir.join("state.json");
        let mut state: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("state")).expect("state json");
        f(&mut state);
        std::fs::write(&path, state.to_string()).expect("write state");
    }
}

impl Default for StandIn {
    fn default() -> Self {
        StandIn::new()
    }
}

/// The k8s-actor run alone (as the test's user), on a runtime directory of
/// its own.
pub struct Actor {
    pub proc: Proc,
    pub dir: TempDir,
}

impl Actor {
    /// Starts `ringtail-k8s-actor` with `[kubernetes]` settings `kubernetes`
    /// (TOML lines) and `env`.
    pub fn start(kubernetes: &str, env: &[(&str, &str)]) -> Actor {
        Actor::start_in(TempDir::new("k8sactor"), kubernetes, env)
    }

    /// [`Actor::start`] on the runtime directory `dir/run` (which may hold
    /// what an earlier run left).
    pub fn start_in(dir: TempDir, kubernetes: &str, env: &[(&str, &str)]) -> Actor {
        std::fs::create_dir_all(dir.join("run/actors")).expect("runtime dir");
        let cfg = dir.join("ringtail.toml");
        std::fs::write(&cfg, format!("[pipeline]\nruntime_dir = \"{}\"\n[kubernetes]\n{kubernetes}\n", dir.join("run").display()))
            .expect("config");
        let err = std::fs::File::create(dir.join("stderr")).expect("stderr");
        let mut cmd = Command::new(bin_dir().join("ringtail-k8s-actor"));
        cmd.arg("--config").arg(&cfg).stderr(err).stdout(Stdio::null()).env("RUST_LOG", "info").env_remove("KUBERNETES_SERVICE_HOST");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Actor { proc: Proc::spawn("k8s-actor", &mut cmd), dir }
    }

    /// The runtime directory.
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }
}
