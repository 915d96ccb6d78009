//! The OpenTelemetry HTTP semantic conventions (stable, v1.23+): what an
//! HTTP exchange's span is.
//!
//! The rules that do not depend on configuration are functions
//! ([`method`], [`is_error`], [`span_name`]). [`Http`] applies them, with
//! the configured routes ([`crate::routes`]) and query redaction
//! ([`crate::redact`]), to an exchange of any version (HTTP/1.x from
//! [`crate::http1`], HTTP/2 from [`crate::h2`]): the span's name, status,
//! server, client and `url.*` parts ([`Http::judge`]). A remote procedure
//! call over the exchange (gRPC) brings its own conventions' view, made by
//! [`crate::h2::grpc`]: it names the span and says whether it failed
//! instead of HTTP's.

use ipc_schema::{HttpCall, SpanKind, Text, Value};
use ringtail_config::{RedactionSettings, RouteSettings};
use runtime_kit::counters::{Counter, Gauge, Registry};

use crate::http::split_host_port;
use crate::operation::{Addrs, Conn, HttpExchange, SpanParts};
use crate::redact::Redactor;
use crate::routes::Router;

/// The methods `http.request.method` may carry as themselves (RFC 9110 +
/// PATCH); anything else is `_OTHER`.
const KNOWN_METHODS: [&str; 9] = ["CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"];

/// `http.request.method` and, for unknown methods,
/// `http.request.method_original` (the method as sent, moved). Methods are
/// case-sensitive: `get` is not `GET`. A known method is its literal.
pub fn method(original: String) -> (Text, Option<Text>) {
    match KNOWN_METHODS.iter().find(|m| **m == original) {
        Some(known) => (Text::Static(known), None),
        None => (Text::Static("_OTHER"), Some(Text::Owned(original))),
    }
}

/// Span status ERROR: 5xx for servers; 4xx and 5xx for clients (an HTTP
/// exchange is never a PRODUCER's or CONSUMER's: the side that sent the
/// request is the client).
pub fn is_error(kind: SpanKind, status: u16) -> bool {
    match kind {
        SpanKind::Server => (500..600).contains(&status),
        SpanKind::Client | SpanKind::Producer | SpanKind::Consumer => (400..600).contains(&status),
    }
}

/// Span name: `{method} {route}`, or `{method}` when no route is known;
/// `HTTP` for `_OTHER` (the spec's choice, so garbage methods do not
/// become span names).
pub fn span_name(method: &Text, route: Option<&str>) -> Text {
    let m = if method == "_OTHER" { Text::Static("HTTP") } else { method.clone() };
    match route {
        Some(r) => {
            let mut s = String::with_capacity(m.len() + 1 + r.len());
            s.push_str(&m);
            s.push(' ');
            s.push_str(r);
            Text::Owned(s)
        }
        None => m,
    }
}

/// The HTTP conventions as configured: the routes and the redaction of
/// queries, and the counts of what they refuse or cap.
pub struct Http {
    router: Router,
    redactor: Redactor,
    /// Server requests whose route is ignored (they make no span).
    ignored: Counter,
    /// Routes that became [`crate::routes::OVERFLOW_ROUTE`].
    overflow: Counter,
    /// Services whose routes were forgotten (`routes.max_services`,
    /// [`crate::routes::MAX_ROUTE_BYTES`]), and how many are remembered.
    route_services_evicted: Counter,
    route_services: Gauge,
}

impl Http {
    /// The conventions under these settings, their counts in `registry`.
    pub fn new(routes: &RouteSettings, redaction: &RedactionSettings, registry: &Registry) -> Http {
        Http {
            router: Router::new(routes),
            redactor: Redactor::new(redaction),
            ignored: registry.counter("ringtail_ignored_requests_total", &[]),
            overflow: registry.counter("ringtail_route_overflow_total", &[]),
            route_services_evicted: registry.counter("ringtail_route_services_evicted_total", &[]),
            route_services: registry.gauge("ringtail_route_services", &[]),
        }
    }

    /// Publishes the routes' counts (once a batch).
    pub fn publish(&mut self) {
        self.route_services_evicted.add(self.router.take_evicted());
        self.route_services.set(self.router.services() as f64);
    }

    /// What the HTTP conventions (and the RPC ones, for a call over it)
    /// make of an exchange of `service` over `conn`: `None` when its route
    /// is ignored.
    #[inline(always)]
    pub fn judge(&mut self, kind: SpanKind, conn: &Conn, service: &str, http: HttpExchange, addrs: &mut Addrs) -> Option<SpanParts> {
        let status = http.status.unwrap_or(0);
        let (route, export_trace, export_metrics) = if kind == SpanKind::Server {
            let Some(routed) = self.router.route(service, &http.path, status) else {
                self.ignored.inc();
                return None;
            };
            if routed.overflowed {
                self.overflow.inc();
            }
            (routed.route, routed.export_trace, routed.export_metrics)
        } else {
            (None, true, true) // http.route is a server attribute
        };
        let (method, method_original) = method(http.method);
        let (host, host_port) = match http.authority {
            Some(authority) => {
                let (h, p) = split_host_port(&authority);
                // (without a port the host is the authority itself: moved)
                let h = if h.len() == authority.len() { authority } else { h.to_owned() };
                (Some(Text::Owned(h)), p)
            }
            None => (None, None),
        };
        let peer_ip = addrs.text(&conn.peer);
        let local_ip = addrs.text(&conn.local);
        let (server_address, server_port, client_address, client_port) = match kind {
            SpanKind::Server => (host, host_port.unwrap_or(conn.local.port), peer_ip.clone(), conn.peer.port),
            SpanKind::Client | SpanKind::Producer | SpanKind::Consumer => {
                (host.or_else(|| Some(peer_ip.clone())), host_port.unwrap_or(conn.peer.port), local_ip, conn.local.port)
            }
        };
        let mut parts = SpanParts {
            kind: None,
            name: span_name(&method, route.as_deref()),
            error: is_error(kind, status),
            server_address,
            server_port,
            peer_address: peer_ip,
            export_trace,
            export_metrics,
            attributes: Vec::new(),
            links: Vec::new(),
            call: ipc_schema::Call::Http(HttpCall {
                method,
                method_original,
                route: route.map(Text::Owned),
                path: Text::Owned(http.path),
                query: self.redactor.query(http.query.as_deref()).map(Text::Owned),
                scheme: http.scheme.map_or(Text::Static(if conn.tls { "https" } else { "http" }), Text::Owned),
                status,
                client_address,
                client_port,
                protocol_version: Text::Static(http.version),
                user_agent: http.user_agent.map(Text::Owned),
            }),
        };
        if http.status.is_none() {
            // reset, refused or closed before a response
            parts.error = true;
            parts.attributes.push((Text::Static("error.type"), Value::Str(Text::Static("_OTHER"))));
        }
        if let Some(rpc) = http.rpc {
            parts.name = rpc.name;
            parts.error = rpc.error;
            parts.attributes = rpc.attributes;
            if let ipc_schema::Call::Http(h) = parts.call {
                parts.call = ipc_schema::Call::Rpc(h, rpc.call);
            }
        }
        Some(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods() {
        assert_eq!(method("GET".into()), ("GET".into(), None));
        assert!(matches!(method("GET".into()).0, Text::Static(_)), "a known method is its literal");
        assert_eq!(method("PURGE".into()), ("_OTHER".into(), Some("PURGE".into())));
        assert_eq!(method("get".into()), ("_OTHER".into(), Some("get".into())));
    }

    #[test]
    fn error_status_by_kind() {
        assert!(!is_error(SpanKind::Server, 404));
        assert!(is_error(SpanKind::Server, 503));
        assert!(is_error(SpanKind::Client, 404));
        assert!(!is_error(SpanKind::Client, 302));
        assert!(!is_error(SpanKind::Server, 101));
    }

    #[test]
    fn names() {
        assert_eq!(span_name(&"GET".into(), Some("/users/{id}")), "GET /users/{id}");
        assert_eq!(span_name(&"POST".into(), None), "POST");
        assert_eq!(span_name(&"_OTHER".into(), Some("/x")), "HTTP /x");
    }
}
