//! Offsets of the kernel fields the probes read that the loader's CO-RE
//! relocation cannot place: aya 0.14 finds no match for any field of
//! `struct tcp_sock` (the instruction is poisoned and the program refused),
//! so the ones the probes need (the TCP sequence numbers of `bpf/join.h`
//! and `bpf/propagate.bpf.c`, RACK's newest delivered segment of
//! `bpf/http1_conn.h`) are looked up
//! here, in the running kernel's BTF, and handed to the
//! programs as globals (0: not found, and those probes do without).
//!
//! The BTF is the kernel's own (`/sys/kernel/btf/vmlinux`), yet it is read
//! as any input is: every offset checked, a malformed file is `None`.

use std::path::Path;

/// The kernel's BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Largest BTF file read (a distribution kernel's is 5–8 MiB).
const MAX_BTF: u64 = 64 << 20;

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;

/// Byte offsets in `struct tcp_sock` of `copied_seq` and `write_seq`, and
/// of `rack.mstamp` and `rack.end_seq` (0 when not found: those probes do
/// without).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpSeqOffsets {
    pub copied_seq: u32,
    pub write_seq: u32,
    pub rack_mstamp: u32,
    pub rack_end_seq: u32,
    /// `snd_nxt` (0 when not found): where the next byte never sent goes
    /// (bpf/propagate.bpf.c: nothing queued is unsent when it is write_seq).
    pub snd_nxt: u32,
}

impl TcpSeqOffsets {
    /// From the running kernel's BTF; zeros when it cannot be read or the
    /// fields are not there.
    pub fn of_running_kernel() -> TcpSeqOffsets {
        Self::from_file(Path::new(VMLINUX_BTF)).unwrap_or_default()
    }

    fn from_file(path: &Path) -> Option<TcpSeqOffsets> {
        use std::io::Read;
        let f = std::fs::File::open(path).ok()?;
        let mut data = Vec::new();
        f.take(MAX_BTF).read_to_end(&mut data).ok()?;
        Self::from_btf(&data)
    }

    /// From a BTF blob.
    pub fn from_btf(btf: &[u8]) -> Option<TcpSeqOffsets> {
        let copied_seq = member_offset(btf, "tcp_sock", "copied_seq")?;
        let write_seq = member_offset(btf, "tcp_sock", "write_seq")?;
        // Each lookup walks the whole BTF: `rack`'s own offset once.
        let rack = || {
            let at = member_offset(btf, "tcp_sock", "rack")?;
            let field = |m| at.checked_add(member_offset(btf, "tcp_rack", m)?);
            Some((field("mstamp")?, field("end_seq")?))
        };
        let (rack_mstamp, rack_end_seq) = rack().unwrap_or((0, 0));
        let snd_nxt = member_offset(btf, "tcp_sock", "snd_nxt").unwrap_or(0);
        Some(TcpSeqOffsets { copied_seq, write_seq, rack_mstamp, rack_end_seq, snd_nxt })
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let bytes = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// The NUL-terminated string at `at` of the string section.
fn str_at(strings: &[u8], at: u32) -> Option<&[u8]> {
    let s = strings.get(usize::try_from(at).ok()?..)?;
    Some(&s[..s.iter().position(|&c| c == 0)?])
}

/// Whether the enum named `enumeration` has a value named `value` (the
/// running kernel's BTF: `enum bpf_attach_type`'s
/// `BPF_TRACE_UPROBE_SESSION` tells Linux 6.13's uprobe sessions).
pub fn enum_has_value(enumeration: &str, value: &str) -> bool {
    use std::io::Read;
    let mut data = Vec::new();
    let read = std::fs::File::open(VMLINUX_BTF).and_then(|f| f.take(MAX_BTF).read_to_end(&mut data));
    read.is_ok() && enum_value_in(&data, enumeration, value).unwrap_or(false)
}

/// [`enum_has_value`] in a BTF blob.
pub fn enum_value_in(btf: &[u8], enumeration: &str, value: &str) -> Option<bool> {
    let mut found = false;
    walk(btf, |kind, name, vlen, body, types, strings| {
        if kind != KIND_ENUM || name != enumeration.as_bytes() {
            return Some(false);
        }
        for i in 0..vlen {
            let m = body.checked_add(i.checked_mul(8)?)?;
            if str_at(strings, u32_at(types, m)?)? == value.as_bytes() {
                found = true;
            }
        }
        Some(true)
    })?;
    Some(found)
}

/// Calls `each(kind, name, vlen, body, types, strings)` for every type of
/// the BTF blob until it returns `Some(true)`; None if malformed.
fn walk(btf: &[u8], mut each: impl FnMut(u32, &[u8], usize, usize, &[u8], &[u8]) -> Option<bool>) -> Option<()> {
    if u16::from_le_bytes([*btf.first()?, *btf.get(1)?]) != BTF_MAGIC {
        return None;
    }
    let hdr_len = usize::try_from(u32_at(btf, 4)?).ok()?;
    let type_off = usize::try_from(u32_at(btf, 8)?).ok()?;
    let type_len = usize::try_from(u32_at(btf, 12)?).ok()?;
    let str_off = usize::try_from(u32_at(btf, 16)?).ok()?;
    let str_len = usize::try_from(u32_at(btf, 20)?).ok()?;
    let types_start = hdr_len.checked_add(type_off)?;
    let types = btf.get(types_start..types_start.checked_add(type_len)?)?;
    let strings_start = hdr_len.checked_add(str_off)?;
    let strings = btf.get(strings_start..strings_start.checked_add(str_len)?)?;
    let mut at = 0usize;
    while at < types.len() {
        let name_off = u32_at(types, at)?;
        let info = u32_at(types, at + 4)?;
        let vlen = usize::try_from(info & 0xffff).ok()?;
        let kind = (info >> 24) & 0x1f;
        let body = at.checked_add(12)?;
        let extra = match kind {
            KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
            KIND_ARRAY => 12,
            KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => vlen.checked_mul(12)?,
            KIND_ENUM | KIND_FUNC_PROTO => vlen.checked_mul(8)?,
            2 | 7..=12 | 16 | 18 => 0,
            _ => return None,
        };
        if each(kind, str_at(strings, name_off)?, vlen, body, types, strings)? {
            return Some(());
        }
        at = body.checked_add(extra)?;
    }
    Some(())
}

/// The byte offset of direct member `member` of the struct named `strukt`
/// (the first struct of that name), if byte-aligned.
pub fn member_offset(btf: &[u8], strukt: &str, member: &str) -> Option<u32> {
    if u16::from_le_bytes([*btf.first()?, *btf.get(1)?]) != BTF_MAGIC {
        return None;
    }
    let hdr_len = usize::try_from(u32_at(btf, 4)?).ok()?;
    let type_off = usize::try_from(u32_at(btf, 8)?).ok()?;
    let type_len = usize::try_from(u32_at(btf, 12)?).ok()?;
    let str_off = usize::try_from(u32_at(btf, 16)?).ok()?;
    let str_len = usize::try_from(u32_at(btf, 20)?).ok()?;
    let types_start = hdr_len.checked_add(type_off)?;
    let types = btf.get(types_start..types_start.checked_add(type_len)?)?;
    let strings_start = hdr_len.checked_add(str_off)?;
    let strings = btf.get(strings_start..strings_start.checked_add(str_len)?)?;
    let mut at = 0usize;
    while at < types.len() {
        let name_off = u32_at(types, at)?;
        let info = u32_at(types, at + 4)?;
        let vlen = usize::try_from(info & 0xffff).ok()?;
        let kind = (info >> 24) & 0x1f;
        let kind_flag = info >> 31 == 1;
        let body = at.checked_add(12)?;
        let extra = match kind {
            KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
            KIND_ARRAY => 12,
            KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => vlen.checked_mul(12)?,
            KIND_ENUM | KIND_FUNC_PROTO => vlen.checked_mul(8)?,
            // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
            2 | 7..=12 | 16 | 18 => 0,
            _ => return None, // a kind this reader does not know: its size is unknown
        };
        if kind == KIND_STRUCT && str_at(strings, name_off)? == strukt.as_bytes() {
            for i in 0..vlen {
                let m = body.checked_add(i.checked_mul(12)?)?;
                if str_at(strings, u32_at(types, m)?)? == member.as_bytes() {
                    let raw = u32_at(types, m + 8)?;
                    let bits = if kind_flag { raw & 0x00ff_ffff } else { raw };
                    return (bits % 8 == 0).then_some(bits / 8);
                }
            }
            return None;
        }
        at = body.checked_add(extra)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob: `int` and `struct pair { int a; int b; }` (b at byte 4),
    /// with the kind flag as given.
    fn blob(kind_flag: bool) -> Vec<u8> {
        let strings = b"\0int\0pair\0a\0b\0";
        let mut types = Vec::new();
        let mut put = |v: &[u32]| v.iter().for_each(|x| types.extend_from_slice(&x.to_le_bytes()));
        put(&[1, KIND_INT << 24, 4, 32]); // [1] int
        put(&[5, (KIND_STRUCT << 24) | (u32::from(kind_flag) << 31) | 2, 8]); // [2] struct pair
        put(&[10, 1, 0]);
        put(&[12, 1, if kind_flag { (32 << 24) | 32 } else { 32 }]);
        let mut b = Vec::new();
        b.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for v in [24u32, 0, types.len() as u32, types.len() as u32, strings.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&types);
        b.extend_from_slice(strings);
        b
    }

    #[test]
    fn finds_members_with_and_without_the_kind_flag() {
        for flag in [false, true] {
            let b = blob(flag);
            assert_eq!(member_offset(&b, "pair", "a"), Some(0));
            assert_eq!(member_offset(&b, "pair", "b"), Some(4));
            assert_eq!(member_offset(&b, "pair", "c"), None);
            assert_eq!(member_offset(&b, "int", "a"), None);
        }
    }

    #[test]
    fn malformed_blobs_are_none_never_a_panic() {
        let b = blob(false);
        for cut in 0..b.len() {
            let _ = member_offset(&b[..cut], "pair", "b");
        }
        let mut bad = b.clone();
        bad[0] = 0;
        assert_eq!(member_offset(&bad, "pair", "b"), None);
        let mut huge = b.clone();
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(member_offset(&huge, "pair", "b"), None);
    }

    /// The running kernel's `tcp_sock` (every kernel ringtail supports has
    /// both fields, after the `inet_connection_sock` it begins with).
    #[test]
    fn the_running_kernel_s_attach_types() {
        // BPF_TRACE_UPROBE_MULTI is 6.6's, so is on every kernel the
        // socket backend runs on; a made-up value on none.
        assert!(!enum_has_value("bpf_attach_type", "BPF_TRACE_NO_SUCH_THING"));
        if std::path::Path::new(VMLINUX_BTF).exists() {
            assert!(enum_has_value("bpf_attach_type", "BPF_TRACE_KPROBE_MULTI"));
        }
    }

    #[test]
    fn the_running_kernels_tcp_sock() {
        let Some(o) = TcpSeqOffsets::from_file(Path::new(VMLINUX_BTF)) else {
            panic!("{VMLINUX_BTF}: tcp_sock's copied_seq and write_seq not found");
        };
        let sock = member_offset(&std::fs::read(VMLINUX_BTF).unwrap(), "tcp_sock", "inet_conn");
        assert_eq!(sock, Some(0));
        assert!(o.copied_seq > 1000 && o.write_seq > 1000 && o.copied_seq != o.write_seq, "{o:?}");
        // struct tcp_rack { u64 mstamp; u32 rtt_us; u32 end_seq; ... }
        assert!(o.rack_mstamp > 1000 && o.rack_end_seq == o.rack_mstamp + 12, "{o:?}");
        assert!(o.snd_nxt > 1000 && o.snd_nxt != o.write_seq, "{o:?}");
    }
}
