//! TLS servers for the HTTPS tests: a self-signed certificate made by the
//! test (`openssl req -x509`) and a Python server wrapped in `ssl`.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::{server, Proc, TempDir};

/// A self-signed certificate and key for localhost in `dir`.
pub fn certificate(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let st = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run openssl");
    assert!(st.success(), "openssl req failed");
    (cert.display().to_string(), key.display().to_string())
}

/// A Python HTTPS server (`ThreadingHTTPServer`, keep-alive): GET answers
/// 200 `hello` (404 under /missing), POST reads the body and answers 201.
/// Arguments: PORT CERT KEY [ADDRESS, 127.0.0.1 by default].
pub const PY_TLS_SERVER: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        code = 404 if self.path.startswith("/missing") else 200
        body = b"hello\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
addr = sys.argv[4] if len(sys.argv) > 4 else "127.0.0.1"
srv = http.server.ThreadingHTTPServer((addr, int(sys.argv[1])), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;

/// A Python TLS server: `source` run as `python3 SCRIPT PORT CERT KEY
/// EXTRA...` with a certificate made in a new directory (kept with the
/// server), listening on `port` when this returns.
pub fn python_tls(name: &str, source: &str, port: u16, extra: &[&str]) -> (TempDir, Proc) {
    let dir = TempDir::new("py-tls");
    let (cert, key) = certificate(&dir.0);
    let script = dir.join("server.py");
    std::fs::write(&script, source).expect("write server.py");
    let port_arg = port.to_string();
    let mut args = vec![script.to_str().expect("a UTF-8 path"), &port_arg, &cert, &key];
    args.extend_from_slice(extra);
    let srv = server(name, port, Path::new("python3"), &args);
    (dir, srv)
}

/// Runs curl quietly with `args` (its output to /dev/null). A curl started
/// after ringtail is traced from its first TLS call: the host's libssl
/// files have links of their own from the start (`probe-loader/src/attacher.rs`).
pub fn curl_status(args: &[&str]) -> std::process::ExitStatus {
    Command::new("curl").arg("-s").args(args).stdout(Stdio::null()).status().expect("run curl")
}
