//! Reading HTTP/1.x request heads out of captured bytes.
//!
//! The bytes come from any process on the host, possibly hostile, and are
//! cut at the capture length: the parser accepts a head that ends early
//! (a truncated path or header list is still a request), never panics, and
//! keeps only the few headers spans need.

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
    /// Host from an absolute-form target or CONNECT authority.
    pub target_host: Option<String>,
    pub version: Version,
    pub host: Option<String>,
    pub user_agent: Option<String>,
    pub traceparent: Option<String>,
    /// The head ended within the bytes (else: cut by the capture length).
    pub complete: bool,
    /// Bytes taken by this request (head + body) when known; lets the
    /// next pipelined request be found.
    pub len: Option<usize>,
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Bytes as text: invalid UTF-8 replaced, control characters removed (they
/// would corrupt logs and terminals downstream).
fn text(bytes: &[u8]) -> String {
    // The common case, printable ASCII, needs neither pass.
    if bytes.iter().all(|b| (0x20..0x7f).contains(b)) {
        // Printable ASCII is valid UTF-8.
        return String::from_utf8(bytes.to_vec()).unwrap_or_default();
    }
    String::from_utf8_lossy(bytes).chars().filter(|c| !c.is_control()).collect()
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

/// Where the next CRLF starts.
fn crlf(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
        let at = from + i;
        if at > 0 && buf[at - 1] == b'\r' {
            return Some(at - 1);
        }
        from = at + 1;
    }
    None
}

/// Parses the request head at the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Option<RequestHead> {
    let line_end = crlf(buf);
    let line = &buf[..line_end.unwrap_or(buf.len())];
    let sp1 = line.iter().position(|b| *b == b' ')?;
    let method = &line[..sp1];
    if method.is_empty() || method.len() > 32 || !method.iter().all(|b| is_token(*b)) {
        return None;
    }
    let rest = &line[sp1 + 1..];
    let sp2 = rest.iter().position(|b| *b == b' ');
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
    let (path, query, target_host) = split_target(&target, method == b"CONNECT");

    let mut head = RequestHead {
        method: text(method),
        path,
        query,
        target_host,
        version,
        host: None,
        user_agent: None,
        traceparent: None,
        complete: false,
        len: None,
    };
    let Some(line_end) = line_end else { return Some(head) };
    let mut pos = line_end + 2;
    let mut content_length: Option<usize> = Some(0);
    // Without a CRLF the capture was cut inside the headers.
    while let Some(end) = crlf(&buf[pos..]) {
        let header = &buf[pos..pos + end];
        pos += end + 2;
        if header.is_empty() {
            head.complete = true;
            head.len = content_length.map(|n| pos + n);
            break;
        }
        let Some(colon) = header.iter().position(|b| *b == b':') else {
            continue;
        };
        let name = &header[..colon];
        let value = header[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"host") {
            head.host = Some(text(value));
        } else if name.eq_ignore_ascii_case(b"user-agent") {
            head.user_agent = Some(text(value));
        } else if name.eq_ignore_ascii_case(b"traceparent") {
            head.traceparent = Some(text(value));
        } else if name.eq_ignore_ascii_case(b"content-length") {
            content_length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            content_length = None; // chunked: where the body ends is unknown here
        }
    }
    Some(head)
}

fn split_target(target: &str, connect: bool) -> (String, Option<String>, Option<String>) {
    if connect {
        return (String::new(), None, Some(target.to_owned()));
    }
    let mut host = None;
    let mut rest = target;
    for scheme in ["http://", "https://"] {
        if let Some(after) = target.strip_prefix(scheme) {
            let slash = after.find('/').unwrap_or(after.len());
            host = Some(after[..slash].to_owned());
            rest = if slash < after.len() { &after[slash..] } else { "/" };
        }
    }
    let rest = rest.split('#').next().unwrap_or(rest);
    match rest.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned()), host),
        None => (rest.to_owned(), None, host),
    }
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
        match next {
            Some(n) if n > 0 && pos + n < buf.len() => pos += n,
            _ => break,
        }
    }
    out
}

/// A W3C `traceparent`: version 00, trace id, parent span id, flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    pub span_id: u64,
    pub flags: u8,
}

/// Parses a `traceparent` value; invalid ones (all-zero ids, bad lengths,
/// version ff) are ignored, as the W3C spec says.
pub fn parse_traceparent(v: &str) -> Option<TraceParent> {
    let mut parts = v.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    if version.len() != 2 || version.eq_ignore_ascii_case("ff") || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex(version) || !hex(trace) || !hex(span) || !hex(flags) {
        return None;
    }
    let trace_id = u128::from_str_radix(trace, 16).ok()?;
    let span_id = u64::from_str_radix(span, 16).ok()?;
    if trace_id == 0 || span_id == 0 {
        return None;
    }
    Some(TraceParent { trace_id, span_id, flags: u8::from_str_radix(flags, 16).ok()? })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn traceparent_rules() {
        assert!(parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01").is_none());
        assert!(parse_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_none());
        // future versions may append fields
        assert!(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x").is_some());
    }

    #[test]
    fn host_port_split() {
        assert_eq!(split_host_port("a:80"), ("a", Some(80)));
        assert_eq!(split_host_port("a"), ("a", None));
        assert_eq!(split_host_port("[::1]:8080"), ("::1", Some(8080)));
        assert_eq!(split_host_port("::1"), ("::1", None));
    }
}
