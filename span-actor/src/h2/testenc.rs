//! Test-only encoders: an HPACK encoder that picks representations at
//! random (indexing modes, Huffman, size updates, evictions) and an HTTP/2
//! frame writer. The HPACK side is checked against the RFC examples and
//! against the independent `hpack` crate in `hpack::tests`.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::Rng;

use super::hpack::STATIC_TABLE;
use super::huffman;

/// An HPACK encoder whose choices come from `rng`.
pub struct Encoder {
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max_size: usize,
    pending_update: Option<usize>,
    /// Always the most compact choice (indexed if possible, else literal
    /// with incremental indexing, no Huffman): predictable table use.
    plain: bool,
}

fn entry_size(n: &[u8], v: &[u8]) -> usize {
    n.len() + v.len() + 32
}

pub fn int(out: &mut Vec<u8>, first: u8, prefix: u8, mut v: usize) {
    let mask = (1usize << prefix) - 1;
    if v < mask {
        out.push(first | v as u8);
        return;
    }
    out.push(first | mask as u8);
    v -= mask;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

pub fn string(out: &mut Vec<u8>, s: &[u8], huff: bool) {
    if huff {
        let mut h = Vec::new();
        huffman::encode(s, &mut h);
        int(out, 0x80, 7, h.len());
        out.extend_from_slice(&h);
    } else {
        int(out, 0, 7, s.len());
        out.extend_from_slice(s);
    }
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    pub fn new() -> Self {
        Encoder { table: VecDeque::new(), size: 0, max_size: 4096, pending_update: None, plain: false }
    }

    /// An encoder that always indexes what it can and never uses Huffman.
    pub fn plain() -> Self {
        Encoder { plain: true, ..Self::new() }
    }

    /// Changes the table size at the start of the next block.
    pub fn resize(&mut self, size: usize) {
        self.pending_update = Some(size);
    }

    fn insert(&mut self, n: &[u8], v: &[u8]) {
        let s = entry_size(n, v);
        if s > self.max_size {
            self.table.clear();
            self.size = 0;
            return;
        }
        while self.size + s > self.max_size {
            let (on, ov) = self.table.pop_back().expect("size > 0 means entries");
            self.size -= entry_size(&on, &ov);
        }
        self.table.push_front((n.to_vec(), v.to_vec()));
        self.size += s;
    }

    fn find(&self, n: &[u8], v: &[u8]) -> (Option<usize>, Option<usize>) {
        let mut full = None;
        let mut name = None;
        for (i, (sn, sv)) in STATIC_TABLE.iter().enumerate() {
            if sn.as_bytes() == n {
                name.get_or_insert(i + 1);
                if sv.as_bytes() == v {
                    full = Some(i + 1);
                    break;
                }
            }
        }
        if full.is_none() {
            for (i, (dn, dv)) in self.table.iter().enumerate() {
                if dn == n {
                    name.get_or_insert(62 + i);
                    if dv == v {
                        full = Some(62 + i);
                        break;
                    }
                }
            }
        }
        (full, name)
    }

    /// Encodes one header block.
    pub fn encode(&mut self, headers: &[(Vec<u8>, Vec<u8>)], rng: &mut StdRng) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(size) = self.pending_update.take() {
            self.max_size = size;
            while self.size > self.max_size {
                let (on, ov) = self.table.pop_back().expect("size > 0 means entries");
                self.size -= entry_size(&on, &ov);
            }
            int(&mut out, 0x20, 5, size);
        }
        for (n, v) in headers {
            let (full, name) = self.find(n, v);
            if let (Some(i), true) = (full, self.plain || rng.random_bool(0.9)) {
                int(&mut out, 0x80, 7, i);
                continue;
            }
            let mode = if self.plain { 0 } else { rng.random_range(0..4) };
            let (first, prefix) = match mode {
                0 | 1 => (0x40, 6), // incremental indexing
                2 => (0x00, 4),     // without indexing
                _ => (0x10, 4),     // never indexed
            };
            match name {
                Some(i) if self.plain || rng.random_bool(0.8) => int(&mut out, first, prefix, i),
                _ => {
                    int(&mut out, first, prefix, 0);
                    string(&mut out, n, !self.plain && rng.random_bool(0.5));
                }
            }
            string(&mut out, v, !self.plain && rng.random_bool(0.5));
            if first == 0x40 {
                self.insert(n, v);
            }
        }
        out
    }
}

/// Frame types and flags for building frames in tests.
pub mod frame {
    pub const DATA: u8 = 0;
    pub const HEADERS: u8 = 1;
    pub const RST_STREAM: u8 = 3;
    pub const SETTINGS: u8 = 4;
    pub const PUSH_PROMISE: u8 = 5;
    pub const PING: u8 = 6;
    pub const GOAWAY: u8 = 7;
    pub const WINDOW_UPDATE: u8 = 8;
    pub const CONTINUATION: u8 = 9;
    pub const END_STREAM: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}
