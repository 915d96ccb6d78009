//! `[redaction]`: what of a request's URL never leaves the host.

use serde::{Deserialize, Serialize};

use crate::types::QueryKey;
use crate::{invalid, ConfigError};

/// The query keys the OpenTelemetry HTTP conventions say to redact by
/// default (`url.query`, `url.full`): their values are always replaced by
/// `REDACTED`, whatever the configuration.
pub const CONVENTION_QUERY_KEYS: [&str; 4] = ["AWSAccessKeyId", "Signature", "sig", "X-Goog-Signature"];

/// Common secret query keys, redacted on top of the conventions' unless
/// `redaction.default_query_keys = false`. The conventions list only
/// signed-URL keys; these are the places credentials are known to travel
/// in query strings. Each is an exact key (ASCII case-insensitive, after
/// percent-decoding), chosen because a value under it is a credential more
/// often than not; hiding a harmless value costs a debugging detail,
/// exporting a credential hands it to everyone who reads the telemetry.
pub const DEFAULT_QUERY_KEYS: [&str; 26] = [
    // Bearer tokens: OAuth 2.0 allows `access_token` in a URI query (RFC
    // 6750 2.3); refresh and OpenID Connect ID tokens travel beside it;
    // `token`, `jwt` and GitLab's `private_token` are the common spellings
    // of an API token in a URL.
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "jwt",
    "private_token",
    // Shared secrets and passwords (login forms sent with GET, basic-auth
    // fallbacks, OAuth clients that send `client_secret` in the query).
    "client_secret",
    "secret",
    "password",
    "passwd",
    "pwd",
    // API keys: `key` is Google APIs' parameter (`?key=AIza…`, a billable
    // credential); its other uses (a sort or cache key) lose only their value.
    "api_key",
    "apikey",
    "api-key",
    "key",
    // `auth=` (Firebase's REST API takes an ID token there) and an
    // `Authorization` header value put in the query by some proxies.
    "auth",
    "authorization",
    // Session ids in URLs when cookies are off (PHP's `PHPSESSID`, Java's
    // `jsessionid`, and the generic names): whoever has one is logged in.
    "session",
    "sessionid",
    "session_id",
    "phpsessid",
    "jsessionid",
    // Signed URLs beyond the conventions' SigV2 and GCS keys: AWS SigV4's
    // signature, its credential (the access key id, as `AWSAccessKeyId`
    // for SigV2) and the STS session token (a credential in itself), and
    // the credential of a GCS V4 signed URL (as `X-Goog-Signature`'s).
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "X-Goog-Credential",
];

/// How many extra query keys may be configured.
pub const MAX_QUERY_KEYS: usize = 256;

/// Redaction of URLs before they are exported. User information
/// (`user:password@`) is never exported, and the values of
/// [`CONVENTION_QUERY_KEYS`] are always `REDACTED`; this adds to that.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactionSettings {
    /// More query keys whose values become `REDACTED` (the key is kept:
    /// `tenant_secret=REDACTED`), e.g. `["tenant_secret", "otp"]`. Keys
    /// match ASCII case-insensitively, after percent-decoding (`%74oken`
    /// is `token`), so a client cannot spell a secret past the list.
    pub query_keys: Vec<QueryKey>,
    /// Also redact [`DEFAULT_QUERY_KEYS`] (`token`, `password`, `key`,
    /// `X-Amz-Security-Token`…). `false` leaves the conventions' four and
    /// `query_keys` only: for services whose `key` or `session` parameters
    /// are not secrets and are worth seeing.
    pub default_query_keys: bool,
    /// Never export `url.query` (nor the query in `url.full`, or on
    /// standard output): for services whose queries carry secrets or
    /// personal data under keys nobody can list.
    pub drop_query: bool,
}

impl Default for RedactionSettings {
    fn default() -> Self {
        RedactionSettings { query_keys: Vec::new(), default_query_keys: true, drop_query: false }
    }
}

impl RedactionSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.query_keys.len() > MAX_QUERY_KEYS {
            return Err(invalid("redaction.query_keys", "must list at most 256 keys", "[\"token\"]", self.query_keys.len()));
        }
        Ok(())
    }

    /// Every key whose values are redacted, lowercase, sorted, once each:
    /// the conventions', the defaults (unless turned off), the configured.
    pub fn secret_keys(&self) -> Vec<String> {
        let defaults = if self.default_query_keys { &DEFAULT_QUERY_KEYS[..] } else { &[] };
        let mut keys: Vec<String> = CONVENTION_QUERY_KEYS.iter().chain(defaults).map(|k| k.to_ascii_lowercase()).collect();
        keys.extend(self.query_keys.iter().map(|k| k.as_str().to_owned()));
        keys.sort();
        keys.dedup();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_keys_on_top_of_the_conventions() {
        for k in CONVENTION_QUERY_KEYS.iter().chain(&DEFAULT_QUERY_KEYS) {
            assert!(k.parse::<QueryKey>().is_ok(), "{k}");
        }
        let on = RedactionSettings::default().secret_keys();
        assert_eq!(on.len(), CONVENTION_QUERY_KEYS.len() + DEFAULT_QUERY_KEYS.len(), "no key listed twice: {on:?}");
        for k in ["token", "password", "x-amz-security-token", "sig", "awsaccesskeyid"] {
            assert!(on.iter().any(|x| x == k), "{k}");
        }
        let off = RedactionSettings { default_query_keys: false, query_keys: vec!["Otp".parse().unwrap()], ..Default::default() };
        assert_eq!(off.secret_keys(), ["awsaccesskeyid", "otp", "sig", "signature", "x-goog-signature"]);
    }
}
