//! The service graph, in the names and labels of Grafana Tempo's metrics
//! generator (its `servicegraphs` processor) and of OpenTelemetry eBPF
//! Instrumentation (OBI): `traces_service_graph_request_total`,
//! `traces_service_graph_request_failed_total`,
//! `traces_service_graph_request_server_seconds` and
//! `traces_service_graph_request_client_seconds`, labels `client`,
//! `server`, `connection_type`. Grafana draws its service graph from these.
//!
//! Semantics are Tempo's: an edge is one call whose two ends are known;
//! it counts once in `…_request_total`, once in `…_failed_total` when
//! either end's span status is ERROR, and its server and client spans'
//! durations go to the two histograms. Tempo pairs spans itself, in a
//! store that waits for the second end; ringtail pairs nothing here: the
//! span-actor joined the two ends exactly and put the client's end on the
//! server span (`ipc_schema::Edge`), so an edge is recorded when that span
//! arrives. The edges ringtail knows for certain ([`edge_of`], the one
//! place that decides):
//! - a SERVER span joined to the CLIENT span on this host that called it:
//!   `client` is the caller's `service.name`, `server` the server's,
//!   `connection_type` empty (Tempo's value for a direct call);
//! - a call `probe.carrier` took on this host (the kernel decided both
//!   spans' ids, so they are not joined): its edge is on whichever span
//!   came second, a SERVER span as above, or the CLIENT span, its peer
//!   the server (`client` the span's own service);
//! - a database call (a CLIENT span with a `DbCall`): `server` is the
//!   address it went to (`server.address`, as Tempo names a database it
//!   has no span of), `connection_type="database"`, both durations the
//!   call's.
//!
//! Not made from messaging calls: Tempo's messaging edge
//! (`connection_type="messaging_system"`) joins a PRODUCER span to the
//! CONSUMER span that received its message, in whichever services they
//! are; ringtail sees each end alone (a consumer span only links to the
//! producer's context, it has no edge), and a client→broker edge like the
//! database one is not what Tempo draws: the broker would stand where
//! the consuming service should.
//!
//! Not made (Tempo makes them by guessing, after its wait): `virtual_node`
//! edges (a root server span called by `user`, a client span to an
//! uninstrumented peer). OBI's difference: it counts a failed call once
//! per failed end and skips self-references; ringtail counts as Tempo.
//!
//! Buckets are OBI's defaults ([`BUCKETS`]: its duration buckets, for the
//! same metric names), not Tempo's (0.1 s × 2^k, too coarse for calls on
//! one host). Over OTLP the histograms are named as OBI names them
//! (`traces_service_graph_request_server`, unit `s`: a Prometheus
//! translation appends `_seconds`), the counters with their `_total`, as
//! OBI does. Edges are the host's, not a service's: they go on ringtail's
//! own resource, and on `/metrics` with exactly the three labels.
//!
//! Bounded as every series (see [`super`]): at most [`MAX_EDGES`] edges
//! (each one series of the [`super::MAX_SERIES`] in all); past them an
//! overflow edge (`otel.metric.overflow = true`), counted
//! (`ringtail_metric_series_overflow_total`); idle edges are forgotten.

use ipc_schema::{Call, ServiceResource, Span, SpanKind, Value};

use super::bounded::{Bounded, Recorded};
use super::Point;

/// `traces_service_graph_request_total` (a counter; the same name over OTLP).
pub const REQUEST_TOTAL: &str = "traces_service_graph_request_total";
/// `traces_service_graph_request_failed_total` (a counter).
pub const REQUEST_FAILED_TOTAL: &str = "traces_service_graph_request_failed_total";
/// The server ends' durations: OTLP name (unit `s`); on Prometheus
/// `traces_service_graph_request_server_seconds`.
pub const SERVER: &str = "traces_service_graph_request_server";
/// The client ends' durations: OTLP name (unit `s`); on Prometheus
/// `traces_service_graph_request_client_seconds`.
pub const CLIENT: &str = "traces_service_graph_request_client";
/// OBI's default duration buckets (seconds), for both histograms.
pub const BUCKETS: [f64; 15] = [0.0, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
/// Edges kept; more go to the overflow edge.
pub const MAX_EDGES: usize = 2000;
/// `connection_type` of a database call, as Tempo names it.
pub const DATABASE: &str = "database";

/// An edge: who called whom, how.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EdgeKey {
    pub client: Box<str>,
    pub server: Box<str>,
    pub connection_type: &'static str,
}

impl EdgeKey {
    /// Its labels, in Tempo's order.
    pub fn labels(&self, mut f: impl FnMut(&'static str, Value<&str>)) {
        f("client", Value::Str(&self.client));
        f("server", Value::Str(&self.server));
        f("connection_type", Value::Str(self.connection_type));
    }
}

/// What one span says of an edge: its two ends' names and durations (ns),
/// and whether it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed<'a> {
    pub client: &'a str,
    pub server: &'a str,
    pub connection_type: &'static str,
    pub client_ns: u64,
    pub server_ns: u64,
    pub failed: bool,
}

/// The edge span `s` (of service `res`) completes, if any: the one place
/// that decides which spans make an edge (see the module doc).
pub fn edge_of<'a>(res: &'a ServiceResource, s: &'a Span<&'a str>) -> Option<Observed<'a>> {
    let own_ns = s.end_unix_ns.saturating_sub(s.start_unix_ns);
    match (s.kind, &s.edge, &s.call) {
        (SpanKind::Server, Some(e), _) => Some(Observed {
            client: e.peer_service,
            server: &res.service_name,
            connection_type: "",
            client_ns: e.peer_duration_ns,
            server_ns: own_ns,
            failed: s.error || e.peer_error,
        }),
        (SpanKind::Client, Some(e), Call::Http(_) | Call::Rpc(..)) => Some(Observed {
            client: &res.service_name,
            server: e.peer_service,
            connection_type: "",
            client_ns: own_ns,
            server_ns: e.peer_duration_ns,
            failed: s.error || e.peer_error,
        }),
        (SpanKind::Client, None, Call::Db(_)) => Some(Observed {
            client: &res.service_name,
            server: s.server_address.unwrap_or(s.peer_address),
            connection_type: DATABASE,
            client_ns: own_ns,
            server_ns: own_ns,
            failed: s.error,
        }),
        _ => None,
    }
}

/// One edge's numbers.
#[derive(Debug, Clone)]
pub struct EdgePoint {
    /// The server ends' histogram; its count is `…_request_total`.
    pub server: Point,
    /// The client ends' histogram (its count is the same).
    pub client: Point,
    /// `…_request_failed_total`.
    pub failed: u64,
}

impl EdgePoint {
    fn new(now: u64) -> EdgePoint {
        EdgePoint { server: Point::new(now, &BUCKETS), client: Point::new(now, &BUCKETS), failed: 0 }
    }

    fn record(&mut self, o: &Observed<'_>, now: u64) {
        self.server.record(o.server_ns as f64 / 1e9, now);
        self.client.record(o.client_ns as f64 / 1e9, now);
        self.failed += u64::from(o.failed);
    }

    /// When it was last updated (Unix ns).
    pub fn last_ns(&self) -> u64 {
        self.server.last_ns
    }
}

impl Recorded for EdgePoint {
    fn last_ns(&self) -> u64 {
        self.server.last_ns
    }
}

/// Every edge of the host.
#[derive(Debug, Default)]
pub struct Graph {
    edges: Bounded<EdgeKey, EdgePoint>,
}

fn hash(client: &str, server: &str, connection_type: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    (client, server, connection_type).hash(&mut h);
    h.finish()
}

impl Graph {
    /// Records edge `o` at `now`; false if it went to the overflow edge.
    /// `total` is the series count of every store ([`super::MAX_SERIES`]).
    pub fn record(&mut self, o: &Observed<'_>, now: u64, total: &mut usize) -> bool {
        let h = hash(o.client, o.server, o.connection_type);
        let is = |k: &EdgeKey| &*k.client == o.client && &*k.server == o.server && k.connection_type == o.connection_type;
        let key = || EdgeKey { client: o.client.into(), server: o.server.into(), connection_type: o.connection_type };
        self.edges.record(h, is, key, || EdgePoint::new(now), |p| p.record(o, now), MAX_EDGES, total)
    }

    /// Every edge (`None`: the overflow edge) with its numbers.
    pub fn edges(&self) -> impl Iterator<Item = (Option<&EdgeKey>, &EdgePoint)> {
        self.edges.series()
    }

    /// Edges held, the overflow one included.
    pub fn len(&self) -> usize {
        self.edges.len()
    }

    /// True when no edge is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets edges last updated before `cutoff`; how many.
    pub fn evict(&mut self, cutoff: u64) -> usize {
        self.edges.evict(cutoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::Edge;

    fn res(name: &str) -> ServiceResource {
        ServiceResource {
            service_name: name.into(),
            service_instance_id: "h:1".into(),
            host_name: "h".into(),
            pid: 1,
            executable_name: name.into(),
            extra: vec![],
        }
    }

    #[test]
    fn server_spans_with_a_caller_carried_calls_and_database_calls_make_edges_nothing_else() {
        let back = res("back");
        let mut s = crate::meters::tests::span("/b", 30, 503);
        s.edge = Some(Edge { peer_service: "front".into(), peer_duration_ns: 40_000_000, peer_error: false });
        let b = s.as_borrowed();
        assert_eq!(
            edge_of(&back, &b),
            Some(Observed {
                client: "front",
                server: "back",
                connection_type: "",
                client_ns: 40_000_000,
                server_ns: 30_000_000,
                failed: true
            })
        );
        let plain = crate::meters::tests::span("/b", 30, 200);
        assert_eq!(edge_of(&back, &plain.as_borrowed()), None, "a server span joined to no caller");
        let mut client = crate::meters::tests::span("/b", 30, 200);
        client.kind = SpanKind::Client;
        assert_eq!(edge_of(&back, &client.as_borrowed()), None, "an HTTP client span: its server makes the edge");
        // a carried call whose server span came first: the client completes it
        client.edge = Some(Edge { peer_service: "next".into(), peer_duration_ns: 10_000_000, peer_error: true });
        assert_eq!(
            edge_of(&back, &client.as_borrowed()),
            Some(Observed {
                client: "back",
                server: "next",
                connection_type: "",
                client_ns: 30_000_000,
                server_ns: 10_000_000,
                failed: true
            })
        );
        let db = crate::meters::tests::db_span(2, Some("42601"));
        let d = db.as_borrowed();
        let o = edge_of(&back, &d).expect("a database call is an edge");
        assert_eq!(
            (o.client, o.server, o.connection_type, o.client_ns, o.server_ns, o.failed),
            ("back", "db.internal", DATABASE, 2_000_000, 2_000_000, true)
        );
    }

    #[test]
    fn edges_count_once_fail_once_and_overflow_past_the_cap() {
        let mut g = Graph::default();
        let mut total = 0;
        let o = |c: &'static str, failed| Observed {
            client: c,
            server: "b",
            connection_type: "",
            client_ns: 7_000_000,
            server_ns: 3_000_000,
            failed,
        };
        assert!(g.record(&o("a", false), 1, &mut total));
        assert!(g.record(&o("a", true), 2, &mut total));
        let (k, p) = g.edges().next().unwrap();
        assert_eq!(k.map(|k| (&*k.client, &*k.server, k.connection_type)), Some(("a", "b", "")));
        assert_eq!((p.server.count, p.client.count, p.failed), (2, 2, 1));
        assert!((p.server.sum - 0.006).abs() < 1e-12 && (p.client.sum - 0.014).abs() < 1e-12);
        assert_eq!(p.server.buckets[1], 2, "3 ms is in (0, 0.005]");
        let names: Vec<String> = (0..MAX_EDGES + 2).map(|i| format!("c{i}")).collect();
        let mut over = 0;
        for n in &names {
            let o = Observed { client: n, server: "b", connection_type: "", client_ns: 1, server_ns: 1, failed: false };
            over += usize::from(!g.record(&o, 3, &mut total));
        }
        assert_eq!((g.len(), over, total), (MAX_EDGES + 1, 3, MAX_EDGES + 1));
        assert_eq!(g.evict(3), 1, "only the edge last seen at 2");
        assert_eq!(g.len(), MAX_EDGES);
    }
}
