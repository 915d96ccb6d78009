//! The consumer group of a Kafka client's polls: [`Groups`].
//!
//! A Fetch does not name its group, and a consumer fetches on a
//! connection of its own (to each partition's leader), not on the one to
//! its group's coordinator, where it joins, syncs, beats and commits. So
//! the group is known by client: the process and the client id its
//! requests carry ([`super::Membership`] notes, and its commits).
//!
//! # Never a wrong group
//! A process whose clients of one id were members of two groups (two
//! consumers left at kafka-python's default client id) has no group for
//! that id until one of them leaves: its polls go without the attribute.
//!
//! # Memory
//! At most [`MAX_PROCS`] processes (past it all are forgotten at once,
//! and learn again at their next heartbeat) of at most [`MAX_CLIENTS`]
//! client ids each (the oldest forgotten), names of at most
//! [`super::MAX_NAME`] bytes: about 5 MiB at the very worst (1,024 × 8 ×
//! two names of 255 bytes and their overhead), a few KiB for real
//! consumers.

use rustc_hash::FxHashMap as HashMap;

use super::Membership;

/// Processes whose clients' groups are kept.
pub const MAX_PROCS: usize = 1024;
/// Client ids kept per process.
pub const MAX_CLIENTS: usize = 8;

/// A client id's group: one, or more than one (unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Group {
    One(String),
    Several,
}

/// The groups of Kafka clients, by process (pid, start time) and client id.
#[derive(Debug, Default)]
pub struct Groups {
    procs: HashMap<(u32, u64), Vec<(String, Group)>>,
}

impl Groups {
    /// Client `client` of process `proc` said it is (or no more is) a
    /// member of `group`.
    pub fn note(&mut self, proc: (u32, u64), client: &str, group: &str, m: Membership) {
        if !self.procs.contains_key(&proc) && self.procs.len() >= MAX_PROCS {
            self.procs.clear();
        }
        let clients = self.procs.entry(proc).or_default();
        let at = clients.iter().position(|(c, _)| c == client);
        match (m, at) {
            (Membership::Member, None) => {
                if clients.len() >= MAX_CLIENTS {
                    clients.remove(0);
                }
                clients.push((client.to_owned(), Group::One(group.to_owned())));
            }
            (Membership::Member, Some(i)) => {
                if clients[i].1 != Group::One(group.to_owned()) {
                    clients[i].1 = Group::Several;
                }
            }
            (Membership::Left, Some(i)) if clients[i].1 == Group::One(group.to_owned()) => {
                clients.remove(i);
            }
            (Membership::Left, _) => {}
        }
        if clients.is_empty() {
            self.procs.remove(&proc);
        }
    }

    /// The group of client `client` of process `proc`, when it is one.
    pub fn of(&self, proc: (u32, u64), client: &str) -> Option<&str> {
        match self.procs.get(&proc)?.iter().find(|(c, _)| c == client)? {
            (_, Group::One(g)) => Some(g),
            (_, Group::Several) => None,
        }
    }

    /// Processes kept.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_group_is_the_one_it_joined_never_a_guess() {
        let mut g = Groups::default();
        let p = (100, 7);
        g.note(p, "rt-consumer", "billing", Membership::Member);
        g.note(p, "rt-consumer", "billing", Membership::Member);
        assert_eq!(g.of(p, "rt-consumer"), Some("billing"));
        assert_eq!(g.of(p, "other"), None);
        assert_eq!(g.of((100, 8), "rt-consumer"), None, "another process of that pid");
        // A second consumer of that client id in another group: neither.
        g.note(p, "rt-consumer", "shipping", Membership::Member);
        assert_eq!(g.of(p, "rt-consumer"), None);
        // Leaving a group that is no longer known alone: still neither.
        g.note(p, "rt-consumer", "shipping", Membership::Left);
        assert_eq!(g.of(p, "rt-consumer"), None);
        // One that left: forgotten.
        g.note(p, "solo", "audit", Membership::Member);
        g.note(p, "solo", "audit", Membership::Left);
        assert_eq!(g.of(p, "solo"), None);
        g.note(p, "solo", "audit2", Membership::Member);
        assert_eq!(g.of(p, "solo"), Some("audit2"));
    }

    #[test]
    fn bounded() {
        let mut g = Groups::default();
        for pid in 0..(MAX_PROCS as u32 + 5) {
            g.note((pid, 0), "c", "g", Membership::Member);
            assert!(g.len() <= MAX_PROCS);
        }
        for i in 0..(MAX_CLIENTS + 3) {
            g.note((1, 1), &format!("c{i}"), "g", Membership::Member);
        }
        assert_eq!(g.procs[&(1, 1)].len(), MAX_CLIENTS);
        assert_eq!(g.of((1, 1), "c0"), None, "the oldest forgotten");
        assert_eq!(g.of((1, 1), &format!("c{}", MAX_CLIENTS + 2)), Some("g"));
    }
}
