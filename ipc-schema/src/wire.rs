//! The primitives of the hand-written batch layouts ([`crate::span_wire`],
//! [`crate::raw_wire`]): writers that append, and a reader that treats the
//! bytes as hostile (every length checked against what is left before
//! anything is allocated, every integer against its field's range, every
//! string for UTF-8).

/// Why a batch's bytes were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("batch ends inside {field}")]
    Truncated { field: &'static str },
    #[error("batch field {field} is out of range")]
    Range { field: &'static str },
    #[error("batch field {field} is not UTF-8")]
    Utf8 { field: &'static str },
    #[error("batch declares more {field} than its bytes can hold")]
    Count { field: &'static str },
    #[error("span {index} names resource {resource}, the batch has {resources}")]
    Resource { index: usize, resource: u32, resources: usize },
    #[error("{left} bytes follow the batch")]
    Trailing { left: usize },
}

/// LEB128.
#[inline]
pub(crate) fn put_uint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag LEB128 (an i64).
#[inline]
pub(crate) fn put_int(out: &mut Vec<u8>, i: i64) {
    put_uint(out, ((i << 1) ^ (i >> 63)) as u64);
}

#[inline]
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

#[inline]
pub(crate) fn put_opt(out: &mut Vec<u8>, s: Option<&str>) {
    put_some(out, s, put_str);
}

/// An optional value: a tag (0 none, 1 some), then the value as `put`
/// writes it.
#[inline(always)]
pub(crate) fn put_some<T>(out: &mut Vec<u8>, v: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put(out, v);
        }
    }
}

/// Reads the layouts' primitives off the front of a byte slice.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// True when every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Refuses bytes left after the batch.
    pub(crate) fn end(&self) -> Result<(), WireError> {
        match self.buf.len() {
            0 => Ok(()),
            left => Err(WireError::Trailing { left }),
        }
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], WireError> {
        if n > self.buf.len() {
            return Err(WireError::Truncated { field });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub(crate) fn fixed<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let b = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.fixed::<1>(field)?[0])
    }

    pub(crate) fn u16le(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.fixed(field)?))
    }

    pub(crate) fn u32le(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.fixed(field)?))
    }

    pub(crate) fn u64le(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.fixed(field)?))
    }

    pub(crate) fn uint(&mut self, field: &'static str) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8(field)?;
            let bits = u64::from(b & 0x7f);
            // the tenth byte may only hold the top bit of a u64
            if i == 9 && bits > 1 {
                return Err(WireError::Range { field });
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::Range { field })
    }

    /// A zigzag-encoded i64.
    pub(crate) fn int64(&mut self, field: &'static str) -> Result<i64, WireError> {
        let z = self.uint(field)?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    pub(crate) fn int<T: TryFrom<u64>>(&mut self, field: &'static str) -> Result<T, WireError> {
        T::try_from(self.uint(field)?).map_err(|_| WireError::Range { field })
    }

    /// A declared count of items of at least `min` bytes each.
    pub(crate) fn count(&mut self, field: &'static str, min: usize) -> Result<usize, WireError> {
        let n: usize = self.int(field)?;
        if n > self.buf.len() / min {
            return Err(WireError::Count { field });
        }
        Ok(n)
    }

    /// A string borrowed from the bytes.
    pub(crate) fn str_ref(&mut self, field: &'static str) -> Result<&'a str, WireError> {
        let n: usize = self.int(field)?;
        let b = self.take(n, field)?;
        if b.is_ascii() {
            // SAFETY: ASCII is UTF-8. (Nearly every string here is ASCII,
            // and this check costs a fraction of the general validation.)
            return Ok(unsafe { std::str::from_utf8_unchecked(b) });
        }
        std::str::from_utf8(b).map_err(|_| WireError::Utf8 { field })
    }

    pub(crate) fn str(&mut self, field: &'static str) -> Result<String, WireError> {
        self.str_ref(field).map(str::to_owned)
    }

    /// An optional string borrowed from the bytes.
    pub(crate) fn opt_ref(&mut self, field: &'static str) -> Result<Option<&'a str>, WireError> {
        self.some(field, |rd| rd.str_ref(field))
    }

    /// An optional value: a tag (0 none, 1 some; `field`), then the value
    /// as `read` reads it.
    #[inline(always)]
    pub(crate) fn some<T>(
        &mut self,
        field: &'static str,
        read: impl FnOnce(&mut Self) -> Result<T, WireError>,
    ) -> Result<Option<T>, WireError> {
        match self.u8(field)? {
            0 => Ok(None),
            1 => read(self).map(Some),
            _ => Err(WireError::Range { field }),
        }
    }

    pub(crate) fn opt(&mut self, field: &'static str) -> Result<Option<String>, WireError> {
        Ok(self.opt_ref(field)?.map(str::to_owned))
    }
}

/// Records of one kind in their wire layout, and how many.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Section {
    pub(crate) bytes: Vec<u8>,
    pub(crate) count: usize,
}

/// Checks that `bytes` are whole records of one kind; how many.
pub(crate) fn check<'a, T>(bytes: &'a [u8], read: fn(&mut Reader<'a>) -> Result<T, WireError>) -> Result<usize, WireError> {
    let mut rd = Reader::new(bytes);
    let mut n = 0;
    while !rd.is_empty() {
        read(&mut rd)?;
        n += 1;
    }
    Ok(n)
}

/// The records of a checked [`Section`], in order.
pub(crate) struct Records<'a, T> {
    rd: Reader<'a>,
    left: usize,
    read: fn(&mut Reader<'a>) -> Result<T, WireError>,
}

impl<'a, T> Records<'a, T> {
    pub(crate) fn new(section: &'a Section, read: fn(&mut Reader<'a>) -> Result<T, WireError>) -> Self {
        Records { rd: Reader::new(&section.bytes), left: section.count, read }
    }
}

impl<T> Iterator for Records<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // A section is only ever written by `write_*` or checked whole
        // before it is kept: an error cannot happen; it would end the
        // records, never panic.
        (self.read)(&mut self.rd).ok()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}
