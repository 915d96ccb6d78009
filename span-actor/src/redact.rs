//! What of a URL never leaves the host: query values under secret keys.
//!
//! The OpenTelemetry HTTP conventions (`url.query`, `url.full`) say the
//! values of `AWSAccessKeyId`, `Signature`, `sig` and `X-Goog-Signature`
//! are replaced by `REDACTED` by default, the key kept (`sig=REDACTED`);
//! ringtail adds a list of common secret keys (`token`, `password`,
//! `X-Amz-Security-Token`…: `ringtail_config::redaction::DEFAULT_QUERY_KEYS`,
//! off with `redaction.default_query_keys = false`), `redaction.query_keys`
//! adds more, `redaction.drop_query` drops the query altogether. Keys match ASCII case-insensitively after percent-decoding,
//! and both `&` and `;` separate parameters (some servers split on either),
//! so a client cannot spell a secret past the list. Credentials in URLs
//! (`user:password@`) are removed where the request is parsed ([`crate::http`]).

use ringtail_config::RedactionSettings;

/// The value that replaces a redacted one.
pub const REDACTED: &str = "REDACTED";

/// Longest key compared: a longer one is no configured key (they are at
/// most 128 bytes), and decoding it would be work for nothing.
const MAX_KEY: usize = 3 * 128;

/// Query redaction, decided once from the settings.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// Lowercase keys whose values are redacted.
    keys: Vec<String>,
    drop_query: bool,
}

impl Redactor {
    /// The conventions' keys, the defaults and the configured ones
    /// ([`RedactionSettings::secret_keys`]).
    pub fn new(s: &RedactionSettings) -> Redactor {
        Redactor { keys: s.secret_keys(), drop_query: s.drop_query }
    }

    /// `url.query` as it may be exported: `None` when queries are dropped,
    /// else the query with every secret key's value replaced.
    pub fn query(&self, query: Option<&str>) -> Option<String> {
        let q = query?;
        if self.drop_query {
            return None;
        }
        // The common case, no secret key: one scan, one copy.
        let mut out: Option<String> = None;
        let mut start = 0;
        for (i, part) in split_params(q) {
            let (key, has_value) = match part.split_once('=') {
                Some((k, _)) => (k, true),
                None => (part, false),
            };
            if !has_value || !self.is_secret(key) {
                continue;
            }
            let o = out.get_or_insert_with(|| String::with_capacity(q.len()));
            let value_at = i + key.len() + 1;
            o.push_str(&q[start..value_at]);
            o.push_str(REDACTED);
            start = i + part.len();
        }
        match out {
            Some(mut o) => {
                o.push_str(&q[start..]);
                Some(o)
            }
            None => Some(q.to_owned()),
        }
    }

    fn is_secret(&self, raw_key: &str) -> bool {
        if raw_key.len() > MAX_KEY {
            return false;
        }
        let key = percent_decode_lower(raw_key);
        self.keys.binary_search(&key).is_ok()
    }
}

/// The parameters of a query with their offsets, split at `&` and `;`.
fn split_params(q: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    q.split(['&', ';']).map(move |p| {
        let i = at;
        at += p.len() + 1;
        (i, p)
    })
}

/// `%XX` decoded and `+` as a space, ASCII-lowercased; bytes that do not
/// decode to UTF-8 are replaced (such a key matches nothing configured).
fn percent_decode_lower(s: &str) -> String {
    // `+` is a space in a query (and `%2B` a plus: decoded after).
    let plus_as_space: Vec<u8> = s.bytes().map(|b| if b == b'+' { b' ' } else { b }).collect();
    let mut s = String::from_utf8_lossy(&runtime_kit::text::percent_decode(&plus_as_space)).into_owned();
    s.make_ascii_lowercase();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(keys: &[&str], drop_query: bool) -> Redactor {
        Redactor::new(&RedactionSettings {
            query_keys: keys.iter().map(|k| k.parse().unwrap()).collect(),
            drop_query,
            ..Default::default()
        })
    }

    #[test]
    fn common_secret_keys_are_redacted_by_default_and_can_be_turned_off() {
        let q = "token=t1&password=p2&X-Amz-Security-Token=s3&X-Amz-Credential=AKIA%2F4&access_token=a5&key=k6&page=2&keyword=x";
        assert_eq!(
            Redactor::new(&RedactionSettings::default()).query(Some(q)).as_deref(),
            Some("token=REDACTED&password=REDACTED&X-Amz-Security-Token=REDACTED&X-Amz-Credential=REDACTED&access_token=REDACTED&key=REDACTED&page=2&keyword=x")
        );
        let off = RedactionSettings { default_query_keys: false, query_keys: vec!["password".parse().unwrap()], ..Default::default() };
        assert_eq!(
            Redactor::new(&off).query(Some("token=t&password=p&sig=s")).as_deref(),
            Some("token=t&password=REDACTED&sig=REDACTED"),
            "the conventions' keys and the configured ones stay"
        );
    }

    #[test]
    fn convention_keys_are_redacted_keys_kept() {
        let r = redactor(&[], false);
        let q = "color=blue&sig=abc&AWSAccessKeyId=AKIA&Signature=s%2F1&X-Goog-Signature=g&q=1";
        assert_eq!(
            r.query(Some(q)).as_deref(),
            Some("color=blue&sig=REDACTED&AWSAccessKeyId=REDACTED&Signature=REDACTED&X-Goog-Signature=REDACTED&q=1")
        );
        assert_eq!(r.query(Some("a=1&b=2")).as_deref(), Some("a=1&b=2"));
        assert_eq!(r.query(None), None);
        assert_eq!(r.query(Some("")).as_deref(), Some(""));
    }

    #[test]
    fn case_encoding_and_separators_do_not_hide_a_key() {
        let r = redactor(&["Token"], false);
        assert_eq!(
            r.query(Some("SIG=1;%73ig=2&tok%65n=3&TOKEN=4&to+ken=5")).as_deref(),
            Some("SIG=REDACTED;%73ig=REDACTED&tok%65n=REDACTED&TOKEN=REDACTED&to+ken=5")
        );
        // a key without a value has nothing to hide; an empty value stays empty-looking
        assert_eq!(r.query(Some("sig&token=")).as_deref(), Some("sig&token=REDACTED"));
        // values containing '=' are redacted whole
        assert_eq!(r.query(Some("token=a=b=c&x=1")).as_deref(), Some("token=REDACTED&x=1"));
    }

    #[test]
    fn drop_query_drops_it() {
        assert_eq!(redactor(&[], true).query(Some("a=1")), None);
    }

    #[test]
    fn hostile_queries_never_panic() {
        let r = redactor(&["k"], false);
        for q in ["%", "%%", "%4", "=&=;;&", "sig=\u{fffd}", "%ff%fe=1", "k%=1", "%6", "%6b=1", &"%".repeat(1000)] {
            let _ = r.query(Some(q));
        }
        assert_eq!(r.query(Some("sig=%")).as_deref(), Some("sig=REDACTED"));
        assert_eq!(r.query(Some("%6b=%zz")).as_deref(), Some("%6b=REDACTED"));
    }
}
