//! What a real OTLP receiver ([`crate::Rotel`]) got, checked exactly:
//! HTTP spans by [`Key`], messaging spans by [`MsgKey`].

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use crate::{attr, last_lines, wait_until, Ringtail, Rotel, Value};

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

/// OTLP's span kinds, as the receiver writes them (`kind`): a server's.
pub const SERVER: u64 = 2;
/// A client's call (and a messaging subscribe, commit or ack).
pub const CLIENT: u64 = 3;
/// A message sent.
pub const PRODUCER: u64 = 4;
/// A message received.
pub const CONSUMER: u64 = 5;

/// What a messaging span is compared by: its kind, name, system,
/// operation type and destination.
pub type MsgKey = (u64, String, Option<String>, Option<String>, Option<String>);

/// A messaging span's [`MsgKey`].
pub fn msg_key(s: &Value) -> MsgKey {
    (
        s["kind"].as_u64().unwrap_or_default(),
        s["name"].as_str().unwrap_or_default().to_owned(),
        attr(s, "messaging.system"),
        attr(s, "messaging.operation.type"),
        attr(s, "messaging.destination.name"),
    )
}

/// A [`MsgKey`] from its parts.
pub fn msg_k(system: &str, kind: u64, name: &str, op_type: Option<&str>, destination: Option<&str>) -> MsgKey {
    (kind, name.to_owned(), Some(system.to_owned()), op_type.map(str::to_owned), destination.map(str::to_owned))
}

/// Whether a span is of an exchange with the server on `port` (a server
/// span of that server, or a client span of a call to it).
pub fn on_port(s: &Value, port: u16) -> bool {
    attr(s, "server.port").is_some_and(|p| p == port.to_string())
}

/// Waits (up to `wait`) until the receiver has `want.values().sum()` spans
/// that `ours` keeps, lets more arrive for `settle`, and checks them
/// against `want` exactly, by [`Key`]; returns them.
pub fn expect_spans(
    rotel: &Rotel,
    rt: &Ringtail,
    (wait, settle): (Duration, Duration),
    ours: impl Fn(&Value) -> bool,
    want: &[(Key, usize)],
) -> Vec<Value> {
    expect_spans_by(rotel, rt, (wait, settle), ours, key, want)
}

/// [`expect_spans`], the spans compared by `key` ([`msg_key`] for
/// messaging spans). A failure says which keys differ and how the spans
/// fall by kind and `server.port`, then the log's end (CI shows only part
/// of a failure's output: no whole dumps).
pub fn expect_spans_by<K: Ord + Clone + Debug>(
    rotel: &Rotel,
    rt: &Ringtail,
    (wait, settle): (Duration, Duration),
    ours: impl Fn(&Value) -> bool,
    key: impl Fn(&Value) -> K,
    want: &[(K, usize)],
) -> Vec<Value> {
    let n: usize = want.iter().map(|(_, n)| n).sum();
    let want: BTreeMap<K, usize> = want.iter().cloned().collect();
    let ours_now = || rotel.spans().into_iter().filter(|s| ours(s)).collect::<Vec<Value>>();
    wait_until(wait, || (ours_now().len() >= n).then_some(())).unwrap_or_else(|| {
        let spans = ours_now();
        panic!(
            "the receiver got {} of the {n} spans wanted in {wait:?}\n{}\nringtail's counters:\n{}\nthe log's end:\n{}",
            spans.len(),
            differences(&want, &spans, &key),
            rt.counters(),
            last_lines(&rt.log(), 40)
        )
    });
    std::thread::sleep(settle);
    let spans = ours_now();
    assert!(
        counts(&spans, &key) == want,
        "the receiver's {} spans are not the {n} wanted\n{}\nringtail's counters:\n{}\nthe exporter's last lines:\n{}",
        spans.len(),
        differences(&want, &spans, &key),
        rt.counters(),
        last_lines(&rt.stdout(), 20)
    );
    spans
}

/// How many spans of each key.
fn counts<K: Ord>(spans: &[Value], key: impl Fn(&Value) -> K) -> BTreeMap<K, usize> {
    let mut got: BTreeMap<K, usize> = BTreeMap::new();
    for s in spans {
        *got.entry(key(s)).or_default() += 1;
    }
    got
}

/// The keys whose count differs (at most 30 of them), and the spans by
/// kind and `server.port`.
fn differences<K: Ord + Debug>(want: &BTreeMap<K, usize>, spans: &[Value], key: impl Fn(&Value) -> K) -> String {
    let got = counts(spans, &key);
    let keys: std::collections::BTreeSet<&K> = want.keys().chain(got.keys()).collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter_map(|k| {
            let (w, g) = (want.get(k).copied().unwrap_or(0), got.get(k).copied().unwrap_or(0));
            (w != g).then(|| format!("  {k:?}: want {w}, got {g}"))
        })
        .collect();
    let mut by_port: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for s in spans {
        let kind = match s["kind"].as_u64() {
            Some(SERVER) => "server",
            Some(CLIENT) => "client",
            Some(PRODUCER) => "producer",
            Some(CONSUMER) => "consumer",
            _ => "other",
        };
        *by_port.entry((kind, attr(s, "server.port").unwrap_or_default())).or_default() += 1;
    }
    // one span of a key not wanted, whole: what the span-actor made of it
    let stray = spans.iter().find(|s| !want.contains_key(&key(s))).map(|s| {
        let s = s.to_string();
        format!("\na span of a key not wanted: {}", s.chars().take(1500).collect::<String>())
    });
    format!(
        "{} keys differ{}:\n{}\nby (kind, server.port): {by_port:?}{}",
        differ.len(),
        if differ.len() > 30 { ", the first 30" } else { "" },
        differ.iter().take(30).cloned().collect::<Vec<_>>().join("\n"),
        stray.unwrap_or_default()
    )
}
