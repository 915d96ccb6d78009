//! The health cache: each component's latest report, and when its
//! counting began (a restarted component counts from a new start).

use std::collections::BTreeMap;

use ipc_schema::{Component, HealthReport};

/// Health reports, with the time each component's counting began.
#[derive(Debug, Default)]
pub(super) struct Health {
    pub(super) reports: BTreeMap<Component, HealthReport>,
    /// Per component: (instance, start time in Unix ns). A new instance
    /// (a restart) counts from zero again.
    pub(super) starts: BTreeMap<Component, (u64, u64)>,
}
