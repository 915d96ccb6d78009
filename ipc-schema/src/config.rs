//! The configuration every ringtail process reads: one TOML file, overridden
//! key by key by `RINGTAIL_<SECTION>__<KEY>` environment variables
//! (e.g. `RINGTAIL_PROBE__WAKEUP_LEN=1`, lists comma-separated:
//! `RINGTAIL_DISCOVERY__OPEN_PORTS=8000,8080`).
//!
//! Unknown keys are errors. Every rule that a value breaks is reported with
//! the key, the rule, an example and the value, before anything starts.
//! Each process reads the whole file and uses its part; the supervisor and
//! `ringtail check-config` validate all of it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "RINGTAIL";

/// `RINGTAIL_…` variables that are not configuration keys.
pub const NOT_CONFIG: &[&str] = &["RINGTAIL_BIN_DIR", "RINGTAIL_READY_FD", "RINGTAIL_VMLINUX_BTF", "RINGTAIL_REQUIRE_ALL", "RINGTAIL_TEST_VENV", "RINGTAIL_TEST_GO"];

/// Keys whose environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &[
    "discovery.open_ports",
    "discovery.exe_names",
    "discovery.pids",
    "routes.patterns",
    "routes.ignored",
];

/// Keys whose values are one of a few words: (key, rule, example).
const ENUM_RULES: &[(&str, &str, &str)] = &[
    ("export.otlp.protocol", "must be grpc or http/protobuf", "\"grpc\""),
    ("routes.unmatched", "must be path, wildcard or heuristic", "\"heuristic\""),
    ("routes.ignore_mode", "must be all, traces or metrics", "\"all\""),
];

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub probe: ProbeSettings,
    pub pipeline: PipelineSettings,
    pub discovery: DiscoverySettings,
    pub routes: RouteSettings,
    pub services: ServiceSettings,
    pub export: ExportSettings,
    pub actors: ActorSettings,
    pub profile: ProfileSettings,
    pub log: LogSettings,
}

/// Kernel side: how events leave the kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeSettings {
    /// Events buffered in the ring before the kernel wakes the loader. A
    /// wakeup costs more than handling an event, so batching them is the
    /// main lever on the agent's CPU cost; 0 = the kernel's default (a
    /// wakeup per event whenever the loader has caught up). Higher values
    /// add latency only up to `flush_interval`.
    pub wakeup_len: u32,
    /// The loader drains the ring at least this often, so that an event
    /// never waits longer than this for `wakeup_len` to fill up.
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
    /// Ring buffer size in MiB (a power of two). Bigger rides out longer
    /// loader stalls before events are lost (and counted); the loader maps
    /// it twice, so it costs twice this in resident memory once used. 4 MiB
    /// holds ~6,000 events: over half a second at 10,000 requests/s.
    pub ring_buffer_mb: u32,
    /// Connections tracked at once (kernel map size). Requests on connections
    /// beyond it are not traced and are counted.
    pub max_connections: u32,
    /// Keep CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH after attaching, to read
    /// the executable path and `OTEL_SERVICE_NAME` of processes owned by
    /// other users. Without them those names fall back to argv[0].
    pub read_process_env: bool,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings {
            wakeup_len: 512,
            flush_interval: Duration::from_millis(100),
            ring_buffer_mb: 4,
            max_connections: 16384,
            read_process_env: true,
        }
    }
}

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
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            batch_length: 512,
            batch_timeout: Duration::from_millis(200),
            runtime_dir: PathBuf::from("/run/ringtail"),
            replay_batches: 256,
            parent_wait: Duration::from_secs(5),
        }
    }
}

/// Which processes are traced. All empty = every process but ringtail's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoverySettings {
    /// Trace processes listening on these TCP ports (and every request
    /// served on them).
    pub open_ports: Vec<u16>,
    /// Trace processes whose executable name matches one of these regexes.
    pub exe_names: Vec<String>,
    /// Trace these process ids (and their children).
    pub pids: Vec<u32>,
}

impl DiscoverySettings {
    /// True when nothing narrows the selection.
    pub fn selects_all(&self) -> bool {
        self.open_ports.is_empty() && self.exe_names.is_empty() && self.pids.is_empty()
    }
}

/// What ignored routes are dropped from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IgnoreMode {
    All,
    Traces,
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
    pub patterns: Vec<String>,
    /// Templates of requests to drop (health checks, metrics scrapes).
    pub ignored: Vec<String>,
    /// What ignored requests are dropped from.
    pub ignore_mode: IgnoreMode,
    /// Naming of paths matching no pattern.
    pub unmatched: UnmatchedRoutes,
    /// Distinct routes per service; past it new routes become one overflow
    /// value, so a scan of random URLs cannot explode metric series.
    pub max_cardinality: usize,
}

impl Default for RouteSettings {
    fn default() -> Self {
        RouteSettings {
            patterns: Vec::new(),
            ignored: Vec::new(),
            ignore_mode: IgnoreMode::All,
            unmatched: UnmatchedRoutes::Heuristic,
            max_cardinality: 500,
        }
    }
}

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
    pub exe_name: Option<String>,
}

/// Service naming: configured rules first, then `OTEL_SERVICE_NAME` from the
/// process environment, then the executable name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceSettings {
    pub rules: Vec<ServiceRule>,
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

impl OtlpProtocol {
    /// The spelling used in config and `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// Retry of failed OTLP exports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    /// First delay after a retryable failure (doubles each time, with jitter).
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Longest delay between attempts (a server's Retry-After may exceed it).
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Give up on a batch after this long; its spans are dropped and counted.
    #[serde(with = "humantime_serde")]
    pub max_elapsed: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(5),
            max_elapsed: Duration::from_secs(60),
        }
    }
}

/// OTLP export (off while `endpoint` is empty and no `OTEL_EXPORTER_OTLP_*`
/// endpoint variable is set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpSettings {
    /// Base endpoint, e.g. `http://127.0.0.1:4317` (gRPC) or
    /// `http://127.0.0.1:4318` (HTTP: `/v1/traces` and `/v1/metrics` are
    /// appended). `https` turns TLS on.
    pub endpoint: String,
    /// Overrides `endpoint` for traces, used as is.
    pub traces_endpoint: String,
    /// Overrides `endpoint` for metrics, used as is.
    pub metrics_endpoint: String,
    pub protocol: OtlpProtocol,
    /// Extra request headers (e.g. authentication).
    pub headers: BTreeMap<String, String>,
    /// Time limit of one export request.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    pub retry: RetrySettings,
    /// Export spans.
    pub traces: bool,
    /// Export the request-duration histograms and ringtail's own metrics.
    pub metrics: bool,
    /// How often metrics are pushed.
    #[serde(with = "humantime_serde")]
    pub metrics_interval: Duration,
}

impl Default for OtlpSettings {
    fn default() -> Self {
        OtlpSettings {
            endpoint: String::new(),
            traces_endpoint: String::new(),
            metrics_endpoint: String::new(),
            protocol: OtlpProtocol::Grpc,
            headers: BTreeMap::new(),
            timeout: Duration::from_secs(10),
            retry: RetrySettings::default(),
            traces: true,
            metrics: true,
            metrics_interval: Duration::from_secs(60),
        }
    }
}

/// Prometheus scrape endpoint (off while `listen` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PrometheusSettings {
    /// Address to serve `/metrics` on, e.g. `127.0.0.1:9400`.
    pub listen: String,
}

/// Where spans and metrics go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportSettings {
    /// Print one line per span on the exporter's standard output.
    pub stdout: bool,
    /// Spans held while the backend is slow or down; beyond it new spans
    /// are dropped and counted.
    pub queue_size: usize,
    pub otlp: OtlpSettings,
    pub prometheus: PrometheusSettings,
}

impl Default for ExportSettings {
    fn default() -> Self {
        ExportSettings {
            stdout: true,
            queue_size: 65536,
            otlp: OtlpSettings::default(),
            prometheus: PrometheusSettings::default(),
        }
    }
}

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

/// CPU profiling endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileSettings {
    /// First of four consecutive loopback ports (probe-loader, span-actor,
    /// exporter-actor, supervisor) serving `/debug/pprof/profile`; 0 = off.
    /// `PROFILE_PORT` in the environment sets it too.
    pub port: u16,
}

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

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration")]
    Load {
        #[source]
        source: config::ConfigError,
    },
    #[error("{key}: {problem}")]
    Schema { key: String, problem: String },
    #[error("{key}: {rule}, e.g. {example} (got {value})")]
    Invalid { key: String, rule: &'static str, example: &'static str, value: String },
}

fn invalid(key: impl Into<String>, rule: &'static str, example: &'static str, value: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid { key: key.into(), rule, example, value: value.to_string() }
}

impl Settings {
    /// `probe.wakeup_len` as the kernel uses it: capped so that what one
    /// wake-up drains fits in half of the loader's replay buffer
    /// (`pipeline.replay_batches` × `pipeline.batch_length` events); with
    /// small batches a bigger burst would fill it before the first ack.
    pub fn effective_wakeup_len(&self) -> u32 {
        let cap = (self.pipeline.batch_length as u64 * self.pipeline.replay_batches as u64 / 2).max(1);
        u64::from(self.probe.wakeup_len).min(cap) as u32
    }

    /// Reads `path` (when given) and the `RINGTAIL_…` environment, then
    /// validates. `PROFILE_PORT` is accepted as an alias of `profile.port`.
    pub fn load(path: Option<&Path>) -> Result<Settings, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    /// [`Settings::load`] with an explicit environment (for tests).
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let mut vars: std::collections::HashMap<String, String> = env
            .into_iter()
            .filter(|(k, _)| (k.starts_with("RINGTAIL_") && !NOT_CONFIG.contains(&k.as_str())) || k == "PROFILE_PORT")
            .collect();
        if let Some(port) = vars.remove("PROFILE_PORT") {
            vars.entry("RINGTAIL_PROFILE__PORT".into()).or_insert(port);
        }
        let mut environment = config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("_")
            .separator("__")
            .list_separator(",")
            .try_parsing(true)
            .source(Some(vars));
        for key in LIST_KEYS {
            environment = environment.with_list_parse_key(key);
        }
        let mut builder = config::Config::builder();
        if let Some(path) = path {
            builder = builder.add_source(config::File::from(path).format(config::FileFormat::Toml).required(true));
        }
        let cfg = builder.add_source(environment).build().map_err(|source| ConfigError::Load { source })?;
        let values = cfg.clone();
        let settings: Settings = serde_path_to_error::deserialize(cfg).map_err(|e| {
            let key = e.path().to_string();
            // Enum keys: say which values are allowed, not serde's wording.
            match ENUM_RULES.iter().find(|(k, _, _)| *k == key) {
                Some((k, rule, example)) => invalid(*k, rule, example, format!("{:?}", values.get_string(k).unwrap_or_default())),
                None => ConfigError::Schema { key, problem: e.into_inner().to_string() },
            }
        })?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks every rule the types cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let p = &self.probe;
        if p.wakeup_len > 1_000_000 {
            return Err(invalid("probe.wakeup_len", "must be 0..=1000000", "512", p.wakeup_len));
        }
        if p.flush_interval < Duration::from_millis(1) || p.flush_interval > Duration::from_secs(10) {
            return Err(invalid("probe.flush_interval", "must be between 1ms and 10s", "\"100ms\"", humantime::format_duration(p.flush_interval)));
        }
        if !p.ring_buffer_mb.is_power_of_two() || p.ring_buffer_mb > 1024 {
            return Err(invalid("probe.ring_buffer_mb", "must be a power of two from 1 to 1024", "16", p.ring_buffer_mb));
        }
        if !(64..=1 << 20).contains(&p.max_connections) {
            return Err(invalid("probe.max_connections", "must be 64..=1048576", "16384", p.max_connections));
        }
        let pl = &self.pipeline;
        if !(1..=65536).contains(&pl.batch_length) {
            return Err(invalid("pipeline.batch_length", "must be 1..=65536", "512", pl.batch_length));
        }
        if pl.batch_timeout < Duration::from_millis(1) || pl.batch_timeout > Duration::from_secs(60) {
            return Err(invalid("pipeline.batch_timeout", "must be between 1ms and 60s", "\"200ms\"", humantime::format_duration(pl.batch_timeout)));
        }
        if !pl.runtime_dir.is_absolute() {
            return Err(invalid("pipeline.runtime_dir", "must be an absolute path", "\"/run/ringtail\"", pl.runtime_dir.display()));
        }
        if pl.runtime_dir.as_os_str().len() > 80 {
            return Err(invalid("pipeline.runtime_dir", "must be at most 80 bytes (unix socket paths are short)", "\"/run/ringtail\"", pl.runtime_dir.display()));
        }
        if !(1..=100_000).contains(&pl.replay_batches) {
            return Err(invalid("pipeline.replay_batches", "must be 1..=100000", "256", pl.replay_batches));
        }
        if pl.parent_wait > Duration::from_secs(300) {
            return Err(invalid("pipeline.parent_wait", "must be at most 5m", "\"5s\"", humantime::format_duration(pl.parent_wait)));
        }
        for (i, port) in self.discovery.open_ports.iter().enumerate() {
            if *port == 0 {
                return Err(invalid(format!("discovery.open_ports[{i}]"), "must be a TCP port 1..=65535", "8080", port));
            }
        }
        for (i, re) in self.discovery.exe_names.iter().enumerate() {
            if regex::Regex::new(re).is_err() {
                return Err(invalid(format!("discovery.exe_names[{i}]"), "must be a valid regular expression", "\"^python3\"", format!("{re:?}")));
            }
        }
        for (i, pid) in self.discovery.pids.iter().enumerate() {
            if *pid == 0 {
                return Err(invalid(format!("discovery.pids[{i}]"), "must be a process id above 0", "1234", pid));
            }
        }
        for (key, list) in [("routes.patterns", &self.routes.patterns), ("routes.ignored", &self.routes.ignored)] {
            for (i, pat) in list.iter().enumerate() {
                if let Err(rule) = check_route_template(pat) {
                    return Err(invalid(format!("{key}[{i}]"), rule, "\"/users/{id}\" or \"/static/*\"", format!("{pat:?}")));
                }
            }
        }
        if !(1..=1_000_000).contains(&self.routes.max_cardinality) {
            return Err(invalid("routes.max_cardinality", "must be 1..=1000000", "500", self.routes.max_cardinality));
        }
        for (i, rule) in self.services.rules.iter().enumerate() {
            if rule.name.trim().is_empty() {
                return Err(invalid(format!("services.rules[{i}].name"), "must not be empty", "\"checkout\"", format!("{:?}", rule.name)));
            }
            if rule.ports.is_empty() && rule.exe_name.is_none() {
                return Err(invalid(format!("services.rules[{i}]"), "needs `ports` or `exe_name`", "{ name = \"web\", ports = [8080] }", &rule.name));
            }
            if let Some(re) = &rule.exe_name {
                if regex::Regex::new(re).is_err() {
                    return Err(invalid(format!("services.rules[{i}].exe_name"), "must be a valid regular expression", "\"^nginx$\"", format!("{re:?}")));
                }
            }
        }
        let e = &self.export;
        if !(1..=10_000_000).contains(&e.queue_size) {
            return Err(invalid("export.queue_size", "must be 1..=10000000", "65536", e.queue_size));
        }
        for (key, url) in [
            ("export.otlp.endpoint", &e.otlp.endpoint),
            ("export.otlp.traces_endpoint", &e.otlp.traces_endpoint),
            ("export.otlp.metrics_endpoint", &e.otlp.metrics_endpoint),
        ] {
            if !url.is_empty() {
                check_endpoint(url).map_err(|rule| invalid(key, rule, "\"http://127.0.0.1:4317\"", format!("{url:?}")))?;
            }
        }
        if e.otlp.timeout < Duration::from_millis(10) || e.otlp.timeout > Duration::from_secs(600) {
            return Err(invalid("export.otlp.timeout", "must be between 10ms and 10m", "\"10s\"", humantime::format_duration(e.otlp.timeout)));
        }
        let r = &e.otlp.retry;
        if r.initial_backoff.is_zero() || r.initial_backoff > r.max_backoff {
            return Err(invalid("export.otlp.retry.initial_backoff", "must be above 0 and at most max_backoff", "\"500ms\"", humantime::format_duration(r.initial_backoff)));
        }
        if r.max_elapsed < e.otlp.timeout {
            return Err(invalid("export.otlp.retry.max_elapsed", "must be at least export.otlp.timeout", "\"60s\"", humantime::format_duration(r.max_elapsed)));
        }
        if e.otlp.metrics_interval < Duration::from_millis(100) {
            return Err(invalid("export.otlp.metrics_interval", "must be at least 100ms", "\"60s\"", humantime::format_duration(e.otlp.metrics_interval)));
        }
        for name in e.otlp.headers.keys() {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)) {
                return Err(invalid("export.otlp.headers", "header names are letters, digits, '-' and '_'", "{ authorization = \"Bearer x\" }", format!("{name:?}")));
            }
        }
        if !e.prometheus.listen.is_empty() && e.prometheus.listen.parse::<SocketAddr>().is_err() {
            return Err(invalid("export.prometheus.listen", "must be an IP address and port", "\"127.0.0.1:9400\"", format!("{:?}", e.prometheus.listen)));
        }
        if self.actors.user.is_empty() || self.actors.user == "root" || self.actors.user == "0" {
            return Err(invalid("actors.user", "must name an unprivileged user", "\"nobody\"", format!("{:?}", self.actors.user)));
        }
        if self.profile.port != 0 && !(1024..=65532).contains(&self.profile.port) {
            return Err(invalid("profile.port", "must be 0 (off) or 1024..=65532 (four consecutive ports)", "6060", self.profile.port));
        }
        if self.log.level.trim().is_empty() {
            return Err(invalid("log.level", "must be a tracing filter", "\"info\"", "\"\""));
        }
        Ok(())
    }

    /// The configuration as TOML (what `ringtail check-config` prints).
    pub fn to_toml(&self) -> String {
        // Every field is a plain TOML value: this cannot fail.
        toml::to_string(self).expect("settings serialize to TOML")
    }
}

fn check_endpoint(url: &str) -> Result<(), &'static str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    let authority = rest.split('/').next().unwrap_or("");
    let (host, port) = authority.rsplit_once(':').ok_or("must name a port (host:port)")?;
    if host.is_empty() {
        return Err("must name a host");
    }
    port.parse::<u16>().map_err(|_| "port must be a number 1..=65535")?;
    Ok(())
}

/// A route template: starts with `/`; segments are literals, `{name}`
/// placeholders, or a final `*`.
pub fn check_route_template(t: &str) -> Result<(), &'static str> {
    if !t.starts_with('/') {
        return Err("must start with '/'");
    }
    let segs: Vec<&str> = t[1..].split('/').collect();
    for (i, s) in segs.iter().enumerate() {
        if *s == "*" && i + 1 != segs.len() {
            return Err("'*' may only be the last segment");
        }
        if s.starts_with('{') != s.ends_with('}') {
            return Err("placeholders are whole segments like {id}");
        }
        if s.starts_with('{') && (s.len() < 3 || s[1..s.len() - 1].contains(['{', '}', '/'])) {
            return Err("placeholders need a name, like {id}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> tempfile_lite::TempFile {
        tempfile_lite::TempFile::with(text)
    }

    /// A tiny temp-file helper (no extra dependency).
    mod tempfile_lite {
        use std::path::PathBuf;
        pub struct TempFile(pub PathBuf);
        impl TempFile {
            pub fn with(text: &str) -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "ringtail-cfg-{}-{}.toml",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                let mut f = std::fs::File::create(&p).unwrap();
                super::Write::write_all(&mut f, text.as_bytes()).unwrap();
                TempFile(p)
            }
        }
        impl Drop for TempFile {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let f = file(text);
        Settings::load_with_env(Some(&f.0), env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn empty_file_gives_documented_defaults() {
        let s = load("", &[]).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.probe.wakeup_len, 512);
        assert_eq!(s.effective_wakeup_len(), 512);
        let mut small = s.clone();
        small.pipeline.batch_length = 1;
        assert_eq!(small.effective_wakeup_len(), 128, "half of 256 one-event batches");
        small.probe.wakeup_len = 0;
        assert_eq!(small.effective_wakeup_len(), 0, "the kernel's default stays");
        assert_eq!(s.probe.ring_buffer_mb, 4);
        assert_eq!(s.pipeline.batch_length, 512);
        assert!(s.export.stdout);
        assert!(s.discovery.selects_all());
    }

    #[test]
    fn file_values_and_env_overrides() {
        let s = load(
            "[probe]\nwakeup_len = 4\nflush_interval = \"20ms\"\n[discovery]\nopen_ports = [8000]\n[export.otlp]\nendpoint = \"http://127.0.0.1:4317\"\nheaders = { authorization = \"x\" }\n",
            &[
                ("RINGTAIL_PROBE__WAKEUP_LEN", "1"),
                ("RINGTAIL_DISCOVERY__OPEN_PORTS", "8080,9090"),
                ("PROFILE_PORT", "6060"),
                ("RINGTAIL_READY_FD", "3"),
                ("RINGTAIL_BIN_DIR", "/x"),
            ],
        )
        .unwrap();
        assert_eq!(s.probe.wakeup_len, 1);
        assert_eq!(s.probe.flush_interval, Duration::from_millis(20));
        assert_eq!(s.discovery.open_ports, vec![8080, 9090]);
        assert_eq!(s.export.otlp.endpoint, "http://127.0.0.1:4317");
        assert_eq!(s.export.otlp.headers.get("authorization").map(String::as_str), Some("x"));
        assert_eq!(s.profile.port, 6060);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = load("[probe]\nwakeup_lenn = 4\n", &[]).unwrap_err().to_string();
        assert!(err.contains("wakeup_lenn"), "{err}");
        let err = load("[probez]\n", &[]).unwrap_err().to_string();
        assert!(err.contains("probez"), "{err}");
        let err = load("", &[("RINGTAIL_EXPORT__NOPE", "1")]).unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn bad_values_name_key_rule_and_value() {
        let cases: &[(&str, &str, &str)] = &[
            ("[export.otlp]\nprotocol = \"htp\"\n", "export.otlp.protocol", "htp"),
            ("[export.otlp]\nendpoint = \"localhost:4317\"\n", "export.otlp.endpoint", "localhost:4317"),
            ("[probe]\nring_buffer_mb = 3\n", "probe.ring_buffer_mb", "3"),
            ("[probe]\nflush_interval = \"0s\"\n", "probe.flush_interval", "0s"),
            ("[pipeline]\nbatch_length = 0\n", "pipeline.batch_length", "0"),
            ("[discovery]\nexe_names = [\"(\"]\n", "discovery.exe_names[0]", "("),
            ("[routes]\npatterns = [\"users/{id}\"]\n", "routes.patterns[0]", "users/{id}"),
            ("[routes]\nunmatched = \"guess\"\n", "routes.unmatched", "guess"),
            ("[export.prometheus]\nlisten = \"9400\"\n", "export.prometheus.listen", "9400"),
            ("[actors]\nuser = \"root\"\n", "actors.user", "root"),
            ("[probe]\nwakeup_len = \"many\"\n", "probe.wakeup_len", "many"),
        ];
        for (text, key, value) in cases {
            let err = load(text, &[]).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
            assert!(err.contains(value), "{text}: {err}");
        }
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = Settings::load_with_env(Some(Path::new("/nonexistent/ringtail.toml")), Vec::new()).unwrap_err();
        assert!(matches!(err, ConfigError::Load { .. }));
    }

    #[test]
    fn effective_config_round_trips_through_toml() {
        let s = load("[discovery]\nopen_ports = [1, 2]\n[services]\nrules = [{ name = \"web\", ports = [80] }]\n", &[]).unwrap();
        let again = load(&s.to_toml(), &[]).unwrap();
        assert_eq!(s, again);
    }

    #[test]
    fn route_templates() {
        for ok in ["/", "/users/{id}", "/static/*", "/a/{b}/c"] {
            assert!(check_route_template(ok).is_ok(), "{ok}");
        }
        for bad in ["users", "/a/*/b", "/a/{b", "/a/{}"] {
            assert!(check_route_template(bad).is_err(), "{bad}");
        }
    }
}
