//! Raw HPACK blocks into two decoders: one from the start, one that joins
//! late (as on a connection that began before tracing). Besides never
//! panicking, the late one must never know a value the early one decodes
//! differently: the span-actor's "never a wrong method or path".
#![no_main]

use libfuzzer_sys::fuzz_target;
use span_actor::h2::hpack::Decoder;

type Lines = Vec<(Option<Vec<u8>>, Option<Vec<u8>>)>;

fn decode(d: &mut Decoder, block: &[u8], complete: bool) -> (Lines, bool) {
    let mut lines = Vec::new();
    let ok = d
        .decode(block, complete, |h| {
            lines.push((h.name.map(<[u8]>::to_vec), h.value.map(<[u8]>::to_vec)))
        })
        .is_ok();
    (lines, ok)
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, mut rest)) = data.split_first() else {
        return;
    };
    let join_at = usize::from(ctl & 0x7);
    let mut early = Decoder::new(false);
    let mut late = Decoder::new(true);
    let mut i = 0;
    // Blocks: a length byte then that many bytes; its top bit marks a cut
    // block, the value 0x7f a SETTINGS_HEADER_TABLE_SIZE change.
    while let Some((&len, r)) = rest.split_first() {
        if len == 0x7f {
            let Some((v, r)) = r.split_first_chunk::<2>() else {
                return;
            };
            let v = u32::from(u16::from_be_bytes(*v));
            early.set_limit(v);
            late.set_limit(v);
            rest = r;
            continue;
        }
        let complete = len & 0x80 == 0;
        let n = usize::from(len & 0x7f).min(r.len());
        let (block, r) = r.split_at(n);
        rest = r;
        let (a, _) = decode(&mut early, block, complete);
        if i >= join_at {
            let (b, _) = decode(&mut late, block, complete);
            // The block's structure does not depend on the table.
            assert_eq!(a.len(), b.len());
            for ((an, av), (bn, bv)) in a.iter().zip(&b) {
                if let (Some(x), Some(y)) = (an, bn) {
                    assert_eq!(x, y, "late decoder named a header differently");
                }
                if let (Some(x), Some(y)) = (av, bv) {
                    assert_eq!(x, y, "late decoder gave another value");
                }
            }
        }
        i += 1;
    }
});
