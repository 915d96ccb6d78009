use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::h2::testenc::Encoder;

type Line = (Option<String>, Option<String>);

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn decode(d: &mut Decoder, block: &[u8]) -> (Vec<Line>, Result<(), DecodeError>) {
    let mut out = Vec::new();
    let r = d.decode(block, true, |h| {
        out.push((h.name.map(|n| String::from_utf8_lossy(n).into_owned()), h.value.map(|v| String::from_utf8_lossy(v).into_owned())))
    });
    (out, r)
}

fn known(pairs: &[(&str, &str)]) -> Vec<Line> {
    pairs.iter().map(|(n, v)| (Some(n.to_string()), Some(v.to_string()))).collect()
}

fn table(d: &Decoder) -> Vec<(String, String)> {
    d.entries
        .iter()
        .map(|e| (String::from_utf8_lossy(e.name.as_deref().unwrap_or(b"?")).into_owned(), String::from_utf8_lossy(&e.value).into_owned()))
        .collect()
}

#[test]
fn rfc_c2_literals() {
    // C.2.1 literal with indexing, C.2.2 without, C.2.3 never indexed, C.2.4 indexed.
    let mut d = Decoder::new(false);
    let (h, r) = decode(&mut d, &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"));
    r.unwrap();
    assert_eq!(h, known(&[("custom-key", "custom-header")]));
    assert_eq!(d.size, 55);
    let mut d = Decoder::new(false);
    let (h, r) = decode(&mut d, &hex("040c 2f73 616d 706c 652f 7061 7468"));
    r.unwrap();
    assert_eq!(h, known(&[(":path", "/sample/path")]));
    assert!(d.is_empty());
    let (h, r) = decode(&mut d, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74"));
    r.unwrap();
    assert_eq!(h, known(&[("password", "secret")]));
    let (h, r) = decode(&mut d, &hex("82"));
    r.unwrap();
    assert_eq!(h, known(&[(":method", "GET")]));
    assert!(d.is_empty());
}

fn requests(blocks: [&str; 3]) {
    let mut d = Decoder::new(false);
    let (h, r) = decode(&mut d, &hex(blocks[0]));
    r.unwrap();
    assert_eq!(h, known(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]));
    assert_eq!(d.size, 57);
    let (h, r) = decode(&mut d, &hex(blocks[1]));
    r.unwrap();
    assert_eq!(
        h,
        known(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com"), ("cache-control", "no-cache")])
    );
    assert_eq!(d.size, 110);
    let (h, r) = decode(&mut d, &hex(blocks[2]));
    r.unwrap();
    assert_eq!(
        h,
        known(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value")
        ])
    );
    assert_eq!(d.size, 164);
    assert_eq!(
        table(&d),
        vec![
            ("custom-key".into(), "custom-value".into()),
            ("cache-control".into(), "no-cache".into()),
            (":authority".into(), "www.example.com".into())
        ]
    );
}

#[test]
fn rfc_c3_requests_without_huffman() {
    requests([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn rfc_c4_requests_with_huffman() {
    requests([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

fn responses(blocks: [&str; 3]) {
    // The RFC's decoder has a 256-byte table: announce it and size the
    // table in band, as a peer would.
    let mut d = Decoder::new(false);
    d.set_limit(256);
    let mut first = hex("3fe101");
    first.extend(hex(blocks[0]));
    let (h, r) = decode(&mut d, &first);
    r.unwrap();
    assert_eq!(
        h,
        known(&[
            (":status", "302"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("location", "https://www.example.com")
        ])
    );
    assert_eq!(d.size, 222);
    let (h, r) = decode(&mut d, &hex(blocks[1]));
    r.unwrap();
    assert_eq!(
        h,
        known(&[
            (":status", "307"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("location", "https://www.example.com")
        ])
    );
    assert_eq!(d.size, 222);
    assert_eq!(table(&d)[0], (":status".into(), "307".into()));
    let (h, r) = decode(&mut d, &hex(blocks[2]));
    r.unwrap();
    assert_eq!(
        h,
        known(&[
            (":status", "200"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
            ("location", "https://www.example.com"),
            ("content-encoding", "gzip"),
            ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")
        ])
    );
    assert_eq!(d.size, 215);
    assert_eq!(d.len(), 3);
}

#[test]
fn rfc_c5_responses_without_huffman() {
    responses([
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d
         546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f
         6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b
         2076 6572 7369 6f6e 3d31",
    ]);
}

#[test]
fn rfc_c6_responses_with_huffman() {
    responses([
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7
         8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335
         dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ]);
}

#[test]
fn static_table_agrees_with_the_hpack_crate() {
    // The independent encoder turns each static entry into its index.
    for (i, (n, v)) in STATIC_TABLE.iter().enumerate() {
        if v.is_empty() {
            continue;
        }
        let mut enc = hpack::Encoder::new();
        let block = enc.encode(vec![(n.as_bytes(), v.as_bytes())]);
        assert_eq!(block, vec![0x80 | (i as u8 + 1)], "{n}: {v}");
        let mut d = Decoder::new(false);
        assert_eq!(decode(&mut d, &block).0, known(&[(n, v)]));
    }
}

#[test]
fn unknown_references_after_a_gap() {
    let mut d = Decoder::new(true);
    // Indexed 62 (unknown), literal with indexed name 63 (unknown name) and
    // incremental indexing, then 62 again (now the new entry: name unknown).
    let (h, r) = decode(&mut d, &hex("be 7f00 0178 be"));
    r.unwrap();
    assert_eq!(h, vec![(None, None), (None, Some("x".into())), (None, Some("x".into()))]);
    // Static entries and literals are still fine.
    let (h, _) = decode(&mut d, &hex("82 0401 61"));
    assert_eq!(h, known(&[(":method", "GET"), (":path", "a")]));
}

#[test]
fn errors_and_truncation_empty_the_table() {
    let mut d = Decoder::new(false);
    decode(&mut d, &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572")).1.unwrap();
    assert_eq!(d.len(), 1);
    // Index 0 is invalid; the header before it was still visited.
    let (h, r) = decode(&mut d, &hex("82 80"));
    assert_eq!(r, Err(DecodeError::Invalid));
    assert_eq!(h, known(&[(":method", "GET")]));
    assert!(d.is_empty() && d.is_gapped());
    // A cut block: the complete headers are visited, the table is emptied.
    let mut d = Decoder::new(false);
    decode(&mut d, &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572")).1.unwrap();
    let mut seen = 0;
    let r = d.decode(&hex("82 be 0405 2f61"), false, |_| seen += 1);
    assert_eq!(r, Err(DecodeError::Truncated));
    assert_eq!(seen, 2);
    assert!(d.is_empty());
    // A complete-looking block declared incomplete also empties the table.
    let mut d = Decoder::new(false);
    decode(&mut d, &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572")).1.unwrap();
    assert_eq!(d.decode(&hex("82"), false, |_| {}), Err(DecodeError::Truncated));
    assert!(d.is_empty());
}

#[test]
fn hostile_integers_and_lengths() {
    let mut d = Decoder::new(false);
    // A string length of 2^21 with 3 bytes present: truncated, nothing allocated.
    assert_eq!(decode(&mut d, &hex("00 ff ff ff 7f 61")).1, Err(DecodeError::Truncated));
    // Integer continuation past 2^24.
    assert_eq!(decode(&mut d, &hex("ff ff ff ff ff 0f")).1, Err(DecodeError::Invalid));
    // Endless continuation bytes.
    assert_eq!(decode(&mut d, &hex("ff 80 80 80 80 80 80 80 80 01")).1, Err(DecodeError::Invalid));
    // A size update above the limit is clamped, not trusted.
    let mut d = Decoder::new(false);
    decode(&mut d, &hex("3fe1ff03")).1.unwrap();
    assert_eq!(d.max_size, DEFAULT_TABLE_SIZE);
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut d = Decoder::new(true);
    for _ in 0..20_000 {
        let len = rng.random_range(0..64);
        let block: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let _ = d.decode(&block, rng.random_bool(0.8), |_| {});
        assert!(d.size <= MAX_TABLE_SIZE);
    }
}

/// Header lists with repeats (so the encoder uses its dynamic table),
/// sizes that force evictions, and names the static table has and lacks.
pub(crate) fn random_headers(rng: &mut StdRng) -> Vec<(Vec<u8>, Vec<u8>)> {
    const METHODS: [&str; 5] = ["GET", "POST", "PUT", "DELETE", "PATCH"];
    const NAMES: [&str; 8] = ["content-type", "user-agent", "traceparent", "x-a", "x-b", "accept", "cookie", "grpc-timeout"];
    let mut h = vec![
        (b":method".to_vec(), METHODS[rng.random_range(0..METHODS.len())].as_bytes().to_vec()),
        (b":scheme".to_vec(), b"http".to_vec()),
        (b":path".to_vec(), format!("/p{}", rng.random_range(0..30)).into_bytes()),
        (b":authority".to_vec(), format!("host{}", rng.random_range(0..3)).into_bytes()),
    ];
    // Pseudo-headers in random order, regular ones after.
    for i in (1..4).rev() {
        let j = rng.random_range(0..=i);
        h.swap(i, j);
    }
    for _ in 0..rng.random_range(0..6) {
        let n = NAMES[rng.random_range(0..NAMES.len())];
        let vlen = if rng.random_bool(0.1) { rng.random_range(100..600) } else { rng.random_range(0..12) };
        let v: String = (0..vlen).map(|_| char::from(b'a' + rng.random_range(0..3u8))).collect();
        h.push((n.as_bytes().to_vec(), v.into_bytes()));
    }
    h
}

/// Checks that every known part of `got` equals `want`, position by
/// position, and returns how many parts were unknown.
fn never_wrong(got: &[Line], want: &[(Vec<u8>, Vec<u8>)]) -> usize {
    assert_eq!(got.len(), want.len(), "one header per representation");
    let mut unknown = 0;
    for ((gn, gv), (wn, wv)) in got.iter().zip(want) {
        match gn {
            Some(n) => assert_eq!(n.as_bytes(), &wn[..], "wrong name"),
            None => unknown += 1,
        }
        match gv {
            Some(v) => assert_eq!(v.as_bytes(), &wv[..], "wrong value"),
            None => unknown += 1,
        }
    }
    unknown
}

/// The property the span-actor relies on: decoding that starts late, or
/// misses blocks, reports unknowns but never a wrong name or value. Two
/// independent encoders: ours (random representations, Huffman, size
/// updates) and the `hpack` crate's.
#[test]
fn desynchronised_tables_never_decode_wrong_values() {
    let mut total_unknown = 0;
    let mut total_known_late = 0;
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let lists: Vec<_> = (0..40).map(|_| random_headers(&mut rng)).collect();
        let use_crate = seed % 2 == 1;
        let mut ours = Encoder::new();
        let mut theirs = hpack::Encoder::new();
        let blocks: Vec<Vec<u8>> = lists
            .iter()
            .map(|l| {
                if use_crate {
                    theirs.encode(l.iter().map(|(n, v)| (&n[..], &v[..])))
                } else {
                    if rng.random_bool(0.1) {
                        ours.resize(rng.random_range(0..=4096));
                    }
                    ours.encode(l, &mut rng)
                }
            })
            .collect();

        // From the start: everything known and right.
        let mut full = Decoder::new(false);
        for (b, l) in blocks.iter().zip(&lists) {
            let (h, r) = decode(&mut full, b);
            r.unwrap();
            assert_eq!(never_wrong(&h, l), 0, "seed {seed}");
        }

        // Starting late, and with blocks lost on the way.
        let start = rng.random_range(1..20);
        let mut late = Decoder::new(true);
        for (i, (b, l)) in blocks.iter().zip(&lists).enumerate().skip(start) {
            if rng.random_bool(0.1) {
                late.gap(); // this block went by unseen
                continue;
            }
            let (h, r) = decode(&mut late, b);
            r.unwrap();
            let u = never_wrong(&h, l);
            total_unknown += u;
            if i > start + 10 {
                total_known_late += h.len() * 2 - u;
            }
        }
    }
    // The test must exercise both outcomes.
    assert!(total_unknown > 100, "{total_unknown}");
    assert!(total_known_late > 10_000, "{total_known_late}");
}
