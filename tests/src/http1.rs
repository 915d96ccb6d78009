//! A raw HTTP/1.1 client for exact requests: keep-alive sequences and the
//! responses they get, read by Content-Length or chunked framing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET path` on a keep-alive connection (HTTP/1.1's default).
pub fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n")
}

/// Sends `requests` one after another on one keep-alive connection to
/// 127.0.0.1:`port`, reading each response before the next; their statuses.
pub fn keepalive(port: u16, requests: &[&str]) -> Vec<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("set a read timeout");
    let mut statuses = Vec::new();
    let mut buf = Vec::new();
    for r in requests {
        s.write_all(r.as_bytes()).expect("send a request");
        statuses.push(read_response(&mut s, &mut buf, r.starts_with("HEAD ")));
    }
    statuses
}

/// Reads one response (Content-Length or chunked body) off `s`; `buf` holds
/// what was read beyond it (the next pipelined response).
pub fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>, head_only: bool) -> u16 {
    let mut chunk = [0u8; 65536];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).expect("read a response");
        assert!(n > 0, "connection closed mid-response");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let status: u16 = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).map(|v| v.trim().parse().expect("a Content-Length")).unwrap_or(0);
    let chunked = head.contains("transfer-encoding: chunked");
    buf.drain(..end);
    if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
        return status;
    }
    if chunked {
        while !buf.windows(5).any(|w| w == b"0\r\n\r\n") {
            let n = s.read(&mut chunk).expect("read a chunk");
            assert!(n > 0, "connection closed mid-body");
            buf.extend_from_slice(&chunk[..n]);
        }
        let at = buf.windows(5).position(|w| w == b"0\r\n\r\n").expect("the last chunk");
        buf.drain(..at + 5);
    } else {
        while buf.len() < len {
            let n = s.read(&mut chunk).expect("read the body");
            assert!(n > 0, "connection closed mid-body");
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..len);
    }
    status
}
