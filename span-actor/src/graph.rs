//! Service-graph edges the span-actor knows for certain, put on the span
//! that completes each (`ipc_schema::Edge`): the exporter counts them
//! (`traces_service_graph_*`) and pairs nothing itself.
//!
//! An edge today is a SERVER span joined to the CLIENT span on this host
//! that sent its request: the kernel named the request at both ends (the
//! server's event names the client's request), and [`crate::transform`]
//! joins the two spans exactly. Whichever of the two comes second completes
//! the edge, and it is always carried on the server span:
//! - the server span first (the usual order: a server writes its answer
//!   before its client reads it): it waits for the client's context, and
//!   the client span, when it comes, hands its end to it ([`Caller::of`]);
//! - the client span first: its end is kept here ([`Callers`], keyed as
//!   the trace contexts are) for the server span that comes later.
//!
//! A call the carrier took on this host (`probe.carrier`: the kernel
//! decided both spans' ids, so they are not joined) is an edge too: the
//! server span's parent is the client span's id. Whichever comes second
//! completes it ([`Carried`]): the server span when its client end is kept,
//! else the client span, the server's end kept for it under its id (an
//! edge on a CLIENT span names the server as its peer).
//!
//! Every decision about which spans make an edge is in this module's
//! [`Caller::of`], [`Caller::of_server`] and [`Caller::edge`]: where issue
//! 46's one `Span` and its `Call` lands, only these move.

use std::sync::Arc;

use ipc_schema::{Call, Edge, ServiceResource, Span, SpanKind, Text};

/// Client ends kept for server spans that come after them (slots of a
/// direct-mapped table, as many as the trace contexts the join looks up:
/// an end is forgotten no sooner than its context).
pub const CALLERS: usize = 16_384;
/// Ends of carried calls kept for their other end, each way (the two ends
/// come within milliseconds of each other: a server span whose caller is
/// on another host waits for nothing and is soon overwritten).
pub const CARRIED: usize = 4_096;

/// The client end of a call, as its server span takes it (16 bytes: a
/// slot of [`Callers`] is 24).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The client's resource (its `service.name` is the edge's `client`).
    resource: Arc<ServiceResource>,
    /// Its span's duration in ns, and in the top bit whether it failed.
    duration_error: u64,
}

/// The top bit of [`Caller::duration_error`]: the span's status is ERROR.
const ERROR: u64 = 1 << 63;

impl Caller {
    /// The client end that span `s` (of `resource`) is, if it is one: an
    /// HTTP (or gRPC) CLIENT span. A database call's server is not traced
    /// by ringtail: no server span joins it.
    pub fn of(resource: &Arc<ServiceResource>, s: &Span<Text>) -> Option<Caller> {
        (s.kind == SpanKind::Client && !matches!(s.call, Call::Db(_))).then(|| Caller::end(resource, s))
    }

    /// The server end that span `s` (of `resource`) is, if it is one: an
    /// HTTP (or gRPC) SERVER span (for a carried call's client span).
    pub fn of_server(resource: &Arc<ServiceResource>, s: &Span<Text>) -> Option<Caller> {
        (s.kind == SpanKind::Server && matches!(s.call, Call::Http(_) | Call::Rpc(..))).then(|| Caller::end(resource, s))
    }

    /// Span `s`'s end of its call: its service, duration and error.
    fn end(resource: &Arc<ServiceResource>, s: &Span<Text>) -> Caller {
        // (durations past 2^63 ns, 292 years, lose nothing that exists)
        let ns = s.end_unix_ns.saturating_sub(s.start_unix_ns).min(ERROR - 1);
        Caller { resource: Arc::clone(resource), duration_error: ns | if s.error { ERROR } else { 0 } }
    }

    /// The edge this client end makes with server span `s`, if `s` is one.
    pub fn edge(&self, s: &Span<Text>) -> Option<Edge<Text>> {
        (s.kind == SpanKind::Server).then(|| self.peer())
    }

    /// This end as the other end's peer.
    fn peer(&self) -> Edge<Text> {
        Edge {
            peer_service: Text::Owned(self.resource.service_name.clone()),
            peer_duration_ns: self.duration_error & !ERROR,
            peer_error: self.duration_error & ERROR != 0,
        }
    }
}

/// The ends of carried calls waiting for their other end (module doc):
/// client ends by their span id, server ends by their parent's.
pub struct Carried {
    clients: Callers,
    servers: Callers,
}

impl Default for Carried {
    fn default() -> Carried {
        Carried { clients: Callers::with_slots(CARRIED), servers: Callers::with_slots(CARRIED) }
    }
}

impl Carried {
    /// Span `s` (of `resource`, its ids the kernel's) completes its call's
    /// edge if the other end came first (the edge put on it), else its end
    /// is kept for the other.
    pub fn meet(&mut self, resource: &Arc<ServiceResource>, s: &mut Span<Text>) {
        match s.kind {
            SpanKind::Client if s.span_id != 0 && matches!(s.call, Call::Http(_) | Call::Rpc(..)) => match self.servers.take(s.span_id) {
                Some(server) => s.edge = Some(server.peer()),
                None => self.clients.insert(s.span_id, Caller::end(resource, s)),
            },
            SpanKind::Server if s.parent_span_id != 0 => match self.clients.take(s.parent_span_id) {
                Some(client) => s.edge = client.edge(s),
                None => {
                    if let Some(end) = Caller::of_server(resource, s) {
                        self.servers.insert(s.parent_span_id, end);
                    }
                }
            },
            _ => {}
        }
    }
}

/// Recent ends by a key (a span's context fingerprint, or a span id: never
/// 0, its top bits spread): a newer one takes an older one's slot.
/// Allocated on first use, so a span-actor with the service graph off (or
/// no client span) pays nothing.
pub struct Callers {
    slots: Vec<(u64, Option<Caller>)>,
    /// A power of two.
    len: usize,
}

impl Default for Callers {
    fn default() -> Callers {
        Callers::with_slots(CALLERS)
    }
}

impl Callers {
    /// A table of `len` slots (a power of two).
    pub fn with_slots(len: usize) -> Callers {
        debug_assert!(len.is_power_of_two() && len > 1);
        Callers { slots: Vec::new(), len }
    }

    fn slot(&self, fp: u64) -> usize {
        (fp >> (64 - self.len.trailing_zeros())) as usize
    }

    /// Keeps `caller` under key `fp`.
    pub fn insert(&mut self, fp: u64, caller: Caller) {
        if self.slots.is_empty() {
            self.slots = vec![(0, None); self.len];
        }
        let i = self.slot(fp);
        self.slots[i] = (fp, Some(caller));
    }

    /// The end kept under `fp`, if its slot still holds it.
    pub fn get(&self, fp: u64) -> Option<&Caller> {
        let (f, c) = self.slots.get(self.slot(fp))?;
        (*f == fp).then_some(c.as_ref()).flatten()
    }

    /// The end kept under `fp`, taken out (each end makes one edge).
    pub fn take(&mut self, fp: u64) -> Option<Caller> {
        let i = self.slot(fp);
        let (f, c) = self.slots.get_mut(i)?;
        if *f != fp {
            return None;
        }
        *f = 0;
        c.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str) -> Arc<ServiceResource> {
        Arc::new(ServiceResource {
            service_name: name.into(),
            service_instance_id: "h:1".into(),
            host_name: "h".into(),
            pid: 1,
            executable_name: name.into(),
            extra: vec![],
        })
    }

    #[test]
    fn a_slot_holds_the_latest_and_answers_its_own_key_only() {
        let mut c = Callers::default();
        assert!(c.get(1).is_none(), "nothing allocated, nothing found");
        let caller = |n| Caller { resource: res(n), duration_error: 5 };
        c.insert(7 << 50 | 1, caller("a"));
        assert_eq!(c.get(7 << 50 | 1).map(|c| c.resource.service_name.as_str()), Some("a"));
        assert!(c.get(7 << 50 | 3).is_none(), "same slot, another key");
        c.insert(7 << 50 | 3, caller("b"));
        assert!(c.get(7 << 50 | 1).is_none(), "evicted by the newer");
        assert_eq!(c.slots.len(), CALLERS);
        assert_eq!(std::mem::size_of::<(u64, Option<Caller>)>(), 24, "384 KiB in all (docs/configuration.md)");
    }
}
