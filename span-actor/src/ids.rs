//! Span and trace ids: derived from what identifies a request, or read
//! from the W3C `traceparent` it carried ([`parse_traceparent`]).
//!
//! An id is a hash of (loader instance, connection, request number, ...),
//! with the loader instance being a random 64-bit number: ids look random
//! (as W3C asks), yet the same request always gets the same id. That makes
//! replays after a restart idempotent (the exporter drops spans it has
//! already sent) and lets a client span name its parent server span without
//! waiting for it.

use ipc_schema::Role;

/// SplitMix64's finaliser: a fast, well-mixing bijection on u64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn key(instance: u64, conn: u64, seq: u32, sub: u32) -> u64 {
    mix(instance ^ mix(conn ^ mix((u64::from(seq) << 32) | u64::from(sub))))
}

fn nonzero(v: u64) -> u64 {
    if v == 0 {
        1
    } else {
        v
    }
}

/// The span id of request `seq` (pipelined request `sub`) on `conn`, seen
/// from `role`'s side.
pub fn span_id(instance: u64, conn: u64, seq: u32, sub: u32, role: Role) -> u64 {
    let salt = match role {
        Role::Server => 0x5e5e_5e5e,
        Role::Client => 0xc1c1_c1c1,
    };
    nonzero(mix(key(instance, conn, seq, sub) ^ salt))
}

/// The trace id a server request starts when it carries no `traceparent`.
pub fn trace_id(instance: u64, conn: u64, seq: u32, sub: u32) -> u128 {
    let k = key(instance, conn, seq, sub);
    let hi = mix(k ^ 0x7472_6163_6531);
    let lo = nonzero(mix(k ^ 0x7472_6163_6532));
    (u128::from(hi) << 64) | u128::from(lo)
}

/// A W3C `traceparent`: version 00, trace id, parent span id, flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace it belongs to.
    pub trace_id: u128,
    /// The span that sent it: its receiver's parent.
    pub span_id: u64,
    /// `trace-flags` (bit 0: sampled).
    pub flags: u8,
}

/// Parses a `traceparent` value; invalid ones (all-zero ids, bad lengths,
/// version ff) are ignored, as the W3C spec says.
pub fn parse_traceparent(v: &str) -> Option<TraceParent> {
    let mut parts = v.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    if version.len() != 2 || version.eq_ignore_ascii_case("ff") || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex(version) || !hex(trace) || !hex(span) || !hex(flags) {
        return None;
    }
    let trace_id = u128::from_str_radix(trace, 16).ok()?;
    let span_id = u64::from_str_radix(span, 16).ok()?;
    if trace_id == 0 || span_id == 0 {
        return None;
    }
    Some(TraceParent { trace_id, span_id, flags: u8::from_str_radix(flags, 16).ok()? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn stable_and_distinct() {
        assert_eq!(span_id(1, 2, 3, 0, Role::Server), span_id(1, 2, 3, 0, Role::Server));
        let mut seen = HashSet::new();
        for inst in 0..4 {
            for conn in 0..50 {
                for seq in 0..50 {
                    for role in [Role::Server, Role::Client] {
                        assert!(seen.insert(span_id(inst, conn, seq, 0, role)));
                    }
                }
            }
        }
        assert_ne!(trace_id(1, 2, 3, 0), trace_id(1, 2, 3, 1));
        assert_ne!(trace_id(1, 2, 3, 0) >> 64, 0);
    }

    #[test]
    fn traceparent_rules() {
        assert!(parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01").is_none());
        assert!(parse_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_none());
        // future versions may append fields
        assert!(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x").is_some());
    }
}
