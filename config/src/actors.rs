//! `[actors]`: how the unprivileged actors run.

use serde::{Deserialize, Serialize};

use crate::{invalid, ConfigError};

/// How the unprivileged actors run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActorSettings {
    /// User the span-actor and exporter-actor run as (never root).
    pub user: String,
    /// Group they run as; empty = the user's primary group. Also the group
    /// that may read the loader's socket.
    pub group: String,
}

impl Default for ActorSettings {
    fn default() -> Self {
        ActorSettings { user: "nobody".into(), group: String::new() }
    }
}

impl ActorSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.user.is_empty() || self.user == "root" || self.user == "0" {
            return Err(invalid("actors.user", "must name an unprivileged user", "\"nobody\"", format!("{:?}", self.user)));
        }
        Ok(())
    }
}
