//! Arbitrary records into one database connection of each protocol
//! (`span_actor::db`): no panic, bounded state, well-formed ops.
//!
//! Input layout: `u8(system % 4)` then records, each `u8(flags)
//! u16le(len) len bytes`; flags: 1 send, 2 TLS plaintext, 4 the bytes are
//! the record's raw pieces (hostile piece framing), else they are the
//! stream bytes, captured whole or (flag 8) as head + LOST + tail the way
//! the kernel captures a long syscall.
#![no_main]

use libfuzzer_sys::fuzz_target;
use span_actor::db::pieces::{encode, Piece};
use span_actor::db::{sql, DbConn, DbCounts, System, MAX_PENDING};

/// Above the worst case the module doc states (≈ 4 MiB).
const MAX_HELD: usize = 5 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else { return };
    let system = [System::Postgres, System::MySql, System::Redis, System::Memcached][usize::from(sel % 4)];
    let mut conn = DbConn::new(system);
    let mut ops = Vec::new();
    let mut counts = DbCounts::default();
    let mut ts = 0u64;
    while let [flags, a, b, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
        let (bytes, next) = tail.split_at(len);
        rest = next;
        let pieces = if flags & 4 != 0 {
            bytes.to_vec()
        } else {
            let mut p = Vec::new();
            if flags & 8 != 0 && bytes.len() > 2 {
                let head = bytes.len() / 2;
                encode(&mut p, Piece::Bytes(&bytes[..head]));
                encode(&mut p, Piece::Lost(u32::from(bytes[0]) * 97));
                encode(&mut p, Piece::Bytes(&bytes[head..]));
            } else {
                encode(&mut p, Piece::Bytes(bytes));
            }
            p
        };
        ts += 1;
        conn.feed(flags & 1 != 0, ts, flags & 2 != 0, &pieces, &mut ops, &mut counts);
        assert!(conn.pending() <= MAX_PENDING);
        assert!(conn.held_bytes() <= MAX_HELD, "{}", conn.held_bytes());
    }
    conn.close(&mut counts);
    assert_eq!(conn.pending(), 0);
    for op in &ops {
        assert!(op.start_ns <= op.end_ns);
        assert!(op.system == conn.system_name() || system == System::MySql);
        assert!(op.query_text.as_ref().is_none_or(|q| q.len() <= sql::MAX_QUERY_TEXT));
        assert!(op.query_summary.as_ref().is_none_or(|q| q.len() <= sql::MAX_SUMMARY));
    }
});
