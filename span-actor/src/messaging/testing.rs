//! What the messaging tests share: a connection under test ([`T`]) fed
//! records as the kernel makes them, the captured conversations in
//! `testdata/` read back, and the check that nothing secret reaches an op.

use super::{MsgConn, MsgCounts, MsgOp, MsgSystem, MAX_PENDING};
pub(super) use crate::db::pieces::{captured, whole};

/// What the captured clients sent that must never reach an op: payloads,
/// record keys, other headers' keys and values, MQTT credentials and
/// other user properties.
pub(super) const SECRETS: &[&str] =
    &["secret-payload", "secret-key", "secret-hdr", "secret-hval", "secret-user", "hunter2", "secret-val", "secret-meta"];

/// Every string field of every op is free of [`SECRETS`].
pub(super) fn assert_no_secret(ops: &[MsgOp]) {
    for op in ops {
        let text = format!("{op:?}");
        for s in SECRETS {
            assert!(!text.contains(s), "{s:?} in {op:?}");
        }
    }
}

/// A captured conversation: `> hex` (the client sent) and `< hex` (it
/// received) lines, one a chunk the recording proxy read.
pub(crate) fn capture(text: &str) -> Vec<(bool, Vec<u8>)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (dir, hex) = l.split_once(' ').expect("`> hex` or `< hex`");
            let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect();
            (dir == ">", bytes)
        })
        .collect()
}

/// A connection under test.
pub(super) struct T {
    pub(super) c: MsgConn,
    pub(super) ops: Vec<MsgOp>,
    /// Membership notes (no call), apart from the calls.
    pub(super) notes: Vec<MsgOp>,
    pub(super) counts: MsgCounts,
    pub(super) ts: u64,
}

impl T {
    pub(super) fn new(s: MsgSystem) -> T {
        T { c: MsgConn::new(s), ops: Vec::new(), notes: Vec::new(), counts: MsgCounts::default(), ts: 1000 }
    }

    /// One record of pieces; returns its timestamp.
    pub(super) fn rec(&mut self, send: bool, pieces: &[u8]) -> u64 {
        self.ts += 10;
        self.c.feed_ops(send, self.ts, false, pieces, &mut self.ops, &mut self.counts);
        self.notes.extend(self.ops.extract_if(.., |o| o.membership.is_some()));
        assert!(self.c.held_bytes() < 2 << 20, "{} bytes held", self.c.held_bytes());
        self.ts
    }

    pub(super) fn send(&mut self, b: &[u8]) -> u64 {
        self.rec(true, &whole(b))
    }

    pub(super) fn recv(&mut self, b: &[u8]) -> u64 {
        self.rec(false, &whole(b))
    }

    /// A captured conversation, a record per chunk; the timestamps of the
    /// records.
    pub(super) fn replay(&mut self, text: &str) -> Vec<u64> {
        capture(text).into_iter().map(|(send, b)| self.rec(send, &whole(&b))).collect()
    }
}

/// An op in one line, for exact comparisons: `name dest p o n links
/// error qos client start..end`, `-` for what is absent.
pub(super) fn brief(op: &MsgOp) -> String {
    format!(
        "{}/{} {} {} p{} o{} n{} l{} e{} q{} c{} {}..{}",
        op.system.name(),
        op.op_type.map_or("-", |t| t.name()),
        op.op_name,
        or_dash(&op.destination.clone().or(op.template.clone())),
        or_dash(&op.partition),
        or_dash(&op.offset),
        or_dash(&op.message_count),
        op.links.len(),
        or_dash(&op.error_type),
        or_dash(&op.qos),
        or_dash(&op.client_id),
        op.start_ns,
        op.end_ns
    )
}

/// An optional field in an op's line: `-` when absent.
pub(super) fn or_dash<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".to_owned(), T::to_string)
}

/// The [`brief`] of every op of `t`.
pub(super) fn briefs(t: &T) -> Vec<String> {
    t.ops.iter().map(brief).collect()
}

/// A connection of `system` after the capture `file` and its close;
/// nothing secret reached an op.
pub(super) fn replayed(system: MsgSystem, file: &str) -> T {
    let mut t = T::new(system);
    t.replay(&testdata(file));
    t.c.close(&mut t.counts);
    assert_no_secret(&t.ops);
    t
}

/// A client process's run of several connections (the `e2e_*.txt`
/// files: `N > hex` / `N < hex`, N the connection, numbered from 1), each
/// replayed on a connection of its own and closed; nothing secret reached
/// an op. One [`T`] per connection, in their numbers' order.
pub(super) fn replayed_run(system: MsgSystem, file: &str) -> Vec<T> {
    let text = testdata(file);
    let mut conns: Vec<T> = Vec::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let (n, rest) = l.split_once(' ').expect("`N > hex` or `N < hex`");
        let n: usize = n.parse().expect("a connection number");
        while conns.len() < n {
            conns.push(T::new(system));
        }
        for (send, b) in capture(rest) {
            conns[n - 1].rec(send, &whole(&b));
        }
    }
    for t in &mut conns {
        t.c.close(&mut t.counts);
        assert_no_secret(&t.ops);
    }
    conns
}

/// A testdata file.
pub(super) fn testdata(name: &str) -> String {
    let p = format!("{}/src/messaging/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Every record of every capture in `files`, after the records before it,
/// cut at every byte (the rest of it then captured as its head, a LOST
/// region and its tail): nothing panics, nothing secret reaches an op.
pub(super) fn every_cut_is_safe(system: MsgSystem, files: &[&str]) {
    for f in files {
        let recs = capture(&testdata(f));
        for (i, (send, b)) in recs.iter().enumerate() {
            for cut in 0..b.len() {
                let mut c = MsgConn::new(system);
                let (mut ops, mut counts) = (Vec::new(), MsgCounts::default());
                for (s, r) in &recs[..i] {
                    c.feed_ops(*s, 1, false, &whole(r), &mut ops, &mut counts);
                }
                c.feed_ops(*send, 2, false, &whole(&b[..cut]), &mut ops, &mut counts);
                c.feed_ops(*send, 3, false, &captured(b, cut, 2), &mut ops, &mut counts);
                c.close(&mut counts);
                assert_no_secret(&ops);
            }
        }
    }
}

/// `rounds` connections, each fed 20 records of `seeds` with up to three
/// bytes made random (by an rng seeded with `seed`): nothing panics, the
/// pending calls stay bounded, every op ends after it starts, and `check`
/// holds after each connection.
pub(super) fn random_records(system: MsgSystem, seed: u64, seeds: &[(bool, Vec<u8>)], rounds: usize, check: impl Fn(&T)) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for _ in 0..rounds {
        let mut t = T::new(system);
        for _ in 0..20 {
            let (send, mut b) = seeds[rng.random_range(0..seeds.len())].clone();
            for _ in 0..rng.random_range(0..4) {
                let i = rng.random_range(0..b.len());
                b[i] = rng.random();
            }
            t.rec(send, &whole(&b));
        }
        assert!(t.c.pending() <= MAX_PENDING);
        assert!(t.ops.iter().all(|o| o.start_ns <= o.end_ns));
        check(&t);
    }
}
