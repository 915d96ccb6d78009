//! [`Text`]: a span's string as the span-actor makes it.
//!
//! Most of a span's strings are one of a few literals (`http`, `1.1`,
//! `GET`, an attribute's name) or the same text for many spans (a peer's
//! address); only a few are the request's own (its path, its user agent).
//! As `String`s each was an allocation and a copy per span, a fifth of the
//! span-actor's instructions with the parse's own. A `Text` is a literal,
//! a shared string (a reference count) or an owned one; it reads as `&str`
//! and is written to the wire as any other string ([`crate::Span`] with
//! `S = Text`).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A string that is a literal, shared, or owned; compared and hashed as
/// its text.
#[derive(Clone)]
pub enum Text {
    /// A literal: no allocation.
    Static(&'static str),
    /// Shared by many spans: a clone is a reference count.
    Shared(Arc<str>),
    /// This span's own.
    Owned(String),
}

impl Text {
    /// The text.
    pub fn as_str(&self) -> &str {
        match self {
            Text::Static(s) => s,
            Text::Shared(s) => s,
            Text::Owned(s) => s,
        }
    }
}

impl Default for Text {
    fn default() -> Self {
        Text::Static("")
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&'static str> for Text {
    fn from(s: &'static str) -> Self {
        Text::Static(s)
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text::Owned(s)
    }
}

impl From<std::borrow::Cow<'static, str>> for Text {
    fn from(s: std::borrow::Cow<'static, str>) -> Self {
        match s {
            std::borrow::Cow::Borrowed(s) => Text::Static(s),
            std::borrow::Cow::Owned(s) => Text::Owned(s),
        }
    }
}

impl From<Arc<str>> for Text {
    fn from(s: Arc<str>) -> Self {
        Text::Shared(s)
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl std::hash::Hash for Text {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_compares_and_hashes_as_its_text() {
        use std::collections::hash_map::DefaultHasher;
        use std::hash::{Hash, Hasher};
        let hash = |t: &Text| {
            let mut h = DefaultHasher::new();
            t.hash(&mut h);
            h.finish()
        };
        let kinds = [Text::from("10.0.0.1"), Text::from(Arc::<str>::from("10.0.0.1")), Text::from("10.0.0.1".to_owned())];
        for t in &kinds {
            assert_eq!(t, "10.0.0.1");
            assert_eq!(&**t, "10.0.0.1");
            assert_eq!(t.to_string(), "10.0.0.1");
            assert_eq!(format!("{t:?}"), "\"10.0.0.1\"");
            assert_eq!(t, &kinds[0]);
            assert_eq!(hash(t), hash(&kinds[0]));
        }
        assert_ne!(Text::from("a"), Text::from("b".to_owned()));
        assert_eq!(Text::default(), "");
    }
}
