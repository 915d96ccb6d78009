//! `[routes]`: `http.route` naming and its cardinality guard.

use serde::{Deserialize, Serialize};

use crate::types::RouteTemplate;
use crate::{invalid, ConfigError};

/// What ignored routes are dropped from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IgnoreMode {
    /// Neither traced nor measured.
    All,
    /// Measured, not traced.
    Traces,
    /// Traced, not measured.
    Metrics,
}

/// How a path that matches no pattern becomes `http.route`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnmatchedRoutes {
    /// No route: span named `{method}` (safest for cardinality).
    Path,
    /// Route `/*`.
    Wildcard,
    /// The path with id-like segments (numbers, UUIDs, hex, random tokens)
    /// replaced by `*`.
    Heuristic,
}

/// Route naming and its cardinality guard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteSettings {
    /// Route templates, first match wins: `/users/{id}`, `/static/*`.
    pub patterns: Vec<RouteTemplate>,
    /// Templates of requests to drop (health checks, metrics scrapes).
    pub ignored: Vec<RouteTemplate>,
    /// What ignored requests are dropped from.
    pub ignore_mode: IgnoreMode,
    /// Naming of paths matching no pattern.
    pub unmatched: UnmatchedRoutes,
    /// Distinct routes per service; past it new routes become one overflow
    /// value, so a scan of random URLs cannot explode metric series.
    pub max_cardinality: usize,
    /// Services whose routes are remembered (their names are any local
    /// user's `OTEL_SERVICE_NAME`); past it the least recently routed one
    /// is forgotten and counted, and earns its routes again if it comes back.
    pub max_services: usize,
}

impl Default for RouteSettings {
    fn default() -> Self {
        RouteSettings {
            patterns: Vec::new(),
            ignored: Vec::new(),
            ignore_mode: IgnoreMode::All,
            unmatched: UnmatchedRoutes::Heuristic,
            max_cardinality: 500,
            max_services: 1024,
        }
    }
}

impl RouteSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=1_000_000).contains(&self.max_cardinality) {
            return Err(invalid("routes.max_cardinality", "must be 1..=1000000", "500", self.max_cardinality));
        }
        if !(1..=1_000_000).contains(&self.max_services) {
            return Err(invalid("routes.max_services", "must be 1..=1000000", "1024", self.max_services));
        }
        Ok(())
    }
}
