//! `[pipeline]`: how batches travel between the processes.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{duration_between, invalid, ConfigError};

/// How batches travel between the processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineSettings {
    /// Events (or spans) per IPC message. Per-message costs (syscalls,
    /// wakeups, framing) are paid once per batch.
    pub batch_length: usize,
    /// A batch that is not full is sent after this long.
    #[serde(with = "humantime_serde")]
    pub batch_timeout: Duration,
    /// Where the IPC sockets live.
    pub runtime_dir: PathBuf,
    /// Batches each producer keeps until the next stage acknowledges them,
    /// to replay them to a restarted consumer. Older ones are forgotten
    /// (and counted) when it is full.
    pub replay_batches: usize,
    /// How long a client span waits for the server span it belongs to (to
    /// learn the trace id the server request carried).
    #[serde(with = "humantime_serde")]
    pub parent_wait: Duration,
    /// MiB the span-actor keeps for the connections it follows, of each
    /// protocol that keeps state per connection (HTTP/2: open streams with
    /// their headers, HPACK tables, header blocks in progress; databases:
    /// pending calls, statements, buffers), for each protocol's
    /// connections together: each connection is bounded, but a remote
    /// client opens many. Past it the largest connections are forgotten,
    /// what they had open dropped and counted (`h2_state_full`,
    /// `db_unanswered`).
    pub conn_state_mb: usize,
    /// The former name of `conn_state_mb`, from when it bounded HTTP/2's
    /// connections alone: still read (it wins over a default
    /// `conn_state_mb`), with a deprecation warning at start
    /// ([`PipelineSettings::deprecated`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub h2_state_mb: Option<usize>,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            batch_length: 768,
            batch_timeout: Duration::from_millis(200),
            runtime_dir: PathBuf::from("/run/ringtail"),
            replay_batches: 128,
            parent_wait: Duration::from_secs(5),
            conn_state_mb: CONN_STATE_MB,
            h2_state_mb: None,
        }
    }
}

/// `pipeline.conn_state_mb`'s default.
const CONN_STATE_MB: usize = 64;

impl PipelineSettings {
    /// Bytes the span-actor keeps for each protocol's connections together
    /// (`conn_state_mb`, or its former name `h2_state_mb` when that is set).
    pub fn conn_state_bytes(&self) -> usize {
        self.h2_state_mb.unwrap_or(self.conn_state_mb).saturating_mul(1 << 20)
    }

    /// The deprecated keys this configuration sets, each with what to write
    /// instead (the span-actor warns of them at start).
    pub fn deprecated(&self) -> Vec<(&'static str, &'static str)> {
        self.h2_state_mb.map(|_| ("pipeline.h2_state_mb", "pipeline.conn_state_mb")).into_iter().collect()
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let pl = self;
        if !(1..=65536).contains(&pl.batch_length) {
            return Err(invalid("pipeline.batch_length", "must be 1..=65536", "768", pl.batch_length));
        }
        let limits = (Duration::from_millis(1), Duration::from_secs(60));
        duration_between("pipeline.batch_timeout", pl.batch_timeout, limits, "must be between 1ms and 60s", "\"200ms\"")?;
        if !pl.runtime_dir.is_absolute() {
            return Err(invalid("pipeline.runtime_dir", "must be an absolute path", "\"/run/ringtail\"", pl.runtime_dir.display()));
        }
        if pl.runtime_dir.as_os_str().len() > 80 {
            return Err(invalid(
                "pipeline.runtime_dir",
                "must be at most 80 bytes (unix socket paths are short)",
                "\"/run/ringtail\"",
                pl.runtime_dir.display(),
            ));
        }
        if !(1..=100_000).contains(&pl.replay_batches) {
            return Err(invalid("pipeline.replay_batches", "must be 1..=100000", "128", pl.replay_batches));
        }
        if !(1..=4096).contains(&pl.conn_state_mb) {
            return Err(invalid("pipeline.conn_state_mb", "must be 1..=4096", "64", pl.conn_state_mb));
        }
        if let Some(old) = pl.h2_state_mb {
            if !(1..=4096).contains(&old) {
                return Err(invalid("pipeline.h2_state_mb", "must be 1..=4096 (its name is pipeline.conn_state_mb now)", "64", old));
            }
            if pl.conn_state_mb != CONN_STATE_MB && pl.conn_state_mb != old {
                return Err(invalid(
                    "pipeline.h2_state_mb",
                    "is pipeline.conn_state_mb's former name: set only pipeline.conn_state_mb",
                    "64",
                    old,
                ));
            }
        }
        if pl.parent_wait > Duration::from_secs(300) {
            return Err(invalid("pipeline.parent_wait", "must be at most 5m", "\"5s\"", humantime::format_duration(pl.parent_wait)));
        }
        Ok(())
    }
}
