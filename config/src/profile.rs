//! `[profile]`: CPU profiling endpoints.

use serde::{Deserialize, Serialize};

use crate::{invalid, ConfigError};

/// CPU profiling endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileSettings {
    /// First of five consecutive loopback ports (one per component, at its
    /// `profiling_offset`: probe-loader, span-actor, exporter-actor,
    /// supervisor, k8s-actor) serving `/debug/pprof/profile`; 0 = off.
    /// `PROFILE_PORT` in the environment sets it too.
    pub port: u16,
}

impl ProfileSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.port != 0 && !(1024..=65531).contains(&self.port) {
            return Err(invalid("profile.port", "must be 0 (off) or 1024..=65531 (five consecutive ports)", "6060", self.port));
        }
        Ok(())
    }
}
