//! Redis: the command tables, then conversations as redis-py writes them
//! (pipelines, MULTI/EXEC, pub/sub, RESP3), values in LOST regions, TLS,
//! and which command names are ever output. [`resp`] is `pub(in crate::db)`
//! for the cross-protocol tests in `db/tests.rs`.

use super::*;
use crate::db::testing::*;
use crate::db::System;

/// The tables are binary searched.
#[test]
fn tables_are_sorted_and_uppercase() {
    let sorted = |t: &[&str]| t.windows(2).all(|w| w[0] < w[1]) && t.iter().all(|c| c.bytes().all(|b| !b.is_ascii_lowercase()));
    assert!(sorted(COMMANDS));
    assert!(sorted(&SUBCOMMANDS.iter().map(|(c, _)| *c).collect::<Vec<_>>()));
    for (c, subs) in SUBCOMMANDS {
        assert!(sorted(subs), "{c}");
        assert!(known_command(c).is_some(), "{c}");
    }
    assert_eq!(known_command("GET"), Some("GET"));
    assert_eq!(known_command("SECRET"), None);
    assert_eq!(known_subcommand("CLIENT", "SETNAME"), Some("SETNAME"));
    assert_eq!(known_subcommand("CLIENT", "SECRET"), None);
}

// ---------------------------------------------------------------- conversations

pub(in crate::db) fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

#[test]
fn redis_py_pipeline_of_100_sets() {
    let mut t = T::new(System::Redis);
    let mut req = Vec::new();
    for i in 0..100 {
        req.extend(resp(&[b"SET", format!("key:{i}").as_bytes(), format!("secret-val-{i}").as_bytes()]));
    }
    let start = t.split(true, &req, &[5, 1000, 1001]);
    let replies = b"+OK\r\n".repeat(100);
    let end = t.split(false, &replies, &[1, 250, 251, 252]);
    assert_eq!(t.ops.len(), 100);
    // The last command came in the last send record, its reply in the
    // last recv record.
    assert_eq!((t.ops[99].start_ns, t.ops[99].end_ns), (start, end));
    for op in &t.ops {
        assert_eq!(op.call.operation.as_deref(), Some("SET"));
        assert_eq!(op.call.query_text.as_deref(), Some("SET ? ?"));
        assert_eq!(op.call.query_summary.as_deref(), Some("SET"));
        assert_eq!(op.call.namespace.as_deref(), Some("0"));
        assert_eq!(op.call.system, "redis");
        assert!(op.start_ns <= start && op.end_ns <= end && op.start_ns < op.end_ns);
    }
    assert_no_secret(&t.ops);
}

#[test]
fn redis_multi_exec_errors_select_and_subcommands() {
    let mut t = T::new(System::Redis);
    t.send(&cat(&[resp(&[b"AUTH", b"default", b"hunter2"]), resp(&[b"CLIENT", b"SETNAME", b"worker-1"]), resp(&[b"SELECT", b"2"])]));
    t.recv(b"+OK\r\n+OK\r\n+OK\r\n");
    assert_eq!(t.ops[0].call.query_text.as_deref(), Some("AUTH ? ?"));
    assert_eq!(t.ops[1].call.operation.as_deref(), Some("CLIENT SETNAME"));
    assert_eq!(t.ops[1].call.query_text.as_deref(), Some("CLIENT SETNAME ?"));
    t.send(&cat(&[resp(&[b"MULTI"]), resp(&[b"INCR", b"counter"]), resp(&[b"LPUSH", b"q", b"secret-val"]), resp(&[b"EXEC"])]));
    t.recv(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:5\r\n:1\r\n");
    let ops: Vec<_> = t.ops[3..].iter().map(|o| o.call.operation.clone().unwrap()).collect();
    assert_eq!(ops, ["MULTI", "INCR", "LPUSH", "EXEC"]);
    assert!(t.ops[3..].iter().all(|o| o.call.namespace.as_deref() == Some("2")));
    t.send(&resp(&[b"LPUSH", b"counter", b"secret-val"]));
    t.recv(b"-WRONGTYPE Operation against a key holding the wrong kind of value SuperSecret\r\n");
    let op = t.ops.last().unwrap();
    assert_eq!(op.call.status_code.as_deref(), Some("WRONGTYPE"));
    assert_eq!(op.call.error_type.as_deref(), Some("WRONGTYPE"));
    // Inline command.
    t.send(b"PING\r\n");
    t.recv(b"+PONG\r\n");
    assert_eq!(t.ops.last().unwrap().call.operation.as_deref(), Some("PING"));
    assert_no_secret(&t.ops);
}

#[test]
fn redis_pubsub_pushes_are_not_calls() {
    let mut t = T::new(System::Redis);
    t.send(&resp(&[b"SUBSCRIBE", b"news", b"alerts"]));
    t.recv(b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$6\r\nalerts\r\n:2\r\n");
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("SUBSCRIBE"));
    t.recv(b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$10\r\nsecret-val\r\n");
    t.recv(b"*3\r\n$7\r\nmessage\r\n$6\r\nalerts\r\n$10\r\nsecret-val\r\n");
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.counts.pushes_ignored, 3);
    t.send(&resp(&[b"PING"]));
    t.recv(b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$1\r\nx\r\n*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert_eq!(t.ops.len(), 2);
    assert_eq!(t.ops[1].call.operation.as_deref(), Some("PING"));
    assert_no_secret(&t.ops);
}

#[test]
fn redis_resp3_hello_map_and_pushes() {
    let mut t = T::new(System::Redis);
    t.send(&resp(&[b"HELLO", b"3", b"AUTH", b"default", b"hunter2"]));
    t.recv(b"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n");
    assert_eq!(t.ops[0].call.query_text.as_deref(), Some("HELLO ? ? ? ?"));
    t.send(&resp(&[b"CLIENT", b"TRACKING", b"on"]));
    t.recv(b"+OK\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nkey\r\n");
    t.send(&resp(&[b"HGETALL", b"h"]));
    t.recv(b"|1\r\n+ttl\r\n:3\r\n%1\r\n+f\r\n=14\r\ntxt:secret-val\r\n");
    assert_eq!(t.ops.len(), 3);
    assert_eq!(t.counts.pushes_ignored, 1);
    assert_eq!(t.ops[2].call.operation.as_deref(), Some("HGETALL"));
    assert_no_secret(&t.ops);
}

#[test]
fn redis_big_value_in_a_lost_region() {
    let mut t = T::new(System::Redis);
    let value = vec![b'v'; 200_000];
    t.rec(true, &captured(&resp(&[b"SET", b"big", &value]), 3_900, 256));
    t.recv(b"+OK\r\n");
    t.send(&resp(&[b"GET", b"big"]));
    let mut reply = b"$200000\r\n".to_vec();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\n");
    let end = t.rec(false, &captured(&reply, 3_900, 256));
    assert_eq!(t.ops.len(), 2, "{:?}", t.counts);
    assert_eq!(t.ops[1].end_ns, end);
    assert_eq!(t.counts.desync, 0);
    // A header in a LOST region gives the connection up.
    t.send(&resp(&[b"LRANGE", b"l", b"0", b"-1"]));
    let mut list = b"*5000\r\n".to_vec();
    for i in 0..5000 {
        list.extend_from_slice(format!("$6\r\nv{i:05}\r\n").as_bytes());
    }
    t.rec(false, &captured(&list, 3_900, 256));
    assert_eq!((t.counts.desync, t.counts.given_up, t.counts.unanswered), (1, 1, 1));
    t.send(&resp(&[b"PING"]));
    t.recv(b"+PONG\r\n");
    assert_eq!(t.ops.len(), 2);
}

#[test]
fn redis_over_tls_from_the_start() {
    let mut t = T::new(System::Redis);
    t.send(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 0]);
    t.recv(&[0x16, 0x03, 0x03, 0x00, 0x05, 2, 0, 0, 0]);
    t.ts += 10;
    t.c.feed_ops(true, t.ts, true, &whole(&resp(&[b"GET", b"k"])), &mut t.ops, &mut t.counts);
    t.ts += 10;
    t.c.feed_ops(false, t.ts, true, &whole(b"$-1\r\n"), &mut t.ops, &mut t.counts);
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.counts.desync, 0);
}

// ---------------------------------------------------------------- quoting rules, names

#[test]
fn redis_names_only_known_commands() {
    let mut t = T::new(System::Redis);
    t.send(&cat(&[
        resp(&[b"SECRETRD8", b"x"]),
        resp(&[b"get", b"k"]),
        resp(&[b"CLIENT", b"SETNAME", b"w"]),
        resp(&[b"CONFIG", b"SECRETSUB", b"x"]),
        resp(&[b"config", b"get", b"maxmemory"]),
    ]));
    t.recv(b"-ERR unknown command 'SECRETRD8'\r\n$1\r\nv\r\n+OK\r\n-ERR unknown subcommand\r\n*0\r\n");
    t.send(b"SECRETINLINE now\r\n");
    t.recv(b"-ERR unknown command\r\n");
    let names: Vec<_> = t.ops.iter().map(|o| (o.call.operation.as_deref(), o.call.query_text.as_deref())).collect();
    assert_eq!(
        names,
        [
            (Some("_OTHER"), None),
            (Some("GET"), Some("GET ?")),
            (Some("CLIENT SETNAME"), Some("CLIENT SETNAME ?")),
            (Some("CONFIG"), Some("CONFIG ? ?")),
            (Some("CONFIG GET"), Some("CONFIG GET ?")),
            (Some("_OTHER"), None),
        ]
    );
    assert_no(&t.ops, "SECRET");
}
