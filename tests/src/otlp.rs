//! What a real OTLP receiver ([`crate::Rotel`]) got, checked exactly.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{attr, wait_until, Ringtail, Rotel, Value};

/// (kind, scheme, method, path, status) of a span at the receiver.
pub type Key = (String, String, String, String, u16);

/// A span's [`Key`]: kind `server` (OTLP kind 2) or `client`.
pub fn key(s: &Value) -> Key {
    let kind = if s["kind"] == 2 { "server" } else { "client" };
    (
        kind.to_owned(),
        attr(s, "url.scheme").unwrap_or_default(),
        attr(s, "http.request.method").unwrap_or_default(),
        attr(s, "url.path").unwrap_or_default(),
        attr(s, "http.response.status_code").and_then(|v| v.parse().ok()).unwrap_or_default(),
    )
}

/// A [`Key`] from its parts.
pub fn k(kind: &str, scheme: &str, method: &str, path: &str, status: u16) -> Key {
    (kind.into(), scheme.into(), method.into(), path.into(), status)
}

/// Whether a span is of an exchange with the server on `port` (a server
/// span of that server, or a client span of a call to it).
pub fn on_port(s: &Value, port: u16) -> bool {
    attr(s, "server.port").is_some_and(|p| p == port.to_string())
}

/// Waits (up to `wait`) until the receiver has `want.values().sum()` spans
/// that `ours` keeps, lets more arrive for `settle`, and checks them
/// against `want` exactly; returns them.
pub fn expect_spans(
    rotel: &Rotel,
    rt: &Ringtail,
    (wait, settle): (Duration, Duration),
    ours: impl Fn(&Value) -> bool,
    want: &[(Key, usize)],
) -> Vec<Value> {
    let n: usize = want.iter().map(|(_, n)| n).sum();
    wait_until(wait, || (rotel.spans().iter().filter(|s| ours(s)).count() >= n).then_some(())).unwrap_or_else(|| {
        panic!("the receiver got {:?}\nstdout:\n{}\nlog:\n{}", rotel.spans().iter().map(key).collect::<Vec<_>>(), rt.stdout(), rt.log())
    });
    std::thread::sleep(settle);
    let spans: Vec<Value> = rotel.spans().into_iter().filter(|s| ours(s)).collect();
    let mut got: BTreeMap<Key, usize> = BTreeMap::new();
    for s in &spans {
        *got.entry(key(s)).or_default() += 1;
    }
    let want: BTreeMap<Key, usize> = want.iter().cloned().collect();
    assert_eq!(got, want, "stdout:\n{}", rt.stdout());
    spans
}
