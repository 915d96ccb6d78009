//! memcached: a conversation as pymemcache writes it (storage, multi-get,
//! noreply, errors, stats, meta commands), split across records.

use crate::db::testing::*;
use crate::db::System;

#[test]
fn memcached_multi_get_storage_errors_and_stats() {
    let mut t = T::new(System::Memcached);
    let value = vec![b's'; 1024];
    let mut set = b"set user:1 0 3600 1024\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    t.split(true, &set, &[10, 30, 500]);
    t.recv(b"STORED\r\n");
    let start = t.send(b"get user:1 user:2 user:3\r\n");
    let mut reply = b"VALUE user:1 0 1024\r\n".to_vec();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\nVALUE user:3 0 10\r\nsecret-val\r\nEND\r\n");
    let end = t.split(false, &reply, &[3, 700, 1046]);
    assert_eq!(t.ops.len(), 2, "{:?}", t.counts);
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("set"));
    assert_eq!(t.ops[0].call.query_text.as_deref(), Some("set ?"));
    let get = &t.ops[1];
    assert_eq!((get.start_ns, get.end_ns), (start, end));
    assert_eq!(get.call.query_text.as_deref(), Some("get ? ? ?"));
    assert_eq!(get.call.returned_rows, Some(2));
    assert_eq!(get.call.system, "memcached");
    // noreply: no op.
    t.send(b"set k 0 0 10 noreply\r\nsecret-val\r\n");
    assert_eq!(t.counts.no_reply, 1);
    t.send(b"delete nope\r\nincr n 1\r\nbogus\r\nset k 0 0 -1\r\n");
    assert_eq!(t.counts.given_up, 1, "a bad length gives the connection up");
    let mut t2 = T::new(System::Memcached);
    t2.send(b"delete nope\r\nincr n 1\r\nbogus\r\n");
    t2.recv(b"NOT_FOUND\r\n5\r\nERROR\r\n");
    assert_eq!(t2.ops[0].call.error_type, None);
    assert_eq!(t2.ops[1].call.operation.as_deref(), Some("incr"));
    assert_eq!(t2.ops[2].call.error_type.as_deref(), Some("ERROR"));
    t2.send(b"stats\r\n");
    t2.recv(b"STAT pid 1\r\nSTAT uptime 5\r\nEND\r\n");
    assert_eq!(t2.ops[3].call.operation.as_deref(), Some("stats"));
    assert_eq!(t2.ops[3].call.returned_rows, None);
    t2.send(b"mg user:1 v f\r\nms k 10 T0\r\nsecret-val\r\nmn\r\n");
    t2.recv(b"VA 10 f0\r\nsecret-val\r\nHD\r\nMN\r\n");
    assert_eq!(t2.ops.len(), 7);
    assert_eq!(t2.ops[4].call.query_text.as_deref(), Some("mg ?"));
    t2.send(b"set k 0 0 3\r\nabc\r\n");
    t2.recv(b"SERVER_ERROR out of memory storing object SuperSecret\r\n");
    assert_eq!(t2.ops[7].call.status_code.as_deref(), Some("SERVER_ERROR"));
    assert_no_secret(&t.ops);
    assert_no_secret(&t2.ops);
}
