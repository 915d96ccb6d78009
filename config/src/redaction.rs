//! `[redaction]`: what of a request's URL never leaves the host.

use serde::{Deserialize, Serialize};

use crate::types::QueryKey;
use crate::{invalid, ConfigError};

/// The query keys the OpenTelemetry HTTP conventions say to redact by
/// default (`url.query`, `url.full`): their values are always replaced by
/// `REDACTED`, whatever the configuration.
pub const CONVENTION_QUERY_KEYS: [&str; 4] = ["AWSAccessKeyId", "Signature", "sig", "X-Goog-Signature"];

/// How many extra query keys may be configured.
pub const MAX_QUERY_KEYS: usize = 256;

/// Redaction of URLs before they are exported. User information
/// (`user:password@`) is never exported, and the values of
/// [`CONVENTION_QUERY_KEYS`] are always `REDACTED`; this adds to that.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RedactionSettings {
    /// More query keys whose values become `REDACTED` (the key is kept:
    /// `token=REDACTED`), e.g. `["token", "api_key", "password"]`. Keys
    /// match ASCII case-insensitively, after percent-decoding (`%74oken`
    /// is `token`), so a client cannot spell a secret past the list.
    pub query_keys: Vec<QueryKey>,
    /// Never export `url.query` (nor the query in `url.full`, or on
    /// standard output): for services whose queries carry secrets or
    /// personal data under keys nobody can list.
    pub drop_query: bool,
}

impl RedactionSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.query_keys.len() > MAX_QUERY_KEYS {
            return Err(invalid("redaction.query_keys", "must list at most 256 keys", "[\"token\"]", self.query_keys.len()));
        }
        Ok(())
    }
}
