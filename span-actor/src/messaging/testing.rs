//! What the messaging tests share: a connection under test ([`T`]) fed
//! records as the kernel makes them, the captured conversations in
//! `testdata/` read back, and the check that nothing secret reaches an op.

use super::{MsgConn, MsgCounts, MsgOp, MsgSystem};
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
    pub(super) counts: MsgCounts,
    pub(super) ts: u64,
}

impl T {
    pub(super) fn new(s: MsgSystem) -> T {
        T { c: MsgConn::new(s), ops: Vec::new(), counts: MsgCounts::default(), ts: 1000 }
    }

    /// One record of pieces; returns its timestamp.
    pub(super) fn rec(&mut self, send: bool, pieces: &[u8]) -> u64 {
        self.ts += 10;
        self.c.feed(send, self.ts, false, pieces, &mut self.ops, &mut self.counts);
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
    fn o<T: ToString>(v: &Option<T>) -> String {
        v.as_ref().map_or("-".to_owned(), T::to_string)
    }
    format!(
        "{}/{} {} {} p{} o{} n{} l{} e{} q{} c{} {}..{}",
        op.system.name(),
        op.op_type.map_or("-", |t| t.name()),
        op.op_name,
        o(&op.destination.clone().or(op.template.clone())),
        o(&op.partition),
        o(&op.offset),
        o(&op.message_count),
        op.links.len(),
        o(&op.error_type),
        o(&op.qos),
        o(&op.client_id),
        op.start_ns,
        op.end_ns
    )
}

/// A testdata file.
pub(super) fn testdata(name: &str) -> String {
    let p = format!("{}/src/messaging/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}
