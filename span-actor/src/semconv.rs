//! Rules of the OpenTelemetry HTTP semantic conventions (stable, v1.23+)
//! that do not depend on configuration.

use ipc_schema::{SpanKind, Text};

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

/// Span status ERROR: 5xx for servers; 4xx and 5xx for clients.
pub fn is_error(kind: SpanKind, status: u16) -> bool {
    match kind {
        SpanKind::Server => (500..600).contains(&status),
        SpanKind::Client => (400..600).contains(&status),
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
