//! Values parsed once, at load, into the types the processes use: a
//! regular expression is compiled, a route template split, an endpoint
//! checked, here and nowhere else. Each type deserializes from and
//! serializes to its text, so the effective configuration prints as it
//! was written.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a value was refused: the rule it breaks, an example that keeps it,
/// and the value as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The rule, e.g. "must be a valid regular expression".
    pub rule: &'static str,
    /// A value that keeps the rule, as written in the file.
    pub example: &'static str,
    /// The offending value, as written.
    pub value: String,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, e.g. {} (got {})", self.rule, self.example, self.value)
    }
}

thread_local! {
    /// The last rejection during deserialization: serde only carries a
    /// message up, and the loader wants the rule, example and value apart
    /// to report them with the key (see `Settings::load_with_env`).
    static LAST: RefCell<Option<Rejected>> = const { RefCell::new(None) };
}

fn remember(r: Rejected) -> String {
    let msg = r.to_string();
    LAST.with(|l| *l.borrow_mut() = Some(r));
    msg
}

/// Takes the rejection a failed deserialization left behind, if any.
pub(crate) fn take_rejected() -> Option<Rejected> {
    LAST.with(|l| l.borrow_mut().take())
}

/// Implements serde through the text form: `TryFrom<String>` (remembering
/// the rejection) and `Display`.
macro_rules! text_serde {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                <$t>::from_str(&s).map_err(|r| serde::de::Error::custom(remember(r)))
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    };
}

/// A regular expression over executable names (`discovery.exe_names`,
/// `services.rules[].exe_name`), compiled once.
#[derive(Clone)]
pub struct ExeRegex(regex::Regex);

impl ExeRegex {
    /// True if `name` matches.
    pub fn is_match(&self, name: &str) -> bool {
        self.0.is_match(name)
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl FromStr for ExeRegex {
    type Err = Rejected;
    fn from_str(s: &str) -> Result<Self, Rejected> {
        regex::Regex::new(s).map(ExeRegex).map_err(|_| Rejected {
            rule: "must be a valid regular expression",
            example: "\"^python3\"",
            value: format!("{s:?}"),
        })
    }
}

impl fmt::Display for ExeRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ExeRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl PartialEq for ExeRegex {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ExeRegex {}

text_serde!(ExeRegex);

/// One segment of a [`RouteTemplate`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Lit(String),
    Param,
    Rest,
}

/// An `http.route` template, compiled: starts with `/`; segments are
/// literals, `{name}` placeholders, or a final `*`.
#[derive(Clone)]
pub struct RouteTemplate {
    text: String,
    segs: Vec<Seg>,
}

impl RouteTemplate {
    /// The template as written (the route it names).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True if `path` (without query) fits the template.
    pub fn matches(&self, path: &str) -> bool {
        let mut parts = path.trim_start_matches('/').split('/');
        for seg in &self.segs {
            match seg {
                Seg::Rest => return true,
                Seg::Param => match parts.next() {
                    Some(p) if !p.is_empty() => {}
                    _ => return false,
                },
                Seg::Lit(l) => match parts.next() {
                    Some(p) if p == l => {}
                    _ => return false,
                },
            }
        }
        parts.next().is_none()
    }
}

impl FromStr for RouteTemplate {
    type Err = Rejected;
    fn from_str(t: &str) -> Result<Self, Rejected> {
        let reject = |rule| Rejected { rule, example: "\"/users/{id}\" or \"/static/*\"", value: format!("{t:?}") };
        let Some(rest) = t.strip_prefix('/') else {
            return Err(reject("must start with '/'"));
        };
        let raw: Vec<&str> = rest.split('/').collect();
        let mut segs = Vec::with_capacity(raw.len());
        for (i, s) in raw.iter().enumerate() {
            if *s == "*" && i + 1 != raw.len() {
                return Err(reject("'*' may only be the last segment"));
            }
            if s.starts_with('{') != s.ends_with('}') {
                return Err(reject("placeholders are whole segments like {id}"));
            }
            if s.starts_with('{') && (s.len() < 3 || s[1..s.len() - 1].contains(['{', '}', '/'])) {
                return Err(reject("placeholders need a name, like {id}"));
            }
            segs.push(match *s {
                "*" => Seg::Rest,
                s if s.starts_with('{') => Seg::Param,
                s => Seg::Lit(s.to_owned()),
            });
        }
        Ok(RouteTemplate { text: t.to_owned(), segs })
    }
}

impl fmt::Display for RouteTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for RouteTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

impl PartialEq for RouteTemplate {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for RouteTemplate {}

text_serde!(RouteTemplate);

/// What replaces the user information of a URL that is shown.
const USERINFO_REDACTED: &str = "REDACTED@";

/// `text` with the user information of every URL in it (`user:password@`
/// after a `scheme://`) replaced by `REDACTED@`: what may be logged, put in
/// an error or printed of a text that holds URLs from the configuration or
/// the environment. A URL ends at whitespace or a quote; everything up to
/// its last `@` goes (a password with an unencoded `/` or `@` included).
pub fn redact_userinfo(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut copied = 0;
    let mut from = 0;
    while let Some(i) = text[from..].find("://") {
        let start = from + i + 3;
        let end =
            text[start..].find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')).map_or(text.len(), |e| start + e);
        if let Some(at) = text[start..end].rfind('@') {
            out.push_str(&text[copied..start]);
            out.push_str(USERINFO_REDACTED);
            copied = start + at + 1;
        }
        from = end;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// An OTLP endpoint URL: `http://` or `https://` (TLS), a host, and (in
/// the file) a port. User information (`https://user:password@host`, sent
/// as HTTP basic authentication) is a secret: [`OtlpEndpoint::as_str`] is
/// the URL to connect to, `Display` and `Debug` (what logs, errors and
/// `ringtail check-config` show) have it as `REDACTED@`.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpEndpoint(String);

impl OtlpEndpoint {
    /// The URL as written, with its user information: to connect with only.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for `https://`.
    pub fn tls(&self) -> bool {
        self.0.starts_with("https://")
    }

    /// The URL with `/path` appended (OTLP/HTTP's `v1/traces`, `v1/metrics`).
    pub fn join(&self, path: &str) -> OtlpEndpoint {
        OtlpEndpoint(format!("{}/{}", self.0.trim_end_matches('/'), path.trim_start_matches('/')))
    }

    /// The same endpoint without its user information (as shown).
    pub fn redacted(&self) -> OtlpEndpoint {
        OtlpEndpoint(redact_userinfo(&self.0).into_owned())
    }

    /// The rule of the `OTEL_EXPORTER_OTLP_*ENDPOINT` variables (the
    /// OpenTelemetry convention: the port may be left to the scheme).
    pub fn from_env(url: &str) -> Result<Self, Rejected> {
        let ok = (url.starts_with("http://") || url.starts_with("https://")) && url.parse::<http::Uri>().is_ok_and(|u| u.host().is_some());
        if !ok {
            return Err(Rejected {
                rule: "must be an http:// or https:// URL with a host",
                example: "http://127.0.0.1:4317",
                value: format!("{:?}", redact_userinfo(url)),
            });
        }
        Ok(OtlpEndpoint(url.to_owned()))
    }
}

impl FromStr for OtlpEndpoint {
    type Err = Rejected;
    /// The file's rule: scheme, host and port.
    fn from_str(url: &str) -> Result<Self, Rejected> {
        let reject = |rule| Rejected { rule, example: "\"http://127.0.0.1:4317\"", value: format!("{:?}", redact_userinfo(url)) };
        let rest =
            url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).ok_or(reject("must start with http:// or https://"))?;
        let authority = rest.split('/').next().unwrap_or("");
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
        let (host, port) = host_port.rsplit_once(':').ok_or(reject("must name a port (host:port)"))?;
        if host.is_empty() {
            return Err(reject("must name a host"));
        }
        port.parse::<u16>().map_err(|_| reject("port must be a number 1..=65535"))?;
        Ok(OtlpEndpoint(url.to_owned()))
    }
}

impl fmt::Display for OtlpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_userinfo(&self.0))
    }
}

impl fmt::Debug for OtlpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_userinfo(&self.0))
    }
}

// Not `text_serde!`: serialized whole (the exporter's configuration is
// handed over as TOML), shown without the user information.
impl<'de> Deserialize<'de> for OtlpEndpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        OtlpEndpoint::from_str(&s).map_err(|r| serde::de::Error::custom(remember(r)))
    }
}

impl Serialize for OtlpEndpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// An HTTP header name for OTLP requests: letters, digits, '-' and '_',
/// kept lowercase (HTTP/2 and gRPC metadata want lowercase).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HeaderName(String);

impl HeaderName {
    /// The name, lowercase.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for HeaderName {
    type Err = Rejected;
    fn from_str(name: &str) -> Result<Self, Rejected> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)) {
            return Err(Rejected {
                rule: "header names are letters, digits, '-' and '_'",
                example: "{ authorization = \"Bearer x\" }",
                value: format!("{name:?}"),
            });
        }
        Ok(HeaderName(name.to_ascii_lowercase()))
    }
}

impl fmt::Display for HeaderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

text_serde!(HeaderName);

/// A TCP port to trace on, 1..=65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Port(u16);

impl Port {
    /// The port number.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl TryFrom<u16> for Port {
    type Error = Rejected;
    fn try_from(p: u16) -> Result<Self, Rejected> {
        if p == 0 {
            return Err(Rejected { rule: "must be a TCP port 1..=65535", example: "8080", value: p.to_string() });
        }
        Ok(Port(p))
    }
}

impl<'de> Deserialize<'de> for Port {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Port::try_from(u16::deserialize(d)?).map_err(|r| serde::de::Error::custom(remember(r)))
    }
}

/// A listening address (`export.prometheus.listen`): an IP address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddr(SocketAddr);

impl ListenAddr {
    /// The socket address.
    pub fn get(self) -> SocketAddr {
        self.0
    }
}

impl FromStr for ListenAddr {
    type Err = Rejected;
    fn from_str(s: &str) -> Result<Self, Rejected> {
        s.parse().map(ListenAddr).map_err(|_| Rejected {
            rule: "must be an IP address and port",
            example: "\"127.0.0.1:9400\"",
            value: format!("{s:?}"),
        })
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

text_serde!(ListenAddr);

/// serde for an optional value written as text, where an empty string
/// (the documented "off") is `None`.
pub(crate) mod empty_is_none {
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{remember, Rejected};

    pub fn deserialize<'de, D: Deserializer<'de>, T: FromStr<Err = Rejected>>(d: D) -> Result<Option<T>, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Ok(None);
        }
        T::from_str(&s).map(Some).map_err(|r| serde::de::Error::custom(remember(r)))
    }

    /// As the type serializes itself (an endpoint whole, not as shown).
    pub fn serialize<S: Serializer, T: Serialize>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => v.serialize(s),
            None => s.serialize_str(""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_templates() {
        for ok in ["/", "/users/{id}", "/static/*", "/a/{b}/c"] {
            assert!(ok.parse::<RouteTemplate>().is_ok(), "{ok}");
        }
        for bad in ["users", "/a/*/b", "/a/{b", "/a/{}"] {
            assert!(bad.parse::<RouteTemplate>().is_err(), "{bad}");
        }
        let t: RouteTemplate = "/users/{id}/orders/*".parse().unwrap();
        assert!(t.matches("/users/7/orders/1/2"));
        assert!(!t.matches("/users//orders/1"));
        assert!(!t.matches("/users/7"));
        let exact: RouteTemplate = "/health".parse().unwrap();
        assert!(exact.matches("/health") && !exact.matches("/health/x"));
    }

    #[test]
    fn endpoints_from_the_file_and_from_the_environment() {
        assert!("http://127.0.0.1:4317".parse::<OtlpEndpoint>().is_ok());
        assert!("https://collector:443/prefix".parse::<OtlpEndpoint>().unwrap().tls());
        for bad in ["localhost:4317", "http://:4317", "http://collector", "http://c:port"] {
            assert!(bad.parse::<OtlpEndpoint>().is_err(), "{bad}");
        }
        for ok in ["http://env:4318/", "https://collector", "http://[::1]:4317", "http://user@host:1/x"] {
            assert!(OtlpEndpoint::from_env(ok).is_ok(), "{ok}");
        }
        for bad in ["collector:4317", "ftp://x", "http://", "http://a b"] {
            assert!(OtlpEndpoint::from_env(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn user_information_is_never_shown() {
        assert_eq!(redact_userinfo("https://u:p4ss@c:4318/v1/traces"), "https://REDACTED@c:4318/v1/traces");
        assert_eq!(redact_userinfo("a \"http://u:p/ss@c:1\" and http://c:2/x@y b"), "a \"http://REDACTED@c:1\" and http://REDACTED@y b");
        assert!(matches!(redact_userinfo("http://c:4317 is fine"), Cow::Borrowed(_)));
        let e: OtlpEndpoint = "https://user:s3cr3t@collector:4318".parse().unwrap();
        assert_eq!(e.as_str(), "https://user:s3cr3t@collector:4318", "kept to connect with");
        assert_eq!(e.to_string(), "https://REDACTED@collector:4318");
        assert_eq!(format!("{e:?}"), "\"https://REDACTED@collector:4318\"");
        assert_eq!(e.join("v1/traces").as_str(), "https://user:s3cr3t@collector:4318/v1/traces");
        assert_eq!(e.redacted().as_str(), "https://REDACTED@collector:4318");
        let env = OtlpEndpoint::from_env("http://user:s3cr3t@collector").unwrap();
        assert_eq!(env.to_string(), "http://REDACTED@collector");
        for bad in ["ftp://user:s3cr3t@c:1", "https://user:s3cr3t@c", "https://user:s3cr3t@:1"] {
            let r = bad.parse::<OtlpEndpoint>().unwrap_err();
            assert!(!r.to_string().contains("s3cr3t"), "{r}");
        }
        assert!(!OtlpEndpoint::from_env("http://user:s3cr3t@").unwrap_err().to_string().contains("s3cr3t"));
    }

    #[test]
    fn header_names_ports_and_addresses() {
        assert_eq!("X-Tenant".parse::<HeaderName>().unwrap().as_str(), "x-tenant");
        assert!("a b".parse::<HeaderName>().is_err() && "".parse::<HeaderName>().is_err());
        assert!(Port::try_from(0).is_err() && Port::try_from(8080).unwrap().get() == 8080);
        assert!("9400".parse::<ListenAddr>().is_err() && "127.0.0.1:9400".parse::<ListenAddr>().is_ok());
    }
}

/// A query-string key whose values are redacted (`redaction.query_keys`):
/// 1..=128 bytes of visible ASCII other than the query's own delimiters
/// (`&`, `;`, `=`, `#`). It matches keys ASCII case-insensitively after
/// their percent-encoding is decoded, so it is kept lowercase.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueryKey(String);

impl QueryKey {
    /// The key, lowercase.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for QueryKey {
    type Err = Rejected;
    fn from_str(key: &str) -> Result<Self, Rejected> {
        let ok = (1..=128).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic() && !b"&;=#".contains(&b));
        if !ok {
            return Err(Rejected {
                rule: "must be 1 to 128 visible ASCII characters other than & ; = #",
                example: "[\"token\", \"api_key\"]",
                value: format!("{key:?}"),
            });
        }
        Ok(QueryKey(key.to_ascii_lowercase()))
    }
}

impl fmt::Display for QueryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

text_serde!(QueryKey);
