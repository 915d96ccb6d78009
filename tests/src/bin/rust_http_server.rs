//! A small std-only Rust HTTP/1.1 server for the capture tests: a thread per
//! connection, keep-alive, `/status/NNN` answers NNN, everything else 200.
//! Usage: rust_http_server PORT

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn serve(mut s: TcpStream) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let target = head.split(' ').nth(1).unwrap_or("/");
        let code: u16 = target.strip_prefix("/status/").and_then(|c| c.parse().ok()).unwrap_or(200);
        let lower = head.to_ascii_lowercase();
        let close = lower.contains("connection: close") || lower.lines().next().is_some_and(|l| l.ends_with("http/1.0"));
        let body = b"ok\n";
        let resp = format!("HTTP/1.1 {code} X\r\nContent-Length: {}\r\n\r\n", body.len());
        if s.write_all(resp.as_bytes()).and_then(|_| s.write_all(body)).is_err() || close {
            return;
        }
    }
}

fn main() {
    let port = std::env::args().nth(1).expect("usage: rust_http_server PORT");
    let l = TcpListener::bind(format!("127.0.0.1:{port}")).expect("bind");
    for s in l.incoming().flatten() {
        std::thread::spawn(move || serve(s));
    }
}
