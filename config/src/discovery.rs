//! `[discovery]`: which processes are traced.

use serde::{Deserialize, Serialize};

use crate::types::{ExeRegex, Port};
use crate::{invalid, ConfigError};

/// Which processes are traced. All empty = every process but ringtail's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoverySettings {
    /// Trace processes listening on these TCP ports (and every request
    /// served on them).
    pub open_ports: Vec<Port>,
    /// Trace processes whose executable name matches one of these regexes.
    pub exe_names: Vec<ExeRegex>,
    /// Trace these process ids (and their children).
    pub pids: Vec<u32>,
}

impl DiscoverySettings {
    /// True when nothing narrows the selection.
    pub fn selects_all(&self) -> bool {
        self.open_ports.is_empty() && self.exe_names.is_empty() && self.pids.is_empty()
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (i, pid) in self.pids.iter().enumerate() {
            if *pid == 0 {
                return Err(invalid(format!("discovery.pids[{i}]"), "must be a process id above 0", "1234", pid));
            }
        }
        Ok(())
    }
}
