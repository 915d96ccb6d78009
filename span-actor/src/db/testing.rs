//! What the database protocols' tests share: a connection under test
//! ([`T`]) fed records as the kernel makes them (all of a syscall's bytes,
//! or its head, LOST and its tail), and the check that no secret reaches
//! an op. Each protocol's byte builders live in its own tests.

pub(super) use super::pieces::{captured, whole};
use super::{DbConn, DbCounts, DbOp, System};

/// Values that must never appear in any op field.
pub(super) const SECRETS: &[&str] =
    &["hunter2", "secret-param", "secret-val", "bob@example.com", "s3cr3t", "SuperSecret", "relation \"nope\""];

pub(super) fn assert_no_secret(ops: &[DbOp]) {
    for s in SECRETS {
        assert_no(ops, s);
    }
}

/// A connection under test.
pub(super) struct T {
    pub(super) c: DbConn,
    pub(super) ops: Vec<DbOp>,
    pub(super) counts: DbCounts,
    pub(super) ts: u64,
}

impl T {
    pub(super) fn new(s: System) -> T {
        T { c: DbConn::new(s), ops: Vec::new(), counts: DbCounts::default(), ts: 1000 }
    }

    /// One whole record; returns its timestamp.
    pub(super) fn io(&mut self, send: bool, b: &[u8]) -> u64 {
        self.rec(send, &whole(b))
    }

    pub(super) fn send(&mut self, b: &[u8]) -> u64 {
        self.io(true, b)
    }

    pub(super) fn recv(&mut self, b: &[u8]) -> u64 {
        self.io(false, b)
    }

    pub(super) fn rec(&mut self, send: bool, pieces: &[u8]) -> u64 {
        self.ts += 10;
        self.c.feed_ops(send, self.ts, false, pieces, &mut self.ops, &mut self.counts);
        assert!(self.c.held_bytes() < 5 << 20);
        self.ts
    }

    /// `b` as several records split at the given offsets.
    pub(super) fn split(&mut self, send: bool, b: &[u8], cuts: &[usize]) -> u64 {
        let mut last = 0;
        let mut ts = 0;
        for &c in cuts.iter().chain(std::iter::once(&b.len())) {
            let c = c.min(b.len());
            if c > last {
                ts = self.io(send, &b[last..c]);
                last = c;
            }
        }
        ts
    }
}

pub(super) fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// Never exported, whatever the quoting rule of the session.
pub(super) fn assert_no(ops: &[DbOp], secret: &str) {
    for op in ops {
        let fields = [
            &op.call.namespace,
            &op.call.operation,
            &op.call.collection,
            &op.call.query_text,
            &op.call.query_summary,
            &op.call.status_code,
            &op.call.error_type,
        ];
        for f in fields.into_iter().flatten() {
            assert!(!f.contains(secret), "{secret:?} in {op:?}");
        }
    }
}

/// A statement whose first literal is 乗 in GBK (0x81 0x5C: its second
/// byte a backslash when read by bytes), then a secret, then an escaped
/// quote (so a reading by bytes ends every string it opens).
pub(super) const GBK_QUERY: &[u8] = b"SELECT '\x81\\', 'x SECRET x', 'a\\'b' FROM t";
