//! Arbitrary piece sequences, and arbitrary kernel record bytes (through
//! `h2::record`), into one HTTP/2 connection: no panic, bounded state
//! whose running count is right, and every stream that comes out is
//! well-formed.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use span_actor::h2::{conn, record, Dir, H2Conn, Piece, Role};

#[derive(Arbitrary, Debug)]
enum FuzzPiece {
    /// Most frames fit their payload exactly; `extra` makes some longer.
    Frame {
        typ: u8,
        flags: u8,
        stream: u8,
        extra: u8,
        payload: Vec<u8>,
    },
    More(Vec<u8>),
    Lost(u16),
}

#[derive(Arbitrary, Debug)]
struct Syscall {
    send: bool,
    ts: u32,
    pieces: Vec<FuzzPiece>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    client: bool,
    mid_connection: bool,
    upgrade: Option<(Vec<u8>, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>,
    syscalls: Vec<Syscall>,
    /// Kernel records as the loader forwards them (hostile bytes), parsed
    /// by `h2::record` and fed after the syscalls.
    records: Vec<(bool, Vec<u8>)>,
}

fuzz_target!(|input: Input| {
    let role = if input.client {
        Role::Client
    } else {
        Role::Server
    };
    let mut c = H2Conn::new(role, input.mid_connection);
    if let Some((m, t, h)) = &input.upgrade {
        let h: Vec<(&[u8], &[u8])> = h.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        c.seed_upgrade(0, m, t, &h);
    }
    let mut out = Vec::new();
    for s in &input.syscalls {
        let pieces: Vec<Piece> = s
            .pieces
            .iter()
            .map(|p| match p {
                FuzzPiece::Frame {
                    typ,
                    flags,
                    stream,
                    extra,
                    payload,
                } => Piece::Frame {
                    // Mostly known types, so the interesting paths are hit.
                    typ: typ % 12,
                    flags: *flags,
                    stream: u32::from(*stream % 16),
                    len: payload.len() as u32 + u32::from(*extra % 4),
                    payload: payload.clone(),
                },
                FuzzPiece::More(p) => Piece::More { payload: p.clone() },
                FuzzPiece::Lost(b) => Piece::Lost {
                    bytes: u64::from(*b % 8),
                },
            })
            .collect();
        let dir = if s.send { Dir::Send } else { Dir::Recv };
        c.feed(dir, u64::from(s.ts), &pieces, &mut out);
        assert!(c.open_streams() <= conn::MAX_STREAMS);
        // What the span-actor's host-wide budget counts is what is held.
        assert_eq!(c.state_bytes(), c.state_bytes_recounted());
    }
    for (send, bytes) in &input.records {
        // Refused records are fine; accepted ones must make sense.
        if let Ok(pieces) = record::pieces(bytes) {
            for p in &pieces {
                if let Piece::Frame { len, payload, .. } = p {
                    assert!(payload.len() <= *len as usize);
                }
            }
            let dir = if *send { Dir::Send } else { Dir::Recv };
            c.feed(dir, u64::from(u32::MAX - 1), &pieces, &mut out);
            assert!(c.open_streams() <= conn::MAX_STREAMS);
            assert_eq!(c.state_bytes(), c.state_bytes_recounted());
        }
    }
    c.close(u64::from(u32::MAX), &mut out);
    assert_eq!(c.open_streams(), 0);
    for d in &out {
        assert!(d.start_ns <= d.end_ns);
        assert!(!d.method.is_empty() && d.method.len() <= 32);
        assert!(d.status.is_none_or(|s| (100..1000).contains(&s)));
        assert!(d.stream_id % 2 == 1);
    }
    let _ = c.take_stats();
});
