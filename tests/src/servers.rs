//! Servers a test traces and its raw clients: `python3 -m http.server`,
//! nginx, mosquitto, any program as a server ([`server`]), and [`http_get`] /
//! [`raw_request`], so requests are exactly what the test says.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{time_scale, wait_port, Proc, TempDir};

/// `python3 -m http.server` on `port`, serving `dir`.
pub fn python_http_server(port: u16, dir: &Path) -> Proc {
    let p = Proc::spawn(
        "python http.server",
        Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(wait_port(port, Duration::from_secs(10)), "python http.server did not listen on {port}");
    p
}

/// A mosquitto (MQTT broker) of its own on `port` (loopback only, anyone
/// may connect), keeping nothing, its configuration in `dir`.
pub fn mosquitto(port: u16, dir: &TempDir) -> Proc {
    let conf = dir.join("mosquitto.conf");
    std::fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")).expect("write mosquitto.conf");
    let p = Proc::spawn("mosquitto", Command::new("mosquitto").args(["-c", &conf.display().to_string()]));
    assert!(wait_port(port, Duration::from_secs(10).mul_f64(time_scale())), "mosquitto did not listen on {port}");
    p
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

/// Sends raw bytes to 127.0.0.1:`port` and reads until the server closes.
pub fn raw_request(port: u16, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    raw_request_within(port, bytes, Duration::from_secs(10))
}

/// [`raw_request`] with its own read timeout (scaled by [`time_scale`]).
pub fn raw_request_within(port: u16, bytes: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(timeout.mul_f64(time_scale())))?;
    s.write_all(bytes)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(out)
}

/// How long a 1 s CPU profile may take to come back: it is symbolised from a
/// debug build (2–5 s here on an idle machine, over 10 s seen in a full run).
pub const PROFILE_TIME: Duration = Duration::from_secs(60);

/// `GET path` with `Connection: close` and extra header lines.
pub fn http_get(port: u16, path: &str, extra_headers: &[(&str, &str)]) -> std::io::Result<Response> {
    http_get_within(port, path, extra_headers, Duration::from_secs(10))
}

/// [`http_get`] with its own read timeout (scaled by [`time_scale`]), for
/// answers that take long to make: a CPU profile symbolised from a debug
/// build takes seconds more than its sampling time.
pub fn http_get_within(port: u16, path: &str, extra_headers: &[(&str, &str)], timeout: Duration) -> std::io::Result<Response> {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: ringtail-tests\r\nConnection: close\r\n");
    for (k, v) in extra_headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let out = raw_request_within(port, req.as_bytes(), timeout)?;
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok(Response { status, head, body: out.get(split + 4..).unwrap_or_default().to_vec() })
}

/// Starts `program args…` as a server and waits for its port.
pub fn server(name: &str, port: u16, program: &Path, args: &[&str]) -> Proc {
    let p = Proc::spawn(name, Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()));
    assert!(wait_port(port, Duration::from_secs(15)), "{name} did not listen on {port}");
    p
}

/// nginx on `port` (workers: 2) serving `root`; `extra` goes into the server block.
pub fn nginx(port: u16, root: &Path, extra: &str) -> Proc {
    nginx_with(port, root, 2, "", extra)
}

/// [`nginx`] with `workers` worker processes and `http_extra` in the http
/// block (an `upstream`, say).
pub fn nginx_with(port: u16, root: &Path, workers: u32, http_extra: &str, extra: &str) -> Proc {
    let dir = root.join(".nginx");
    std::fs::create_dir_all(dir.join("logs")).expect("nginx dir");
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            r#"worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    keepalive_requests 100000;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    {http_extra}
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location = /ok {{ return 200 "ok\n"; }}
        location = /redirect {{ return 302 /ok; }}
        location = /unavailable {{ return 503; }}
        location = /teapot {{ return 418; }}
        {extra}
    }}
}}
"#,
            dir = dir.display(),
            root = root.display()
        ),
    )
    .expect("write nginx.conf");
    let p = Proc::spawn(
        "nginx",
        Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(&dir)
            .arg("-g")
            .arg("daemon off;")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(wait_port(port, Duration::from_secs(10)), "nginx did not listen on {port}");
    p
}
