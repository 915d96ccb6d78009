//! `[services]`: how `service.name` is chosen.

use serde::{Deserialize, Serialize};

use crate::types::ExeRegex;
use crate::{invalid, ConfigError};

/// A configured service name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceRule {
    /// The name to use.
    pub name: String,
    /// Applies to processes serving on one of these ports…
    #[serde(default)]
    pub ports: Vec<u16>,
    /// …or whose executable name matches this regex.
    #[serde(default)]
    pub exe_name: Option<ExeRegex>,
}

/// Service naming: configured rules first, then `OTEL_SERVICE_NAME` from the
/// process environment, then the executable name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceSettings {
    /// The rules, first match wins.
    pub rules: Vec<ServiceRule>,
}

impl ServiceSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.name.trim().is_empty() {
                return Err(invalid(format!("services.rules[{i}].name"), "must not be empty", "\"checkout\"", format!("{:?}", rule.name)));
            }
            if rule.ports.is_empty() && rule.exe_name.is_none() {
                return Err(invalid(
                    format!("services.rules[{i}]"),
                    "needs `ports` or `exe_name`",
                    "{ name = \"web\", ports = [8080] }",
                    &rule.name,
                ));
            }
        }
        Ok(())
    }
}
