//! Protocol Buffers wire format, written by hand: just what the OTLP
//! requests need (varints, fixed-width numbers, length-delimited fields).
//!
//! A nested message's length comes before its bytes, so every message is
//! written by a function generic over [`Out`]: run once on a [`Len`] (which
//! only adds up sizes) and once on the buffer. Fields go out in field-number
//! order and proto3 defaults (0, empty) are left out, as prost does, so a
//! request here is byte for byte what prost would encode from the same
//! values.

/// Varint (int32, int64, uint32, uint64, bool, enum).
pub const VARINT: u32 = 0;
/// fixed64, double.
pub const FIXED64: u32 = 1;
/// Strings, bytes, nested messages, packed repeated fields.
pub const LEN: u32 = 2;
/// fixed32, float.
pub const FIXED32: u32 = 5;

/// Where encoded bytes go: a buffer, or a byte count.
pub trait Out {
    /// Appends raw bytes.
    fn put(&mut self, b: &[u8]);
    /// Appends one byte.
    fn byte(&mut self, b: u8);

    /// Appends a base-128 varint.
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    /// Appends a field key.
    fn key(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field << 3 | wire));
    }

    /// Takes note of an `n`-byte message body whose length is already
    /// known; true if that is all this output needs (a [`Len`] adds `n` and
    /// the body is not walked), false if the body must be written.
    fn counted(&mut self, _n: usize) -> bool {
        false
    }
}

impl Out for Vec<u8> {
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn byte(&mut self, b: u8) {
        self.push(b);
    }
    #[inline]
    fn varint(&mut self, mut v: u64) {
        // Most varints here (lengths, small numbers) take one byte.
        if v < 0x80 {
            self.push(v as u8);
            return;
        }
        while v >= 0x80 {
            self.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }
}

/// Counts the bytes a message takes, writing nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Len(pub usize);

impl Out for Len {
    fn put(&mut self, b: &[u8]) {
        self.0 += b.len();
    }
    fn byte(&mut self, _: u8) {
        self.0 += 1;
    }
    fn varint(&mut self, v: u64) {
        self.0 += varint_len(v);
    }
    fn counted(&mut self, n: usize) -> bool {
        self.0 += n;
        true
    }
}

/// Bytes a varint takes (1 to 10).
#[inline]
pub const fn varint_len(v: u64) -> usize {
    // Most are lengths and small numbers: compare before counting bits.
    if v < 1 << 7 {
        1
    } else if v < 1 << 14 {
        2
    } else {
        // 1 + floor(log128(v)).
        ((64 - v.leading_zeros() as usize) * 9 + 64) / 64
    }
}

/// Bytes a key takes.
pub const fn key_len(field: u32) -> usize {
    varint_len((field as u64) << 3)
}

/// Bytes a length-delimited field of `n` bytes takes, key included.
pub const fn len_field(field: u32, n: usize) -> usize {
    key_len(field) + varint_len(n as u64) + n
}

/// A length-delimited field (string, bytes, or an already-encoded message).
pub fn bytes<O: Out + ?Sized>(o: &mut O, field: u32, b: &[u8]) {
    o.key(field, LEN);
    o.varint(b.len() as u64);
    o.put(b);
}

/// A string or bytes field, left out when empty (proto3 default).
pub fn opt_bytes<O: Out + ?Sized>(o: &mut O, field: u32, b: &[u8]) {
    if !b.is_empty() {
        bytes(o, field, b);
    }
}

/// A varint field, left out when 0.
pub fn uint<O: Out + ?Sized>(o: &mut O, field: u32, v: u64) {
    if v != 0 {
        o.key(field, VARINT);
        o.varint(v);
    }
}

/// A fixed64 field, left out when 0.
pub fn fixed64<O: Out + ?Sized>(o: &mut O, field: u32, v: u64) {
    if v != 0 {
        o.key(field, FIXED64);
        o.put(&v.to_le_bytes());
    }
}

/// A fixed32 field, left out when 0.
pub fn fixed32<O: Out + ?Sized>(o: &mut O, field: u32, v: u32) {
    if v != 0 {
        o.key(field, FIXED32);
        o.put(&v.to_le_bytes());
    }
}

/// A double field, left out when 0.0 (proto3 default; -0.0 is kept, as
/// prost keeps it).
pub fn double<O: Out + ?Sized>(o: &mut O, field: u32, v: f64) {
    if v.to_bits() != 0 {
        o.key(field, FIXED64);
        o.put(&v.to_le_bytes());
    }
}

/// An `optional double` field: always written.
pub fn opt_double<O: Out + ?Sized>(o: &mut O, field: u32, v: f64) {
    o.key(field, FIXED64);
    o.put(&v.to_le_bytes());
}

/// A nested message: its length (from a counting pass), then its bytes.
pub fn message<O: Out + ?Sized>(o: &mut O, field: u32, body: impl Fn(&mut dyn Out)) {
    let mut n = Len(0);
    body(&mut n);
    o.key(field, LEN);
    o.varint(n.0 as u64);
    if !o.counted(n.0) {
        body(&mut DynOut(o));
    }
}

/// Room left for a length before a body written in one pass: two bytes
/// hold lengths from 128 B to 16 KiB, where every span falls (a span's ids
/// and times alone are over 50 bytes, its attributes several times that),
/// so a span's body is never moved.
const LEN_ROOM: usize = 2;

/// Writes a message body with `body`, preceded by its length, in one pass
/// (no counting pass): the body goes after room for the length, which is
/// then written and the body moved back over what it did not use (a short
/// copy, cheaper than walking the body twice).
pub fn length_prefixed(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; LEN_ROOM]);
    body(out);
    let start = at + LEN_ROOM;
    let n = out.len() - start;
    let k = varint_len(n as u64);
    if k > LEN_ROOM {
        // Longer than expected: make room first.
        let end = out.len();
        out.resize(end + k - LEN_ROOM, 0);
        out.copy_within(start..end, at + k);
    } else if k < LEN_ROOM {
        out.copy_within(start.., at + k);
        out.truncate(at + k + n);
    }
    let mut v = n as u64;
    for b in &mut out[at..at + k] {
        *b = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
    }
    out[at + k - 1] &= 0x7f;
}

/// Lets a `&mut O` be passed as `&mut dyn Out` without boxing.
struct DynOut<'a, O: Out + ?Sized>(&'a mut O);

impl<O: Out + ?Sized> Out for DynOut<'_, O> {
    fn put(&mut self, b: &[u8]) {
        self.0.put(b)
    }
    fn byte(&mut self, b: u8) {
        self.0.byte(b)
    }
    fn varint(&mut self, v: u64) {
        self.0.varint(v)
    }
    fn counted(&mut self, n: usize) -> bool {
        self.0.counted(n)
    }
}

// --- OpenTelemetry common types (opentelemetry/proto/common/v1) ---

pub use ipc_schema::Value;

/// `AnyValue.string_value`.
const ANY_STRING: u32 = 1;
/// `AnyValue.bool_value`.
const ANY_BOOL: u32 = 2;
/// `AnyValue.int_value`.
const ANY_INT: u32 = 3;
/// `KeyValue.key`.
const KV_KEY: u32 = 1;
/// `KeyValue.value`.
const KV_VALUE: u32 = 2;

/// Bytes the `AnyValue` message of `v` takes. A oneof member is written
/// even when it holds the default value.
fn any_len(v: &Value<&str>) -> usize {
    match v {
        Value::Str(s) => len_field(ANY_STRING, s.len()),
        Value::Bool(_) => key_len(ANY_BOOL) + 1,
        Value::Int(i) => key_len(ANY_INT) + varint_len(*i as u64),
    }
}

/// Bytes a `KeyValue` message takes (without its own key and length).
pub fn kv_len(key: &str, v: Value<&str>) -> usize {
    let key_part = if key.is_empty() { 0 } else { len_field(KV_KEY, key.len()) };
    key_part + len_field(KV_VALUE, any_len(&v))
}

/// A `KeyValue` as field `field` of the enclosing message.
pub fn kv<O: Out + ?Sized>(o: &mut O, field: u32, key: &str, v: Value<&str>) {
    let n = kv_len(key, v);
    o.key(field, LEN);
    o.varint(n as u64);
    if o.counted(n) {
        return;
    }
    opt_bytes(o, KV_KEY, key.as_bytes());
    o.key(KV_VALUE, LEN);
    o.varint(any_len(&v) as u64);
    match v {
        Value::Str(s) => bytes(o, ANY_STRING, s.as_bytes()),
        Value::Bool(b) => {
            o.key(ANY_BOOL, VARINT);
            o.byte(u8::from(b));
        }
        Value::Int(i) => {
            o.key(ANY_INT, VARINT);
            o.varint(i as u64);
        }
    }
}

/// An attribute key known when compiling, with the bytes that surround it
/// in every `KeyValue` (`key` field, then the `value` field's key): an
/// attribute is then two copies and three varints. Made by [`key!`].
#[derive(Debug)]
pub struct Key {
    /// The attribute name.
    pub name: &'static str,
    /// `0x0a, len, name…, 0x12`.
    pub head: &'static [u8],
}

/// The bytes of [`Key::head`] for `name` (`M` = its length + 3); names are
/// shorter than 128 bytes, so their length is one byte.
pub const fn key_head<const M: usize>(name: &str) -> [u8; M] {
    let b = name.as_bytes();
    assert!(b.len() + 3 == M && b.len() < 128, "attribute names are shorter than 128 bytes");
    let mut head = [0u8; M];
    head[0] = (KV_KEY << 3 | LEN) as u8;
    head[1] = b.len() as u8;
    let mut i = 0;
    while i < b.len() {
        head[i + 2] = b[i];
        i += 1;
    }
    head[M - 1] = (KV_VALUE << 3 | LEN) as u8;
    head
}

/// A [`Key`] for a string literal, built when compiling.
macro_rules! key {
    ($name:literal) => {{
        const N: usize = $name.len();
        static HEAD: [u8; N + 3] = $crate::sinks::otlp::wire::key_head::<{ N + 3 }>($name);
        $crate::sinks::otlp::wire::Key { name: $name, head: &HEAD }
    }};
}
pub(crate) use key;

/// A `KeyValue` with a known key as field `field` (a field number below
/// 16, so its key is one byte) of the enclosing message: the hot path of
/// span attributes, same bytes as [`kv`].
#[inline(always)]
pub fn kv_known(out: &mut Vec<u8>, field: u32, key: &Key, v: Value<&str>) {
    let any = any_len(&v);
    let n = key.head.len() + varint_len(any as u64) + any;
    out.reserve(2 + varint_len(n as u64) + n);
    out.push((field << 3 | LEN) as u8);
    out.varint(n as u64);
    out.extend_from_slice(key.head);
    out.varint(any as u64);
    match v {
        Value::Str(s) => {
            out.push((ANY_STRING << 3 | LEN) as u8);
            out.varint(s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Bool(b) => {
            out.push((ANY_BOOL << 3 | VARINT) as u8);
            out.push(u8::from(b));
        }
        Value::Int(i) => {
            out.push((ANY_INT << 3 | VARINT) as u8);
            out.varint(i as u64);
        }
    }
}

/// `InstrumentationScope { name, version }` as field `field`.
pub fn scope<O: Out + ?Sized>(o: &mut O, field: u32, name: &str, version: &str) {
    message(o, field, |o| {
        opt_bytes(o, 1, name.as_bytes());
        opt_bytes(o, 2, version.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths() {
        for (v, n) in [(0u64, 1), (1, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (u64::MAX, 10), (1 << 63, 10)] {
            assert_eq!(varint_len(v), n, "{v}");
            let mut b = Vec::new();
            b.varint(v);
            assert_eq!(b.len(), n, "{v}");
        }
        let mut b = Vec::new();
        b.varint(300);
        assert_eq!(b, [0xac, 0x02]);
    }

    #[test]
    fn lengths_agree_with_writes() {
        for v in [
            Value::Str(""),
            Value::Str("abc"),
            Value::Str(&"x".repeat(300)),
            Value::Int(0),
            Value::Int(-1),
            Value::Int(8080),
            Value::Bool(false),
        ] {
            let mut b = Vec::new();
            kv(&mut b, 9, "k", v);
            let mut n = Len(0);
            kv(&mut n, 9, "k", v);
            assert_eq!(b.len(), n.0);
            assert_eq!(b.len(), len_field(9, kv_len("k", v)));
        }
    }

    #[test]
    fn known_keys_write_what_kv_writes() {
        let k = key!("http.request.method");
        assert_eq!(k.name, "http.request.method");
        for v in [Value::Str(""), Value::Str("GET"), Value::Str(&"x".repeat(200)), Value::Int(-7), Value::Int(443), Value::Bool(true)] {
            let (mut a, mut b) = (vec![1u8], vec![1u8]);
            kv(&mut a, 9, k.name, v);
            kv_known(&mut b, 9, &k, v);
            assert_eq!(a, b, "{v:?}");
        }
    }

    #[test]
    fn one_pass_lengths_are_canonical() {
        for n in [0usize, 1, 127, 128, 16_383, 16_384, 100_000, 2_097_151, 2_097_152, 3_000_000] {
            let mut one = vec![7u8];
            length_prefixed(&mut one, |o| o.extend(std::iter::repeat_n(0xab, n)));
            let mut two = vec![7u8];
            two.varint(n as u64);
            two.extend(std::iter::repeat_n(0xab, n));
            assert!(one == two, "{n}");
        }
    }
}
