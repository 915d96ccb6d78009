//! The database connection across protocols: detection, records that are
//! not pieces, hostile records of every protocol, pipelines never
//! answered, and QUIT. Each protocol's own tests sit beside it
//! (`postgres/tests.rs`, …); the shared helpers are in `testing.rs`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::mysql::tests::{mariadb_greeting, my, my_coldef, my_eof, my_handshake_response, my_ok, CAPS};
use super::postgres::tests::{
    pg, pg_bind, pg_cc, pg_connected, pg_data_row, pg_execute, pg_hello, pg_parse, pg_query, pg_ready, pg_row_desc, pg_startup, pg_sync,
};
use super::redis::tests::resp;
use super::testing::*;
use super::*;

#[test]
fn detect_by_bytes_then_port() {
    assert_eq!(detect(&pg_startup("a", None), None, 1), Some(System::Postgres));
    assert_eq!(detect(&[0, 0, 0, 8, 4, 210, 22, 47], None, 1), Some(System::Postgres));
    assert_eq!(detect(b"", Some(&mariadb_greeting()), 1), Some(System::MySql));
    assert_eq!(detect(&resp(&[b"PING"]), None, 1), Some(System::Redis));
    assert_eq!(detect(b"get foo\r\n", None, 1), Some(System::Memcached));
    assert_eq!(detect(&[0x16, 3, 1, 0, 5], None, 6379), Some(System::Redis));
    assert_eq!(detect(b"GET / HTTP/1.1\r\n", None, 8080), None);
    assert_eq!(detect(b"", None, 11211), Some(System::Memcached));
    assert_eq!(System::MySql.name(), "mysql");
}

#[test]
fn malformed_records_give_the_connection_up() {
    let mut t = pg_connected();
    t.send(&pg_query("SELECT 1"));
    t.rec(false, &[9, 9, 9]);
    assert_eq!((t.counts.malformed, t.counts.given_up, t.counts.unanswered), (1, 1, 1));
    t.recv(&cat(&[pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert!(t.ops.is_empty());
}

/// Records of a conversation: (send, bytes).
type Conversation = Vec<(bool, Vec<u8>)>;

/// Valid conversations of each protocol, to mutate.
fn corpus() -> Vec<(System, Conversation)> {
    let mut big = pg_row_desc(&["a"]);
    for i in 0..500 {
        big.extend(pg_data_row(&[format!("{i:06}").as_bytes()]));
    }
    big.extend(pg_cc("SELECT 500"));
    big.extend(pg_ready(b'I'));
    vec![
        (
            System::Postgres,
            vec![
                (true, pg_startup("alice", Some("shop"))),
                (false, pg_hello()),
                (true, cat(&[pg_parse("s", "SELECT $1", 1), pg_bind("", "s", &[b"secret-param"]), pg_execute(""), pg_sync()])),
                (false, cat(&[pg(b'1', &[]), pg(b'2', &[]), pg_cc("SELECT 1"), pg_ready(b'I')])),
                (true, pg_query("SELECT * FROM t")),
                (false, big),
            ],
        ),
        (
            System::MySql,
            vec![
                (false, mariadb_greeting()),
                (true, my_handshake_response(CAPS, "shop")),
                (false, my_ok(2)),
                (true, my(0, b"\x03SELECT 1")),
                (false, cat(&[my(1, &[1]), my_coldef(2, "x"), my_eof(3), my(4, b"\x011"), my_eof(5)])),
            ],
        ),
        (
            System::Redis,
            vec![
                (true, cat(&[resp(&[b"SET", b"k", b"secret-val"]), resp(&[b"GET", b"k"])])),
                (false, b"+OK\r\n$10\r\nsecret-val\r\n*2\r\n%1\r\n+a\r\n:1\r\n_\r\n".to_vec()),
            ],
        ),
        (
            System::Memcached,
            vec![(true, b"get a b\r\nset k 0 0 3\r\nabc\r\n".to_vec()), (false, b"VALUE a 0 3\r\nxyz\r\nEND\r\nSTORED\r\n".to_vec())],
        ),
    ]
}

/// Random records (valid conversations cut, mutated, with LOST pieces,
/// and plain random bytes) never panic, keep memory bounded, and never
/// output a secret.
#[test]
fn hostile_records_never_panic_and_stay_bounded() {
    let mut rng = StdRng::seed_from_u64(0xdb);
    let corpus = corpus();
    for round in 0..3_000 {
        let (system, conv) = &corpus[round % corpus.len()];
        let mut t = T::new(*system);
        for _ in 0..rng.random_range(1..12) {
            let (send, base) = &conv[rng.random_range(0..conv.len())];
            let mut b = base.clone();
            match rng.random_range(0..5) {
                0 => b.truncate(rng.random_range(0..=b.len())),
                1 => {
                    for _ in 0..rng.random_range(1..4) {
                        if !b.is_empty() {
                            let i = rng.random_range(0..b.len());
                            b[i] = rng.random();
                        }
                    }
                }
                2 => b = (0..rng.random_range(0..300)).map(|_| rng.random()).collect(),
                _ => {}
            }
            let pieces = match rng.random_range(0..4) {
                0 => captured(&b, rng.random_range(0..64), rng.random_range(0..64)),
                1 => {
                    let mut p = whole(&b);
                    if rng.random_bool(0.2) {
                        // Malformed.
                        p.push(rng.random());
                    }
                    p
                }
                _ => whole(&b),
            };
            let send = if rng.random_bool(0.1) { !send } else { *send };
            t.ts += 1;
            t.c.feed_ops(send, t.ts, rng.random_bool(0.05), &pieces, &mut t.ops, &mut t.counts);
            assert!(t.c.pending() <= MAX_PENDING);
            assert!(t.c.held_bytes() <= 5 << 20);
        }
        t.c.close(&mut t.counts);
        assert_no_secret(&t.ops);
        for op in &t.ops {
            assert!(op.start_ns <= op.end_ns);
            assert!(op.call.query_text.as_ref().is_none_or(|q| q.len() <= sql::MAX_QUERY_TEXT));
            assert!(op.call.query_summary.as_ref().is_none_or(|q| q.len() <= sql::MAX_SUMMARY));
        }
    }
}

/// A flood of pipelined requests never answered: pending stays bounded
/// and the excess is counted.
#[test]
fn pending_calls_are_bounded() {
    for system in [System::Postgres, System::Redis, System::Memcached] {
        let mut t = T::new(system);
        let one = match system {
            System::Postgres => pg_query("SELECT 1"),
            System::Redis => resp(&[b"PING"]),
            _ => b"version\r\n".to_vec(),
        };
        let req = one.repeat(MAX_PENDING + 10);
        for chunk in req.chunks(30_000) {
            t.send(chunk);
        }
        assert!(t.c.pending() <= MAX_PENDING, "{system:?}");
        assert!(t.counts.too_many_pending >= 1, "{system:?}");
    }
}

#[test]
fn quit_is_not_an_unanswered_call() {
    // Redis: the server closes after QUIT (a client may not read its +OK).
    let mut t = T::new(System::Redis);
    t.send(&resp(&[b"GET", b"k"]));
    t.recv(b"$-1\r\n");
    t.send(&resp(&[b"QUIT"]));
    t.c.close(&mut t.counts);
    assert_eq!((t.counts.unanswered, t.counts.no_reply, t.ops.len()), (0, 1, 1));
    // Answered: an op like any other.
    let mut t = T::new(System::Redis);
    t.send(&resp(&[b"QUIT"]));
    t.recv(b"+OK\r\n");
    t.c.close(&mut t.counts);
    assert_eq!((t.counts.unanswered, t.counts.no_reply, t.ops.len()), (0, 0, 1));
    // memcached: `quit` has no reply.
    let mut t = T::new(System::Memcached);
    t.send(b"get k\r\n");
    t.recv(b"END\r\n");
    t.send(b"quit\r\n");
    t.c.close(&mut t.counts);
    assert_eq!((t.counts.unanswered, t.counts.no_reply, t.ops.len()), (0, 1, 1));
    // An unknown memcached command is `_OTHER`, never its name.
    let mut t = T::new(System::Memcached);
    t.send(b"SECRETCMD k\r\n");
    t.recv(b"ERROR\r\n");
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("_OTHER"));
    assert_no(&t.ops, "SECRET");
}
