//! `http.route`: from configured templates, or derived from the path, with
//! a hard cap on distinct routes per service.
//!
//! Routes become span names and metric labels, so their number must stay
//! bounded whatever the traffic: past `max_cardinality` distinct derived
//! routes a service's new ones all become [`OVERFLOW_ROUTE`], and a counter
//! says how often that happened.
//!
//! The budget is spent only on routes that exist: a configured template
//! always keeps its name and costs nothing (the configuration bounds them);
//! a path that matches no template and was answered 4xx (a scanner's
//! 20,000 `/wp-admin.php`-style 404s) gets no `http.route` at all, unless
//! its derived route was already earned by a request that was not 4xx
//! (`/users/*` answered 404 for a missing user stays `/users/*`). So a scan
//! never pushes the real routes that come after it into the overflow.
//!
//! Service names are any local user's choice (`OTEL_SERVICE_NAME`), and
//! each brings a budget of its own, so the services are bounded too: at
//! most `routes.max_services`, and [`MAX_ROUTE_BYTES`] of routes and names
//! in all. Past either, the least recently routed service is forgotten
//! (counted, [`Router::take_evicted`]); if it comes back it earns its
//! routes again.
//!
//! A service's routes are remembered by a 64-bit keyed hash (SipHash, a
//! key of this process's drawn at start), not by their text: 21 bytes a
//! route in place of up to 2 KiB, and nothing of them lies scattered over
//! the allocator's pages. Each kept string of a route pinned a page shared
//! with short-lived ones: 60 services' routes, counted 16 MiB, kept 27 MiB
//! resident after they were forgotten (span-actor/tests/memory.rs). No one
//! can make two routes collide without the key; if two ever did, the
//! second would spend no budget, nothing worse.

use std::hash::{BuildHasher, Hasher};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use ringtail_config::{IgnoreMode, RouteSettings, RouteTemplate, UnmatchedRoutes};

/// The route every route past the cardinality cap becomes.
pub const OVERFLOW_ROUTE: &str = "/{overflow}";

/// Bytes of routes and service names remembered, all services together,
/// as allocated with their tables' slots (a derived route is up to a
/// path's length, 2 KiB on HTTP/2).
pub const MAX_ROUTE_BYTES: usize = 16 << 20;

/// What a remembered route costs: its hash's slot in the service's set (a
/// hash table may hold 16/7 slots per entry).
const ROUTE_SLOT: usize = runtime_kit::memory::table_slot(std::mem::size_of::<u64>());

/// What a service costs besides its name's allocation and its routes: its
/// slot in the table of services, and its routes' set's own header.
const SERVICE_SLOT: usize = runtime_kit::memory::table_slot(std::mem::size_of::<(String, Service)>()) + 64;

/// What a service's name takes: its bytes as allocated, and its slot.
fn name_cost(s: &str) -> usize {
    runtime_kit::memory::allocated(s.len()) + SERVICE_SLOT
}

/// The routes one service earned.
struct Service {
    /// Its routes' keyed hashes ([`Router::key`]).
    routes: HashSet<u64>,
    /// Its name's bytes as allocated and its routes, with their slots
    /// ([`SERVICE_SLOT`], [`ROUTE_SLOT`]).
    bytes: usize,
    /// When it was last routed ([`Router::tick`]).
    last: u64,
}

/// What the router decided for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// `http.route`, if any.
    pub route: Option<String>,
    pub export_trace: bool,
    pub export_metrics: bool,
    /// The route was replaced by [`OVERFLOW_ROUTE`].
    pub overflowed: bool,
}

/// Routes for every service, with per-service cardinality accounting.
pub struct Router {
    patterns: Vec<RouteTemplate>,
    ignored: Vec<RouteTemplate>,
    ignore_mode: IgnoreMode,
    unmatched: UnmatchedRoutes,
    max: usize,
    max_services: usize,
    seen: HashMap<String, Service>,
    /// Bytes of every service in `seen`.
    bytes: usize,
    /// Counts routings, to tell the least recently routed service.
    tick: u64,
    /// Services forgotten since [`Router::take_evicted`].
    evicted: u64,
    /// The key routes are hashed with (SipHash-1-3, drawn at start).
    keys: std::collections::hash_map::RandomState,
}

impl Router {
    /// A router for the (already compiled) templates.
    pub fn new(s: &RouteSettings) -> Router {
        Router {
            patterns: s.patterns.clone(),
            ignored: s.ignored.clone(),
            ignore_mode: s.ignore_mode,
            unmatched: s.unmatched,
            max: s.max_cardinality,
            max_services: s.max_services,
            seen: HashMap::default(),
            bytes: 0,
            tick: 0,
            evicted: 0,
            keys: std::collections::hash_map::RandomState::new(),
        }
    }

    /// A route's keyed hash.
    fn key(&self, route: &str) -> u64 {
        let mut h = self.keys.build_hasher();
        h.write(route.as_bytes());
        h.finish()
    }

    /// Forgets the least recently routed service other than `keep`; false
    /// if there is none.
    fn evict_one(&mut self, keep: &str) -> bool {
        let oldest =
            self.seen.iter().filter(|(name, _)| name.as_str() != keep).min_by_key(|(_, svc)| svc.last).map(|(name, _)| name.clone());
        let Some(name) = oldest else { return false };
        if let Some(svc) = self.seen.remove(&name) {
            self.bytes -= svc.bytes;
            self.evicted += 1;
        }
        true
    }

    /// Room for `more` bytes of `keep`'s, forgetting other services as
    /// needed; false if `keep` alone would exceed [`MAX_ROUTE_BYTES`].
    fn make_room(&mut self, keep: &str, more: usize) -> bool {
        while self.bytes + more > MAX_ROUTE_BYTES {
            if !self.evict_one(keep) {
                return false;
            }
        }
        true
    }

    /// Routes `path` of a request answered `status` for `service`; `None` =
    /// ignored for both traces and metrics.
    pub fn route(&mut self, service: &str, path: &str, status: u16) -> Option<Routed> {
        let (mut export_trace, mut export_metrics) = (true, true);
        if self.ignored.iter().any(|t| t.matches(path)) {
            match self.ignore_mode {
                IgnoreMode::All => return None,
                IgnoreMode::Traces => export_trace = false,
                IgnoreMode::Metrics => export_metrics = false,
            }
        }
        if let Some(t) = self.patterns.iter().find(|t| t.matches(path)) {
            return Some(Routed { route: Some(t.as_str().to_owned()), export_trace, export_metrics, overflowed: false });
        }
        let fixed = |route: Option<&str>| Some(Routed { route: route.map(str::to_owned), export_trace, export_metrics, overflowed: false });
        match self.unmatched {
            UnmatchedRoutes::Path => return fixed(None),
            UnmatchedRoutes::Wildcard => return fixed(Some("/*")),
            UnmatchedRoutes::Heuristic => {}
        }
        let r = heuristic_route(path);
        let key = self.key(&r);
        self.tick += 1;
        if !self.seen.contains_key(service) {
            let bytes = name_cost(service);
            if self.seen.len() >= self.max_services {
                self.evict_one(service);
            }
            if !self.make_room(service, bytes) {
                return fixed(Some(OVERFLOW_ROUTE)).map(|d| Routed { overflowed: true, ..d });
            }
            self.bytes += bytes;
            self.seen.insert(service.to_owned(), Service { routes: HashSet::default(), bytes, last: self.tick });
        }
        let known = self.seen.get_mut(service).map(|svc| {
            svc.last = self.tick;
            (svc.routes.contains(&key), svc.routes.len())
        });
        // Inserted just above when missing.
        let Some((known, len)) = known else { return fixed(Some(&r)) };
        let (route, overflowed) = if known {
            (Some(r), false)
        } else if (400..500).contains(&status) {
            (None, false) // not a route this service has shown it has: no budget spent
        } else if len < self.max && self.make_room(service, ROUTE_SLOT) {
            if let Some(svc) = self.seen.get_mut(service) {
                svc.bytes += ROUTE_SLOT;
                svc.routes.insert(key);
                self.bytes += ROUTE_SLOT;
            }
            (Some(r), false)
        } else {
            (Some(OVERFLOW_ROUTE.to_owned()), true)
        };
        Some(Routed { route, export_trace, export_metrics, overflowed })
    }

    /// Distinct routes kept for `service`.
    pub fn cardinality(&self, service: &str) -> usize {
        self.seen.get(service).map_or(0, |svc| svc.routes.len())
    }

    /// Services whose routes are remembered.
    pub fn services(&self) -> usize {
        self.seen.len()
    }

    /// Bytes of the routes and names remembered, all services together.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Services forgotten since the last call (to be counted).
    pub fn take_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }
}

/// The path with id-like segments replaced by `*`.
pub fn heuristic_route(path: &str) -> String {
    if path.is_empty() || path == "*" {
        return path.to_owned();
    }
    let mut out = String::with_capacity(path.len());
    let mut rest = path.trim_start_matches('/');
    let mut first = !path.starts_with('/');
    // (segments found byte by byte: they are short, and a `split('/')`
    // set up a memchr search for each)
    loop {
        let end = rest.bytes().position(|b| b == b'/').unwrap_or(rest.len());
        let seg = &rest[..end];
        if !first {
            out.push('/');
        }
        first = false;
        out.push_str(if looks_like_id(seg) { "*" } else { seg });
        if end == rest.len() {
            return out;
        }
        rest = &rest[end + 1..];
    }
}

/// Numbers, UUIDs, hex strings, and long tokens that mix letters and digits.
pub fn looks_like_id(seg: &str) -> bool {
    let b = seg.as_bytes();
    if b.is_empty() {
        return false;
    }
    // every class counted in one pass
    let (mut digits, mut letters, mut hex, mut token) = (0usize, 0usize, 0usize, 0usize);
    for &c in b {
        digits += usize::from(c.is_ascii_digit());
        letters += usize::from(c.is_ascii_alphabetic());
        hex += usize::from(c.is_ascii_hexdigit());
        token += usize::from(c.is_ascii_alphanumeric() || b"-_=.~".contains(&c));
    }
    if digits == b.len() {
        return true; // 123
    }
    if b.len() == 36 && b.iter().enumerate().all(|(i, c)| if [8, 13, 18, 23].contains(&i) { *c == b'-' } else { c.is_ascii_hexdigit() }) {
        return true; // UUID
    }
    if b.len() >= 8 && digits > 0 && hex == b.len() {
        return true; // deadbeef01
    }
    if b.len() >= 16 && digits > 0 && letters > 0 && token == b.len() {
        return true; // tokens, base64url ids
    }
    // Mostly digits with a little decoration: v2-000123, 2024-01-02
    b.len() >= 4 && digits * 2 > b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(f: impl FnOnce(&mut RouteSettings)) -> Router {
        let mut s = RouteSettings::default();
        f(&mut s);
        Router::new(&s)
    }

    #[test]
    fn templates_match_whole_segments() {
        let mut r = router(|s| s.patterns = vec!["/users/{id}".parse().unwrap(), "/static/*".parse().unwrap(), "/".parse().unwrap()]);
        let route = |r: &mut Router, p: &str| r.route("svc", p, 200).unwrap().route;
        assert_eq!(route(&mut r, "/users/42").as_deref(), Some("/users/{id}"));
        assert_eq!(route(&mut r, "/static/css/a.css").as_deref(), Some("/static/*"));
        assert_eq!(route(&mut r, "/").as_deref(), Some("/"));
        // no template: heuristic (the default)
        assert_eq!(route(&mut r, "/users/42/orders/7").as_deref(), Some("/users/*/orders/*"));
        assert_eq!(route(&mut r, "/users/").as_deref(), Some("/users/"));
    }

    #[test]
    fn unmatched_modes() {
        let mut r = router(|s| s.unmatched = UnmatchedRoutes::Path);
        assert_eq!(r.route("s", "/a/1", 200).unwrap().route, None);
        let mut r = router(|s| s.unmatched = UnmatchedRoutes::Wildcard);
        assert_eq!(r.route("s", "/a/1", 200).unwrap().route.as_deref(), Some("/*"));
    }

    #[test]
    fn ignored_routes_by_mode() {
        let mut r = router(|s| s.ignored = vec!["/health".parse().unwrap(), "/metrics".parse().unwrap()]);
        assert_eq!(r.route("s", "/health", 200), None);
        assert!(r.route("s", "/healthz", 200).is_some());
        let mut r = router(|s| {
            s.ignored = vec!["/health".parse().unwrap()];
            s.ignore_mode = IgnoreMode::Traces;
        });
        let d = r.route("s", "/health", 200).unwrap();
        assert!(!d.export_trace && d.export_metrics);
        let mut r = router(|s| {
            s.ignored = vec!["/health".parse().unwrap()];
            s.ignore_mode = IgnoreMode::Metrics;
        });
        let d = r.route("s", "/health", 200).unwrap();
        assert!(d.export_trace && !d.export_metrics);
    }

    #[test]
    fn a_404_scan_spends_no_budget_and_real_routes_keep_theirs() {
        let mut r = router(|s| {
            s.max_cardinality = 10;
            s.patterns = vec!["/api/users/{id}".parse().unwrap()];
        });
        assert_eq!(r.route("svc", "/users/1", 200).unwrap().route.as_deref(), Some("/users/*"));
        for i in 0..20_000 {
            // words, not ids: each would be a route of its own
            let seg: String = format!("{i:05}").bytes().map(|b| (b'a' + (b - b'0')) as char).collect();
            let d = r.route("svc", &format!("/scan/{seg}.php"), 404).unwrap();
            assert_eq!(d.route, None, "an unmatched 4xx has no route");
            assert!(!d.overflowed);
        }
        assert_eq!(r.cardinality("svc"), 1, "only the route earned before the scan");
        // an earned route keeps its name when it answers 404
        assert_eq!(r.route("svc", "/users/999", 404).unwrap().route.as_deref(), Some("/users/*"));
        // configured templates keep their names, 4xx or not, and cost nothing
        assert_eq!(r.route("svc", "/api/users/7", 404).unwrap().route.as_deref(), Some("/api/users/{id}"));
        assert_eq!(r.route("svc", "/api/users/8", 200).unwrap().route.as_deref(), Some("/api/users/{id}"));
        // real routes after the scan get their own route
        for i in 0..9 {
            let p = format!("/real/{}", ["a", "b", "c", "d", "e", "f", "g", "h", "i"][i]);
            assert_eq!(r.route("svc", &p, 200).unwrap().route, Some(p));
        }
        assert_eq!(r.cardinality("svc"), 10);
        // the budget itself still holds
        let d = r.route("svc", "/real/j", 200).unwrap();
        assert!(d.overflowed);
        assert_eq!(d.route.as_deref(), Some(OVERFLOW_ROUTE));
        // 5xx spends budget like 2xx: a failing route is still a route
        let mut r = router(|s| s.max_cardinality = 1);
        assert_eq!(r.route("svc", "/boom", 503).unwrap().route.as_deref(), Some("/boom"));
        assert!(r.route("svc", "/other", 200).unwrap().overflowed);
    }

    /// Names chosen by local users, each with its routes: at most
    /// `max_services` are remembered, the least recently routed goes, and
    /// a service that comes back earns its routes again.
    #[test]
    fn services_are_bounded_least_recently_routed_first() {
        let mut r = router(|s| s.max_services = 4);
        for i in 0..4 {
            r.route(&format!("svc{i}"), "/a", 200);
        }
        r.route("svc0", "/b", 200); // svc0 is now the most recent
        for i in 4..10 {
            r.route(&format!("svc{i}"), "/a", 200);
            assert!(r.services() <= 4);
        }
        assert_eq!(r.take_evicted(), 6);
        assert_eq!(r.take_evicted(), 0, "counted once");
        assert_eq!(r.services(), 4);
        assert_eq!(r.cardinality("svc1"), 0, "the least recently routed went first");
        assert_eq!(r.cardinality("svc0"), 0, "then, in turn, the others");
        assert_eq!(r.cardinality("svc9"), 1);
    }

    /// Long routes under many names: a route costs its hash's slot, not
    /// its length; and the bytes held stay under [`MAX_ROUTE_BYTES`]
    /// whatever the number of services (limits raised so that the bytes,
    /// not the counts, bind).
    #[test]
    fn route_bytes_are_bounded_across_services() {
        let mut r = router(|s| s.max_cardinality = 500);
        let long = "x".repeat(1900);
        // words, not ids: each a route of its own
        let word = |i: usize| format!("{i:04}").bytes().map(|b| (b'a' + (b - b'0')) as char).collect::<String>();
        for svc in 0..40 {
            for i in 0..500 {
                let d = r.route(&format!("svc{svc}"), &format!("/{long}{}", word(i)), 200).unwrap();
                assert!(!d.overflowed, "the service being routed keeps its budget");
            }
        }
        assert_eq!((r.services(), r.take_evicted()), (40, 0));
        assert!(r.bytes() < 40 * 500 * 32, "20,000 routes of 1.9 KB hold {} bytes", r.bytes());
        let mut r = router(|s| {
            s.max_cardinality = 100_000;
            s.max_services = 100_000;
        });
        for svc in 0..12 {
            for i in 0..80_000 {
                let d = r.route(&format!("svc{svc}"), &format!("/{}", word(i)), 200).unwrap();
                assert!(r.bytes() <= MAX_ROUTE_BYTES);
                assert!(!d.overflowed, "the service being routed keeps its budget");
            }
        }
        let evicted = r.take_evicted();
        assert!(evicted > 0 && r.services() < 12, "{evicted} evicted, {} left", r.services());
        assert_eq!(r.cardinality("svc11"), 80_000);
    }

    #[test]
    fn heuristic_replaces_ids() {
        for (path, want) in [
            ("/users/123", "/users/*"),
            ("/o/3f2b8c1e-9d4a-4b5e-8f6a-1c2d3e4f5a6b/items", "/o/*/items"),
            ("/blob/deadbeef0123", "/blob/*"),
            ("/s/aZ3kQ9xY2mN8pL4vB7", "/s/*"),
            ("/api/v1/users", "/api/v1/users"),
            ("/day/2024-01-02", "/day/*"),
            ("/static/app.min.js", "/static/app.min.js"),
            ("/", "/"),
        ] {
            assert_eq!(heuristic_route(path), want, "{path}");
        }
    }

    #[test]
    fn cardinality_cap_holds_against_100k_random_paths() {
        use rand::{Rng, SeedableRng};
        let mut r = router(|s| s.max_cardinality = 100);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut overflowed = 0;
        let mut routes = std::collections::HashSet::new();
        for _ in 0..100_000 {
            // random words, not ids, so the heuristic cannot collapse them
            let seg: String = (0..rng.random_range(3..10)).map(|_| rng.random_range(b'a'..=b'z') as char).collect();
            let d = r.route("svc", &format!("/{seg}"), 200).unwrap();
            overflowed += u32::from(d.overflowed);
            routes.insert(d.route.unwrap());
        }
        assert_eq!(r.cardinality("svc"), 100);
        assert_eq!(routes.len(), 101, "100 routes plus the overflow value");
        assert!(routes.contains(OVERFLOW_ROUTE));
        assert!(overflowed > 99_000);
        // another service has its own budget
        assert!(!r.route("other", "/x", 200).unwrap().overflowed);
    }
}
