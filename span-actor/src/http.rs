//! Reading HTTP/1.x request heads out of captured bytes.
//!
//! The bytes come from any process on the host, possibly hostile, and are
//! cut at the capture length: the parser accepts a head that ends early
//! (a truncated path or header list is still a request), never panics
//! (every length and offset from the bytes is checked), and keeps only the
//! few headers spans need: Host, User-Agent, traceparent, and the framing
//! (Content-Length, Transfer-Encoding). Every other header, and the body,
//! is never copied out of the capture.
//!
//! It accepts what servers accept and the kernel recognises
//! (`probe-loader/bpf/http1.h`): empty lines before the request line, SP or
//! HTAB between its words, bare LF line ends, absolute-form targets with
//! any scheme in any case. User information in a target or Host
//! (`user:password@`) is never kept: the OpenTelemetry conventions say
//! credentials must not be recorded.

/// `network.protocol.version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

impl Version {
    /// As in `network.protocol.version`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "1.0",
            Version::Http11 => "1.1",
        }
    }
}

/// What a span needs from a request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method as sent.
    pub method: String,
    /// `url.path`: the path of the target (absolute-form targets included).
    pub path: String,
    /// `url.query`, without the `?`.
    pub query: Option<String>,
    /// Host from an absolute-form target or CONNECT authority, without
    /// user information.
    pub target_host: Option<String>,
    /// The target carried user information (`user:password@`), removed.
    pub target_userinfo: bool,
    pub version: Version,
    /// The Host header, without user information.
    pub host: Option<String>,
    pub user_agent: Option<String>,
    pub traceparent: Option<String>,
    /// The head ended within the bytes (else: cut by the capture length).
    pub complete: bool,
    /// Bytes taken by this request (head + body) when known; lets the
    /// next pipelined request be found.
    pub len: Option<usize>,
}

use crate::text::{clean, is_token};

/// Bytes as text (see [`clean`]): the capture bounds them.
fn text(bytes: &[u8]) -> String {
    clean(bytes, usize::MAX)
}

/// Splits a host header value into host and port.
pub fn split_host_port(host: &str) -> (&str, Option<u16>) {
    if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        if let Some((h, p)) = rest.split_once(']') {
            return (h, p.strip_prefix(':').and_then(|p| p.parse().ok()));
        }
        return (host, None);
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p.parse().ok()),
        _ => (host, None),
    }
}

/// The end of the next line: where its line break starts (the CR of a CRLF,
/// or a bare LF), and where the next line starts.
fn line_end(buf: &[u8]) -> Option<(usize, usize)> {
    let at = memchr::memchr(b'\n', buf)?;
    let start = if at > 0 && buf[at - 1] == b'\r' { at - 1 } else { at };
    Some((start, at + 1))
}

fn is_sep(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Removes `user:password@` from an authority.
pub(crate) fn without_userinfo(authority: &str) -> (&str, bool) {
    match authority.rfind('@') {
        Some(at) => (&authority[at + 1..], true),
        None => (authority, false),
    }
}

/// Parses the request head at the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Option<RequestHead> {
    // Empty lines before the request line are allowed (RFC 9112 2.2).
    let skip = buf.iter().position(|b| *b != b'\r' && *b != b'\n')?;
    let buf = &buf[skip..];
    let end = line_end(buf);
    let line = &buf[..end.map_or(buf.len(), |(e, _)| e)];
    let sp1 = line.iter().position(|b| is_sep(*b))?;
    let method = &line[..sp1];
    if method.is_empty() || method.len() > 32 || !method.iter().all(|b| is_token(*b)) {
        return None;
    }
    let rest = &line[sp1 + 1..];
    let sp2 = rest.iter().position(|b| is_sep(*b));
    let target = &rest[..sp2.unwrap_or(rest.len())];
    if target.is_empty() {
        return None;
    }
    let version = match sp2.map(|i| &rest[i + 1..]) {
        Some(b"HTTP/1.0") => Version::Http10,
        Some(b"HTTP/1.1") | None => Version::Http11, // cut before the version: 1.1 is the likely one
        Some(v) if v.starts_with(b"HTTP/1.") || b"HTTP/1.".starts_with(v) => Version::Http11,
        Some(_) => return None,
    };
    let target = text(target);
    let t = split_target(target, method == b"CONNECT");

    let mut head = RequestHead {
        method: text(method),
        path: t.path,
        query: t.query,
        target_host: t.host,
        target_userinfo: t.userinfo,
        version,
        host: None,
        user_agent: None,
        traceparent: None,
        complete: false,
        len: None,
    };
    let Some((_, mut pos)) = end else { return Some(head) };
    let mut content_length: Option<usize> = Some(0);
    // Without a line break the capture was cut inside the headers.
    while let Some((end, next)) = line_end(&buf[pos..]) {
        let header = &buf[pos..pos + end];
        pos += next;
        if header.is_empty() {
            head.complete = true;
            // What this request took of the capture, empty lines before it
            // included; unknown when the body length is unknown or absurd.
            head.len = content_length.and_then(|n| pos.checked_add(n)).and_then(|n| n.checked_add(skip));
            break;
        }
        let Some(colon) = header.iter().position(|b| *b == b':') else {
            continue;
        };
        let name = &header[..colon];
        let value = || header[colon + 1..].trim_ascii();
        // (by length first: most headers are none of these)
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                // user information is never copied
                let v = value();
                head.host = Some(text(v.iter().rposition(|b| *b == b'@').map_or(v, |at| &v[at + 1..])));
            }
            10 if name.eq_ignore_ascii_case(b"user-agent") => head.user_agent = Some(text(value())),
            11 if name.eq_ignore_ascii_case(b"traceparent") => head.traceparent = Some(text(value())),
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                // Digits only, and it must fit: anything else leaves the
                // body length (and so where a pipelined request starts)
                // unknown.
                let v = value();
                content_length =
                    (!v.is_empty() && v.iter().all(u8::is_ascii_digit)).then(|| std::str::from_utf8(v).ok()?.parse().ok()).flatten();
            }
            // chunked: where the body ends is unknown here
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => content_length = None,
            _ => {}
        }
    }
    Some(head)
}

/// A request target, in parts.
struct Target {
    path: String,
    query: Option<String>,
    host: Option<String>,
    userinfo: bool,
}

/// (`target` is moved into the path when it is all path: the usual case)
fn split_target(owned: String, connect: bool) -> Target {
    let target = owned.as_str();
    if connect {
        let (host, userinfo) = without_userinfo(target);
        return Target { path: String::new(), query: None, host: Some(host.to_owned()), userinfo };
    }
    let mut host = None;
    let mut userinfo = false;
    let mut rest = target;
    // absolute form: scheme "://" authority [path]; the scheme in any case
    // (no colon in a valid scheme: the first colon is where it ends)
    // (bytes searched one by one here: targets are short, and a `str`
    // search set up a memchr search for each)
    let find = |s: &str, byte: u8| s.bytes().position(|b| b == byte);
    if let Some(sep) = find(target, b':').filter(|&sep| target[sep..].starts_with("://")) {
        let scheme = &target[..sep];
        let valid = scheme.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
            && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
        if valid {
            let after = &target[sep + 3..];
            let slash = after.find(['/', '?', '#']).unwrap_or(after.len());
            let (h, u) = without_userinfo(&after[..slash]);
            host = Some(h.to_owned());
            userinfo = u;
            rest = if slash < after.len() { &after[slash..] } else { "/" };
        }
    }
    let rest = &rest[..find(rest, b'#').unwrap_or(rest.len())];
    let (path, query) = match find(rest, b'?') {
        Some(q) => (&rest[..q], Some(rest[q + 1..].to_owned())),
        None => (rest, None),
    };
    // "http://h?q" has an empty path: the root
    let path = if path.is_empty() && host.is_some() {
        "/".to_owned()
    } else if path.len() == target.len() {
        owned
    } else {
        path.to_owned()
    };
    Target { path, query, host, userinfo }
}

/// Every request in `buf`, in order: the first, then any pipelined after it
/// (a request whose end is unknown stops the walk).
pub fn parse_pipeline(buf: &[u8]) -> Vec<RequestHead> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() && out.len() < 64 {
        let Some(head) = parse_request(&buf[pos..]) else { break };
        let next = head.len;
        out.push(head);
        match next.and_then(|n| pos.checked_add(n)) {
            Some(p) if p > pos && p < buf.len() => pos = p,
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::parse_traceparent;

    #[test]
    fn full_request() {
        let r = parse_request(b"GET /users/7?x=1 HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: curl/8\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n").unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/users/7");
        assert_eq!(r.query.as_deref(), Some("x=1"));
        assert_eq!(r.version, Version::Http11);
        assert_eq!(r.host.as_deref(), Some("example.com:8080"));
        assert_eq!(r.user_agent.as_deref(), Some("curl/8"));
        assert!(r.complete);
        let tp = parse_traceparent(r.traceparent.as_deref().unwrap()).unwrap();
        assert_eq!(tp.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(tp.span_id, 0x00f067aa0ba902b7);
        assert_eq!(tp.flags, 1);
    }

    #[test]
    fn truncated_heads_still_parse() {
        let r = parse_request(b"GET /a/very/long/pa").unwrap();
        assert_eq!(r.path, "/a/very/long/pa");
        assert!(!r.complete);
        let r = parse_request(b"POST /x HTTP/1.0\r\nHost: a\r\nUser-Ag").unwrap();
        assert_eq!(r.version, Version::Http10);
        assert_eq!(r.host.as_deref(), Some("a"));
        assert_eq!(r.user_agent, None);
        assert!(!r.complete);
    }

    #[test]
    fn absolute_and_authority_targets() {
        let r = parse_request(b"GET http://h:81/p?q HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.path.as_str(), r.query.as_deref(), r.target_host.as_deref()), ("/p", Some("q"), Some("h:81")));
        let r = parse_request(b"CONNECT h:443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.path.as_str(), r.target_host.as_deref()), ("", Some("h:443")));
        let r = parse_request(b"OPTIONS * HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.path, "*");
    }

    #[test]
    fn garbage_is_not_a_request() {
        for b in [&b""[..], b" / HTTP/1.1", b"GET", b"G(T / HTTP/1.1\r\n", b"GET  HTTP/1.1", b"GET / SPDY/3\r\n", &[0xff, 0xfe, b' ', b'/']]
        {
            assert!(parse_request(b).is_none(), "{b:?}");
        }
    }

    #[test]
    fn hostile_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let n = rng.random_range(0..600);
            let mut b: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            if rng.random_bool(0.5) {
                let prefix = b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n";
                b.splice(0..0, prefix.iter().copied());
            }
            let _ = parse_pipeline(&b);
        }
    }

    #[test]
    fn control_characters_are_removed() {
        let r = parse_request(b"GET /a\x1b[31m HTTP/1.1\r\nUser-Agent: x\x07y\r\n\r\n").unwrap();
        assert_eq!(r.path, "/a[31m");
        assert_eq!(r.user_agent.as_deref(), Some("xy"));
    }

    #[test]
    fn pipelined_requests_are_split() {
        let buf = b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /2 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /3 HTTP/1.1\r\n\r\n";
        let heads = parse_pipeline(buf);
        let paths: Vec<&str> = heads.iter().map(|h| h.path.as_str()).collect();
        assert_eq!(paths, ["/1", "/2", "/3"]);
        // A chunked body hides where the next request starts: stop there.
        let buf = b"POST /1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\n\r\n";
        assert_eq!(parse_pipeline(buf).len(), 1);
    }

    #[test]
    fn shapes_servers_accept() {
        // empty lines first, HTAB, bare LF line ends
        let r = parse_request(b"\r\n\nGET\t/a?x=1\tHTTP/1.1\nHost: h\nUser-Agent: u\n\nGET /b HTTP/1.1\n\n").unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str(), r.query.as_deref()), ("GET", "/a", Some("x=1")));
        assert_eq!((r.host.as_deref(), r.user_agent.as_deref(), r.complete), (Some("h"), Some("u"), true));
        let heads = parse_pipeline(b"\r\nGET /1 HTTP/1.1\r\n\r\nget /2 HTTP/1.1\n\n");
        assert_eq!(heads.iter().map(|h| (h.method.as_str(), h.path.as_str())).collect::<Vec<_>>(), [("GET", "/1"), ("get", "/2")]);
        // absolute form, any scheme, any case
        let r = parse_request(b"GET HTTP://H:8/p HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.path.as_str(), r.target_host.as_deref()), ("/p", Some("H:8")));
        let r = parse_request(b"GET ws://h?q=1 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.path.as_str(), r.query.as_deref(), r.target_host.as_deref()), ("/", Some("q=1"), Some("h")));
        // only empty lines: nothing
        assert!(parse_request(b"\r\n\r\n").is_none());
    }

    #[test]
    fn credentials_are_never_kept() {
        let r = parse_request(b"GET http://user:secret@h:81/p HTTP/1.1\r\nHost: u2:secret2@h2\r\n\r\n").unwrap();
        assert_eq!(r.target_host.as_deref(), Some("h:81"));
        assert!(r.target_userinfo);
        assert_eq!(r.host.as_deref(), Some("h2"));
        let r = parse_request(b"CONNECT a:b@h:443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.target_host.as_deref(), Some("h:443"));
        assert!(format!("{r:?}").find("secret").is_none());
    }

    #[test]
    fn absurd_lengths_are_unknown_not_overflows() {
        // issue 13: pos + usize::MAX overflowed and panicked the builder actor
        let r = parse_request(b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\nGET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.len, None);
        for v in ["18446744073709551616", "-1", "+5", "1 2", "0x10", ""] {
            let req = format!("POST / HTTP/1.1\r\nContent-Length: {v}\r\n\r\n");
            assert_eq!(parse_request(req.as_bytes()).unwrap().len, None, "{v}");
        }
        let big = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\nGET /2 HTTP/1.1\r\n\r\n", usize::MAX - 10);
        assert_eq!(parse_pipeline(big.as_bytes()).len(), 1);
    }

    #[test]
    fn host_port_split() {
        assert_eq!(split_host_port("a:80"), ("a", Some(80)));
        assert_eq!(split_host_port("a"), ("a", None));
        assert_eq!(split_host_port("[::1]:8080"), ("::1", Some(8080)));
        assert_eq!(split_host_port("::1"), ("::1", None));
    }
}
