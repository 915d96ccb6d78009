//! What following HTTP/2 costs the span-actor per gRPC unary call, on one
//! core: the pieces a kernel would hand over for a call (request HEADERS +
//! DATA, response HEADERS + DATA + trailers; headers encoded by the `hpack`
//! crate, which indexes like real encoders do) fed through one [`H2Conn`],
//! HPACK decoding and stream tracking included. Calls are interleaved 8 at
//! a time on each connection, 1,000 calls per connection.
//!
//! `cargo bench -p span-actor --bench h2`

use std::time::{Duration, Instant};

use span_actor::h2::{Dir, H2Conn, Piece, Role};

fn frame(typ: u8, flags: u8, stream: u32, payload: Vec<u8>) -> Piece {
    Piece::Frame { typ, flags, stream, len: payload.len() as u32, payload }
}

fn data(stream: u32, len: u32, end: bool) -> Piece {
    Piece::Frame { typ: 0, flags: u8::from(end), stream, len, payload: Vec::new() }
}

/// One connection's syscalls: (direction, pieces).
fn conversation(calls: u32) -> Vec<(Dir, Vec<Piece>)> {
    let mut req = hpack::Encoder::new();
    let mut resp = hpack::Encoder::new();
    let mut out = Vec::new();
    let mut id = 1;
    for batch in 0..calls / 8 {
        let ids: Vec<u32> = (0..8).map(|i| id + 2 * i).collect();
        id += 16;
        for (k, &s) in ids.iter().enumerate() {
            let tp = format!("00-{:032x}-{:016x}-01", u128::from(batch) << 8 | k as u128, 7 + k);
            let path = if k % 2 == 0 { "/helloworld.Greeter/SayHello" } else { "/shop.Orders/Get" };
            let h: Vec<(&[u8], &[u8])> = vec![
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", path.as_bytes()),
                (b":authority", b"orders.internal:50051"),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                (b"grpc-accept-encoding", b"identity,deflate,gzip"),
                (b"user-agent", b"grpc-python/1.85.3 grpc-c/50.0.0 (linux; chttp2)"),
                (b"traceparent", tp.as_bytes()),
                (b"grpc-timeout", b"9999m"),
            ];
            out.push((Dir::Recv, vec![frame(1, 4, s, req.encode(h)), data(s, 12, true)]));
        }
        for &s in &ids {
            let h: Vec<(&[u8], &[u8])> =
                vec![(b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-accept-encoding", b"identity,deflate,gzip")];
            let t: Vec<(&[u8], &[u8])> = vec![(b"grpc-status", b"0"), (b"grpc-message", b"")];
            out.push((Dir::Send, vec![frame(1, 4, s, resp.encode(h)), data(s, 17, false), frame(1, 5, s, resp.encode(t))]));
        }
    }
    out
}

fn main() {
    const CALLS: u32 = 1000;
    let conv = conversation(CALLS);
    let mut best = Duration::MAX;
    let mut spans = 0;
    for _ in 0..30 {
        let t = Instant::now();
        let mut out = Vec::with_capacity(CALLS as usize);
        let mut c = H2Conn::new(Role::Server, false);
        for (i, (dir, pieces)) in conv.iter().enumerate() {
            c.feed(*dir, i as u64, pieces, &mut out);
        }
        best = best.min(t.elapsed());
        spans = out.len();
        std::hint::black_box(&out);
    }
    assert_eq!(spans, CALLS as usize);
    println!("h2 server, gRPC unary: {:.2} us/call ({} calls/connection, best of 30)", best.as_secs_f64() * 1e6 / f64::from(CALLS), CALLS);
}
