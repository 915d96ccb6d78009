//! HPACK decoding (RFC 7541) that knows what it does not know.
//!
//! One [`Decoder`] per connection and direction. Its dynamic table may
//! miss a prefix: on a connection that was already running when tracing
//! began, or after bytes went by unseen. HPACK makes that safe to handle:
//! the table is a FIFO, so dynamic index `62 + i` always names the i-th
//! newest insertion the encoder made. The decoder therefore keeps the
//! insertions it has seen since the last gap, newest first; an index inside
//! them is right, an index beyond them is reported as unknown, never
//! guessed. When a header block cannot be followed to its end (cut or
//! invalid), the number of insertions it made is unknown, so the table is
//! emptied: from then on only new insertions are trusted.
//!
//! The same argument makes the table's size bookkeeping safe to get
//! wrong: evicting earlier than the encoder only turns later references
//! into "unknown"; evicting later keeps entries the encoder will never
//! reference. So sizes come from in-band updates, clamped to the
//! peer-announced `SETTINGS_HEADER_TABLE_SIZE` and to [`MAX_TABLE_SIZE`].
//!
//! Hostile input: every length is checked against the bytes present
//! before anything is allocated, integers are bounded, nothing panics.

use std::collections::VecDeque;

use super::huffman;

/// The largest dynamic table this decoder keeps, in RFC 7541 size units
/// (name + value + 32 per entry), whatever the peer announces.
pub const MAX_TABLE_SIZE: usize = 64 * 1024;

/// The initial table size (RFC 7540 SETTINGS_HEADER_TABLE_SIZE default).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// Capacity of a Huffman scratch buffer kept between header blocks.
const SCRATCH_KEPT: usize = 4096;

/// Integers above this are refused (no legitimate length or index comes
/// near it; it keeps arithmetic far from overflow).
const MAX_INT: u64 = 1 << 24;

/// RFC 7541 Appendix A.
#[rustfmt::skip]
pub(crate) const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
];

/// One decoded header line. `None` is unknown: it refers to a dynamic
/// table entry inserted before what this decoder has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub name: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// Why a header block could not be decoded to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The block ends inside a representation (it was cut).
    Truncated,
    /// Index 0, an over-long integer or an invalid Huffman string.
    Invalid,
}

#[derive(Debug)]
struct Entry {
    /// Unknown when inserted with a name index that was unknown.
    name: Option<Box<[u8]>>,
    value: Box<[u8]>,
    /// RFC size (name counted as 0 when unknown: only ever evicts later,
    /// which is safe, see the module doc).
    size: usize,
}

impl Entry {
    /// What a name and value take on the heap.
    fn held(name: Option<&[u8]>, value: &[u8]) -> usize {
        use runtime_kit::memory::allocated;
        name.map_or(0, |n| allocated(n.len())) + allocated(value.len())
    }
}

/// The decoding state of one direction of one connection.
#[derive(Debug)]
pub struct Decoder {
    /// Newest first.
    entries: VecDeque<Entry>,
    size: usize,
    /// What the entries' names and values take on the heap (their size
    /// classes: more than their RFC size for large ones).
    held: usize,
    max_size: usize,
    /// The bound the decoding side announced (SETTINGS_HEADER_TABLE_SIZE).
    limit: usize,
    name_buf: Vec<u8>,
    value_buf: Vec<u8>,
    /// Entries emptied by a gap since the last insertion (for tests and
    /// statistics: is the table's prefix unknown?).
    gapped: bool,
}

impl Decoder {
    /// A decoder at the start of a connection (`mid_connection` false) or
    /// one whose earlier insertions were missed.
    pub fn new(mid_connection: bool) -> Self {
        Decoder {
            entries: VecDeque::new(),
            size: 0,
            held: 0,
            max_size: if mid_connection { MAX_TABLE_SIZE } else { DEFAULT_TABLE_SIZE },
            limit: if mid_connection { MAX_TABLE_SIZE } else { DEFAULT_TABLE_SIZE },
            name_buf: Vec::new(),
            value_buf: Vec::new(),
            gapped: mid_connection,
        }
    }

    /// The decoding side announced SETTINGS_HEADER_TABLE_SIZE = `v`: the
    /// encoder's table may be at most that (clamped to [`MAX_TABLE_SIZE`]).
    pub fn set_limit(&mut self, v: u32) {
        self.limit = (v as usize).min(MAX_TABLE_SIZE);
    }

    /// Bytes went by unseen: forget every insertion (their count is lost).
    pub fn gap(&mut self) {
        self.entries.clear();
        self.size = 0;
        self.held = 0;
        self.gapped = true;
        // The encoder's size is not known either: allow up to the limit.
        self.max_size = self.limit.max(self.max_size);
    }

    /// Whether insertions before the ones held may be missing.
    pub fn is_gapped(&self) -> bool {
        self.gapped
    }

    /// Heap bytes held: the entries' names and values as allocated, the
    /// table's slots, and the scratch buffers of Huffman-coded strings.
    pub fn bytes(&self) -> usize {
        use runtime_kit::memory::allocated;
        self.held
            + allocated(self.entries.capacity() * std::mem::size_of::<Entry>())
            + allocated(self.name_buf.capacity())
            + allocated(self.value_buf.capacity())
    }

    /// Entries held (for tests).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Decodes one complete header block (or, if `complete` is false, the
    /// first bytes of one), calling `visit` for each header in order. On
    /// an error or an incomplete block, the headers before the failure
    /// were visited, and the table is emptied (see [`Decoder::gap`]).
    pub fn decode(&mut self, block: &[u8], complete: bool, mut visit: impl FnMut(Header<'_>)) -> Result<(), DecodeError> {
        let r = self.decode_inner(block, &mut visit);
        // One long Huffman string must not stay allocated for the
        // connection's life.
        for buf in [&mut self.name_buf, &mut self.value_buf] {
            if buf.capacity() > SCRATCH_KEPT {
                *buf = Vec::new();
            }
        }
        match r {
            Ok(()) if complete => Ok(()),
            Ok(()) => {
                self.gap();
                Err(DecodeError::Truncated)
            }
            Err(e) => {
                self.gap();
                Err(e)
            }
        }
    }

    fn decode_inner(&mut self, block: &[u8], visit: &mut impl FnMut(Header<'_>)) -> Result<(), DecodeError> {
        let mut pos = 0;
        while pos < block.len() {
            let b = block[pos];
            if b & 0x80 != 0 {
                // Indexed header field.
                let idx = int(block, &mut pos, 7)?;
                match self.lookup(idx)? {
                    Lookup::Static(n, v) => visit(Header { name: Some(n.as_bytes()), value: Some(v.as_bytes()) }),
                    Lookup::Dynamic(i) => {
                        let e = &self.entries[i];
                        visit(Header { name: e.name.as_deref(), value: Some(&e.value) })
                    }
                    Lookup::Unknown => visit(Header { name: None, value: None }),
                }
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update.
                let size = int(block, &mut pos, 5)? as usize;
                self.max_size = size.min(self.limit).min(MAX_TABLE_SIZE);
                self.evict(0);
            } else {
                let (prefix, index) = if b & 0x40 != 0 { (6, true) } else { (4, false) };
                let idx = int(block, &mut pos, prefix)?;
                // Name: indexed or literal.
                let mut name_lit: Option<&[u8]> = None;
                let mut name_huff = false;
                let mut name_known = true;
                let mut name_static: Option<&'static str> = None;
                let mut name_dyn: Option<usize> = None;
                if idx == 0 {
                    let (s, huff) = string(block, &mut pos)?;
                    if huff {
                        self.name_buf.clear();
                        huffman::decode(s, &mut self.name_buf).map_err(|_| DecodeError::Invalid)?;
                        name_huff = true;
                    } else {
                        name_lit = Some(s);
                    }
                } else {
                    match self.lookup(idx)? {
                        Lookup::Static(n, _) => name_static = Some(n),
                        Lookup::Dynamic(i) => {
                            if self.entries[i].name.is_some() {
                                name_dyn = Some(i)
                            } else {
                                name_known = false
                            }
                        }
                        Lookup::Unknown => name_known = false,
                    }
                }
                // Value: always literal.
                let (s, huff) = string(block, &mut pos)?;
                let value: &[u8] = if huff {
                    self.value_buf.clear();
                    huffman::decode(s, &mut self.value_buf).map_err(|_| DecodeError::Invalid)?;
                    &self.value_buf
                } else {
                    s
                };
                let name: Option<&[u8]> = if !name_known {
                    None
                } else if let Some(n) = name_static {
                    Some(n.as_bytes())
                } else if let Some(i) = name_dyn {
                    self.entries[i].name.as_deref()
                } else if name_huff {
                    Some(&self.name_buf)
                } else {
                    name_lit
                };
                visit(Header { name, value: Some(value) });
                if index {
                    let name: Option<Box<[u8]>> = name.map(Box::from);
                    let value: Box<[u8]> = Box::from(value);
                    self.insert(name, value);
                }
            }
        }
        Ok(())
    }

    fn lookup(&self, idx: u64) -> Result<Lookup, DecodeError> {
        match idx {
            0 => Err(DecodeError::Invalid),
            1..=61 => {
                let (n, v) = STATIC_TABLE[(idx - 1) as usize];
                Ok(Lookup::Static(n, v))
            }
            _ => {
                let i = (idx - 62) as usize;
                if i < self.entries.len() {
                    Ok(Lookup::Dynamic(i))
                } else {
                    Ok(Lookup::Unknown)
                }
            }
        }
    }

    fn insert(&mut self, name: Option<Box<[u8]>>, value: Box<[u8]>) {
        let size = name.as_ref().map_or(0, |n| n.len()) + value.len() + 32;
        if size > self.max_size {
            // RFC 7541 4.4: an entry larger than the table empties it.
            self.entries.clear();
            self.size = 0;
            self.held = 0;
            return;
        }
        self.evict(size);
        self.held += Entry::held(name.as_deref(), &value);
        self.entries.push_front(Entry { name, value, size });
        self.size += size;
    }

    /// Evicts the oldest entries until `room` more fits.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            match self.entries.pop_back() {
                Some(e) => {
                    self.size -= e.size;
                    self.held -= Entry::held(e.name.as_deref(), &e.value);
                }
                None => break,
            }
        }
    }
}

enum Lookup {
    Static(&'static str, &'static str),
    Dynamic(usize),
    Unknown,
}

/// RFC 7541 5.1 integer with an N-bit prefix, starting at `block[*pos]`.
fn int(block: &[u8], pos: &mut usize, prefix: u8) -> Result<u64, DecodeError> {
    let mask = (1u16 << prefix) as u8 - 1;
    let first = *block.get(*pos).ok_or(DecodeError::Truncated)? & mask;
    *pos += 1;
    if first < mask {
        return Ok(u64::from(first));
    }
    let mut v = u64::from(mask);
    let mut shift = 0u32;
    loop {
        let b = *block.get(*pos).ok_or(DecodeError::Truncated)?;
        *pos += 1;
        v += u64::from(b & 0x7f) << shift;
        if v > MAX_INT {
            return Err(DecodeError::Invalid);
        }
        if b & 0x80 == 0 {
            return Ok(v);
        }
        shift += 7;
        if shift > 28 {
            return Err(DecodeError::Invalid);
        }
    }
}

/// RFC 7541 5.2 string: the raw bytes (still Huffman-coded if the flag
/// says so) and the flag. The length is checked before anything is taken.
fn string<'a>(block: &'a [u8], pos: &mut usize) -> Result<(&'a [u8], bool), DecodeError> {
    let huff = *block.get(*pos).ok_or(DecodeError::Truncated)? & 0x80 != 0;
    let len = int(block, pos, 7)? as usize;
    let end = pos.checked_add(len).ok_or(DecodeError::Invalid)?;
    let s = block.get(*pos..end).ok_or(DecodeError::Truncated)?;
    *pos = end;
    Ok((s, huff))
}

#[cfg(test)]
pub(crate) mod tests;
