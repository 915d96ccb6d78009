//! `[log]`: logging.

use serde::{Deserialize, Serialize};

use crate::{invalid, ConfigError};

/// Logging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `tracing` filter, e.g. `info` or `ringtail=debug`; `RUST_LOG` wins.
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings { level: "info".into() }
    }
}

impl LogSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.level.trim().is_empty() {
            return Err(invalid("log.level", "must be a tracing filter", "\"info\"", "\"\""));
        }
        Ok(())
    }
}
