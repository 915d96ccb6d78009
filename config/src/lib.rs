//! The configuration every ringtail process reads: one TOML file, overridden
//! key by key by `RINGTAIL_<SECTION>__<KEY>` environment variables
//! (e.g. `RINGTAIL_PROBE__WAKEUP_LEN=1`, lists comma-separated:
//! `RINGTAIL_DISCOVERY__OPEN_PORTS=8000,8080`).
//!
//! Unknown keys are errors. Every rule that a value breaks is reported with
//! the key, the rule, an example and the value, before anything starts.
//! Values are parsed once, here, into types ([`ExeRegex`], [`RouteTemplate`],
//! [`OtlpEndpoint`], [`Port`], [`HeaderName`], [`ListenAddr`]): the processes
//! take the types and never check or compile them again. Each process reads
//! the whole file and uses its part; the supervisor and `ringtail
//! check-config` validate all of it.
//!
//! # Layout
//! One module per section, each with its struct, defaults, a doc comment on
//! every field, and its rules:
//! [`probe`], [`pipeline`], [`discovery`], [`routes`], [`services`],
//! [`redaction`], [`export`], [`metrics`], [`actors`], [`profile`], [`log`],
//! [`tls`], [`kubernetes`].
//! - [`obi`]: the `OTEL_EBPF_*` (and Beyla's `BEYLA_*`) environment
//!   variables that name a setting ringtail has too, mapped onto its keys
//!   (one table), and those that have no equivalent.
//! - [`types`]: the parsed value types and their rules.
//! - this file: [`Settings`] (the whole file), loading with the
//!   environment, and [`ConfigError`].

pub mod actors;
pub mod discovery;
pub mod export;
pub mod kubernetes;
pub mod log;
pub mod metrics;
pub mod obi;
pub mod pipeline;
pub mod probe;
pub mod profile;
pub mod redaction;
pub mod routes;
pub mod services;
pub mod tls;
pub mod types;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use actors::ActorSettings;
pub use discovery::DiscoverySettings;
pub use export::{ExportSettings, OtlpProtocol, OtlpSettings, PrometheusSettings, RetrySettings};
pub use kubernetes::KubernetesSettings;
pub use log::LogSettings;
pub use metrics::MetricsSettings;
pub use pipeline::PipelineSettings;
pub use probe::{Backend, ProbeSettings};
pub use profile::ProfileSettings;
pub use redaction::RedactionSettings;
pub use routes::{IgnoreMode, RouteSettings, UnmatchedRoutes};
pub use services::{ServiceRule, ServiceSettings};
pub use tls::TlsSettings;
pub use types::{redact_userinfo, ExeRegex, HeaderName, ListenAddr, OtlpEndpoint, Port, QueryKey, Rejected, RouteTemplate};

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "RINGTAIL";

/// `RINGTAIL_…` variables that are not configuration keys.
pub const NOT_CONFIG: &[&str] = &[
    "RINGTAIL_BIN_DIR",
    "RINGTAIL_READY_FD",
    "RINGTAIL_VMLINUX_BTF",
    "RINGTAIL_REQUIRE_ALL",
    "RINGTAIL_TEST_VENV",
    "RINGTAIL_TEST_GO",
    "RINGTAIL_TEST_TIME_SCALE",
];

/// Keys whose environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &[
    "discovery.open_ports",
    "probe.stream_ports",
    "probe.db_ports",
    "discovery.exe_names",
    "discovery.pids",
    "discovery.k8s_namespaces",
    "discovery.k8s_pod_labels",
    "discovery.k8s_owners",
    "discovery.k8s_containers",
    "discovery.k8s_exclude_namespaces",
    "discovery.k8s_exclude_pod_labels",
    "routes.patterns",
    "routes.ignored",
    "redaction.query_keys",
    "tls.libraries",
];

/// Keys whose values are one of a few words: (key, rule, example).
const ENUM_RULES: &[(&str, &str, &str)] = &[
    ("export.otlp.protocol", "must be grpc or http/protobuf", "\"grpc\""),
    ("routes.unmatched", "must be path, wildcard or heuristic", "\"heuristic\""),
    ("routes.ignore_mode", "must be all, traces or metrics", "\"all\""),
    ("probe.backend", "must be auto, socket or syscalls", "\"auto\""),
    ("probe.propagate_keep_alive", "must be auto, always or never", "\"auto\""),
    ("kubernetes.enabled", "must be auto, true or false", "\"auto\""),
];

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// How events leave the kernel.
    pub probe: ProbeSettings,
    /// How batches travel between the processes.
    pub pipeline: PipelineSettings,
    /// Which processes are traced.
    pub discovery: DiscoverySettings,
    /// `http.route` naming.
    pub routes: RouteSettings,
    /// `service.name` rules.
    pub services: ServiceSettings,
    /// What of a request's URL is never exported.
    pub redaction: RedactionSettings,
    /// Where spans and metrics go.
    pub export: ExportSettings,
    /// Which metrics are derived from spans (service graph, span metrics).
    pub metrics: MetricsSettings,
    /// How the unprivileged actors run.
    pub actors: ActorSettings,
    /// CPU profiling endpoints.
    pub profile: ProfileSettings,
    /// Logging.
    pub log: LogSettings,
    /// TLS (HTTPS) capture.
    pub tls: TlsSettings,
    /// Kubernetes metadata (the k8s-actor).
    pub kubernetes: KubernetesSettings,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `source`'s text may quote the file (a TOML syntax error shows its
    /// line): see [`ConfigError::load`].
    #[error("cannot read configuration")]
    Load {
        #[source]
        source: LoadError,
    },
    /// `problem` has URLs' user information redacted.
    #[error("{key}: {problem}")]
    Schema { key: String, problem: String },
    #[error("{key}: {rule}, e.g. {example} (got {value})")]
    Invalid { key: String, rule: &'static str, example: &'static str, value: String },
    /// Two environment variables set one key to different values (an
    /// OBI or Beyla name and ringtail's, or two of theirs: [`obi`]).
    #[error("{first} and {second} both set {key}, to different values ({values}): set one")]
    Conflict { first: String, second: String, key: String, values: String },
}

/// Why the file or the environment could not be read, as `config` said,
/// with the user information of any URL it quotes redacted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(String);

impl ConfigError {
    /// A file or environment that could not be read.
    fn load(e: config::ConfigError) -> ConfigError {
        ConfigError::Load { source: LoadError(types::redact_userinfo(&e.to_string()).into_owned()) }
    }

    /// A value of `key` that a typed parse refused.
    pub fn rejected(key: impl Into<String>, r: Rejected) -> ConfigError {
        ConfigError::Invalid { key: key.into(), rule: r.rule, example: r.example, value: r.value }
    }
}

pub(crate) fn invalid(key: impl Into<String>, rule: &'static str, example: &'static str, value: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid { key: key.into(), rule, example, value: value.to_string() }
}

/// A duration within `lo..=hi`, or the error naming `key` with the value.
pub(crate) fn duration_between(
    key: &str,
    value: std::time::Duration,
    (lo, hi): (std::time::Duration, std::time::Duration),
    rule: &'static str,
    example: &'static str,
) -> Result<(), ConfigError> {
    if value < lo || value > hi {
        return Err(invalid(key, rule, example, humantime::format_duration(value)));
    }
    Ok(())
}

/// The key a typed value's error is reported under, and the example
/// given there (as the rules were written before the types existed).
fn rejected_at(path: &str, r: Rejected) -> ConfigError {
    if path.starts_with("export.otlp.headers") {
        return ConfigError::rejected("export.otlp.headers", r);
    }
    if path.ends_with(".exe_name") && path.starts_with("services.") {
        return ConfigError::rejected(path, Rejected { example: "\"^nginx$\"", ..r });
    }
    ConfigError::rejected(path, r)
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
    /// validates. `PROFILE_PORT` is accepted as an alias of `profile.port`,
    /// and OBI's and Beyla's names of the settings ringtail shares with them
    /// as their keys' ([`obi`]).
    pub fn load(path: Option<&Path>) -> Result<Settings, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    /// [`Settings::load`] with an explicit environment (for tests).
    pub fn load_with_env(path: Option<&Path>, env: impl IntoIterator<Item = (String, String)>) -> Result<Settings, ConfigError> {
        let env: std::collections::BTreeMap<String, String> = env.into_iter().collect();
        let theirs = obi::overlay(&env)?;
        let mut vars: std::collections::HashMap<String, String> = env
            .into_iter()
            .filter(|(k, _)| (k.starts_with("RINGTAIL_") && !NOT_CONFIG.contains(&k.as_str())) || k == "PROFILE_PORT")
            .collect();
        if let Some(port) = vars.remove("PROFILE_PORT") {
            vars.entry("RINGTAIL_PROFILE__PORT".into()).or_insert(port);
        }
        // (equal to any RINGTAIL_ variable of the same key: obi::overlay checked)
        vars.extend(theirs);
        // List keys are set as lists here: the environment source parses a
        // lone number ("8080") as one before it splits lists, and a list
        // key then refused a one-item list.
        let mut lists = Vec::new();
        for key in LIST_KEYS {
            if let Some(v) = vars.remove(&obi::env_name(key)) {
                lists.push((*key, v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect::<Vec<String>>()));
            }
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
        let mut builder = builder.add_source(environment);
        for (key, list) in lists {
            builder = builder.set_override(key, list).map_err(ConfigError::load)?;
        }
        let cfg = builder.build().map_err(ConfigError::load)?;
        Self::from_config(cfg)
    }

    /// Typed settings out of merged sources, then validated.
    fn from_config(cfg: config::Config) -> Result<Settings, ConfigError> {
        let values = cfg.clone();
        types::take_rejected();
        let settings: Settings = serde_path_to_error::deserialize(cfg).map_err(|e| {
            let key = e.path().to_string();
            // A typed value refused: its rule, example and value.
            if let Some(r) = types::take_rejected() {
                return rejected_at(&key, r);
            }
            // Enum keys: say which values are allowed, not serde's wording.
            match ENUM_RULES.iter().find(|(k, _, _)| *k == key) {
                Some((k, rule, example)) => invalid(*k, rule, example, format!("{:?}", values.get_string(k).unwrap_or_default())),
                None => ConfigError::Schema { key, problem: types::redact_userinfo(&e.into_inner().to_string()).into_owned() },
            }
        })?;
        settings.validate()?;
        Ok(settings)
    }

    /// Parses configuration text (TOML) alone, without the environment,
    /// with every rule [`Settings::load`] applies.
    pub fn from_toml(text: &str) -> Result<Settings, ConfigError> {
        let cfg = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .map_err(ConfigError::load)?;
        Self::from_config(cfg)
    }

    /// Checks every rule the types cannot express, section by section.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.probe.validate()?;
        self.pipeline.validate()?;
        self.discovery.validate()?;
        self.routes.validate()?;
        self.services.validate()?;
        self.redaction.validate()?;
        self.export.validate()?;
        self.metrics.validate()?;
        self.actors.validate()?;
        self.profile.validate()?;
        self.tls.validate()?;
        self.kubernetes.validate()?;
        self.log.validate()
    }

    /// The configuration without its secrets (`export.otlp.headers`, the
    /// user information of the OTLP endpoints): what the components that
    /// do not export get from the supervisor.
    pub fn without_secrets(&self) -> Settings {
        let mut s = self.redacted();
        s.export.otlp.headers.clear();
        s
    }

    /// The configuration as it may be shown (`ringtail check-config`):
    /// header values and the OTLP endpoints' user information replaced by
    /// `REDACTED`, header names kept.
    pub fn redacted(&self) -> Settings {
        let mut s = self.clone();
        let otlp = &mut s.export.otlp;
        for v in otlp.headers.values_mut() {
            *v = "REDACTED".to_owned();
        }
        for e in [&mut otlp.endpoint, &mut otlp.traces_endpoint, &mut otlp.metrics_endpoint].into_iter().flatten() {
            *e = e.redacted();
        }
        s
    }

    /// The configuration as TOML (what `ringtail check-config` prints).
    pub fn to_toml(&self) -> String {
        // Every field is a plain TOML value: this cannot fail.
        toml::to_string(self).expect("settings serialize to TOML")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

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
                let p =
                    std::env::temp_dir().join(format!("ringtail-cfg-{}-{}.toml", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
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
        assert_eq!(s.probe.wakeup_len, 768);
        assert_eq!(s.effective_wakeup_len(), 768);
        let mut small = s.clone();
        small.pipeline.batch_length = 1;
        assert_eq!(small.effective_wakeup_len(), 64, "half of 128 one-event batches");
        small.probe.wakeup_len = 0;
        assert_eq!(small.effective_wakeup_len(), 0, "the kernel's default stays");
        assert_eq!(s.probe.ring_buffer_mb, 4);
        assert_eq!(s.pipeline.batch_length, 768);
        assert_eq!(s.pipeline.replay_batches, 128);
        assert!(s.export.stdout);
        assert!(s.discovery.selects_all());
    }

    /// `probe.db_ports`, `probe.stream_ports`' former name, is still read
    /// (from the file or the environment) and listed as deprecated; set
    /// beside a different `stream_ports` it is refused. The default list
    /// holds the databases' and the brokers' ports.
    #[test]
    fn the_former_name_of_stream_ports_still_works_deprecated() {
        let d = Settings::default();
        assert_eq!((d.probe.stream_ports(), d.probe.deprecated()), (&[5432, 3306, 6379, 11211, 9092, 5672, 4222, 1883][..], vec![]));
        let s = load("[probe]\nstream_ports = [9092]\n", &[]).unwrap();
        assert_eq!((s.probe.stream_ports(), s.probe.deprecated()), (&[9092][..], vec![]));
        let old = load("[probe]\ndb_ports = [5433]\n", &[]).unwrap();
        assert_eq!(old.probe.stream_ports(), [5433]);
        assert_eq!(old.probe.deprecated(), [("probe.db_ports", "probe.stream_ports")]);
        let env = load("", &[("RINGTAIL_PROBE__DB_PORTS", "6380,6381")]).unwrap();
        assert_eq!(env.probe.stream_ports(), [6380, 6381]);
        let env = load("", &[("RINGTAIL_PROBE__STREAM_PORTS", "4223")]).unwrap();
        assert_eq!(env.probe.stream_ports(), [4223]);
        let none = load("[probe]\nstream_ports = []\n", &[]).unwrap();
        assert!(none.probe.stream_ports().is_empty());
        // the same value under both names is one setting
        let both = load("[probe]\ndb_ports = [1]\nstream_ports = [1]\n", &[]).unwrap();
        assert_eq!(both.probe.stream_ports(), [1]);
        let err = load("[probe]\ndb_ports = [1]\nstream_ports = [2]\n", &[]).unwrap_err().to_string();
        assert!(err.contains("probe.db_ports") && err.contains("stream_ports"), "{err}");
        for bad in ["db_ports = [0]", "stream_ports = [0]", "stream_ports = [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]"] {
            let err = load(&format!("[probe]\n{bad}\n"), &[]).unwrap_err().to_string();
            assert!(err.contains(bad.split(' ').next().unwrap()) && err.contains("at most 16"), "{err}");
        }
        // written back under the name it was given
        let again = Settings::from_toml(&old.to_toml()).unwrap();
        assert_eq!(again.probe.deprecated(), [("probe.db_ports", "probe.stream_ports")]);
        assert_eq!(again.probe.stream_ports(), [5433]);
    }

    /// `pipeline.h2_state_mb`, `pipeline.conn_state_mb`'s former name, is
    /// still read (from the file or the environment) and listed as
    /// deprecated; set beside a different `conn_state_mb` it is refused.
    #[test]
    fn the_former_name_of_conn_state_mb_still_works_deprecated() {
        let s = load("[pipeline]\nconn_state_mb = 32\n", &[]).unwrap();
        assert_eq!((s.pipeline.conn_state_bytes(), s.pipeline.deprecated()), (32 << 20, vec![]));
        assert_eq!(Settings::default().pipeline.conn_state_bytes(), 64 << 20);
        let old = load("[pipeline]\nh2_state_mb = 8\n", &[]).unwrap();
        assert_eq!(old.pipeline.conn_state_bytes(), 8 << 20);
        assert_eq!(old.pipeline.deprecated(), [("pipeline.h2_state_mb", "pipeline.conn_state_mb")]);
        let env = load("", &[("RINGTAIL_PIPELINE__H2_STATE_MB", "16")]).unwrap();
        assert_eq!(env.pipeline.conn_state_bytes(), 16 << 20);
        // the same value under both names is one setting
        let both = load("[pipeline]\nh2_state_mb = 8\nconn_state_mb = 8\n", &[]).unwrap();
        assert_eq!(both.pipeline.conn_state_bytes(), 8 << 20);
        let err = load("[pipeline]\nh2_state_mb = 8\nconn_state_mb = 16\n", &[]).unwrap_err().to_string();
        assert!(err.contains("pipeline.h2_state_mb") && err.contains("conn_state_mb"), "{err}");
        let err = load("[pipeline]\nh2_state_mb = 0\n", &[]).unwrap_err().to_string();
        assert!(err.contains("pipeline.h2_state_mb"), "{err}");
        // written back (check-config, the supervisor's copy) under the name it was given
        let again = Settings::from_toml(&old.to_toml()).unwrap();
        assert_eq!(again.pipeline.conn_state_bytes(), 8 << 20);
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
        assert_eq!(s.discovery.open_ports.iter().map(|p| p.get()).collect::<Vec<_>>(), vec![8080, 9090]);
        assert_eq!(s.export.otlp.endpoint.as_ref().map(|e| e.as_str()), Some("http://127.0.0.1:4317"));
        assert_eq!(s.export.otlp.headers.get(&"authorization".parse().unwrap()).map(String::as_str), Some("x"));
        assert_eq!(s.profile.port, 6060);
    }

    /// A one-item list from the environment is a list (the environment
    /// source read `8080` as a number, and the list key refused it).
    #[test]
    fn a_one_item_list_from_the_environment_is_a_list() {
        let s =
            load("[discovery]\nopen_ports = [1, 2]\n", &[("RINGTAIL_DISCOVERY__OPEN_PORTS", "8080"), ("RINGTAIL_DISCOVERY__PIDS", "12")])
                .unwrap();
        assert_eq!(s.discovery.open_ports.iter().map(|p| p.get()).collect::<Vec<_>>(), [8080]);
        assert_eq!(s.discovery.pids, [12]);
        let s = load("[discovery]\nopen_ports = [1, 2]\n", &[("RINGTAIL_DISCOVERY__OPEN_PORTS", "")]).unwrap();
        assert!(s.discovery.open_ports.is_empty(), "an empty variable clears the list");
        let err = load("", &[("RINGTAIL_DISCOVERY__OPEN_PORTS", "80,http")]).unwrap_err().to_string();
        assert!(err.contains("discovery.open_ports"), "{err}");
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
            ("[probe]\npin_dir = \"ringtail\"\n", "probe.pin_dir", "ringtail"),
            ("[pipeline]\nbatch_length = 0\n", "pipeline.batch_length", "0"),
            ("[discovery]\nexe_names = [\"(\"]\n", "discovery.exe_names[0]", "("),
            ("[routes]\npatterns = [\"users/{id}\"]\n", "routes.patterns[0]", "users/{id}"),
            ("[routes]\nunmatched = \"guess\"\n", "routes.unmatched", "guess"),
            ("[export.prometheus]\nlisten = \"9400\"\n", "export.prometheus.listen", "9400"),
            ("[actors]\nuser = \"root\"\n", "actors.user", "root"),
            ("[probe]\nwakeup_len = \"many\"\n", "probe.wakeup_len", "many"),
            ("[redaction]\nquery_keys = [\"a=b\"]\n", "redaction.query_keys[0]", "a=b"),
            ("[redaction]\nquery_keys = [\"\"]\n", "redaction.query_keys[0]", "\"\""),
            ("[probe]\nbackend = \"kprobes\"\n", "probe.backend", "kprobes"),
            ("[probe]\npropagate_keep_alive = \"sometimes\"\n", "probe.propagate_keep_alive", "sometimes"),
        ];
        for (text, key, value) in cases {
            let err = load(text, &[]).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
            assert!(err.contains(value), "{text}: {err}");
        }
    }

    #[test]
    fn typed_values_are_reported_as_the_rules_were() {
        let cases: &[(&str, &str)] = &[
            (
                "[discovery]\nexe_names = [\"(\"]\n",
                "discovery.exe_names[0]: must be a valid regular expression, e.g. \"^python3\" (got \"(\")",
            ),
            ("[discovery]\nopen_ports = [80, 0]\n", "discovery.open_ports[1]: must be a TCP port 1..=65535, e.g. 8080 (got 0)"),
            (
                "[routes]\nignored = [\"/a/*/b\"]\n",
                "routes.ignored[0]: '*' may only be the last segment, e.g. \"/users/{id}\" or \"/static/*\" (got \"/a/*/b\")",
            ),
            (
                "[services]\nrules = [{ name = \"x\", exe_name = \"[\" }]\n",
                "services.rules[0].exe_name: must be a valid regular expression, e.g. \"^nginx$\" (got \"[\")",
            ),
            (
                "[export.otlp]\nmetrics_endpoint = \"http://c\"\n",
                "export.otlp.metrics_endpoint: must name a port (host:port), e.g. \"http://127.0.0.1:4317\" (got \"http://c\")",
            ),
            (
                "[export.otlp]\nheaders = { \"a b\" = \"x\" }\n",
                "export.otlp.headers: header names are letters, digits, '-' and '_', e.g. { authorization = \"Bearer x\" } (got \"a b\")",
            ),
            (
                "[export.prometheus]\nlisten = \"9400\"\n",
                "export.prometheus.listen: must be an IP address and port, e.g. \"127.0.0.1:9400\" (got \"9400\")",
            ),
        ];
        for (text, want) in cases {
            let err = load(text, &[]).unwrap_err();
            assert!(matches!(err, ConfigError::Invalid { .. }), "{text}: {err:?}");
            assert_eq!(err.to_string(), *want, "{text}");
        }
        let s = load("[export.otlp]\nendpoint = \"\"\n[export.prometheus]\nlisten = \"127.0.0.1:9400\"\n", &[]).unwrap();
        assert_eq!(s.export.otlp.endpoint, None, "empty is off");
        assert_eq!(s.export.prometheus.listen.map(|l| l.get().port()), Some(9400));
    }

    #[test]
    fn prometheus_listens_on_loopback_unless_remote_is_allowed() {
        for local in ["127.0.0.1:9400", "127.0.0.2:9400", "[::1]:9400"] {
            assert!(load(&format!("[export.prometheus]\nlisten = \"{local}\"\n"), &[]).is_ok(), "{local}");
        }
        for remote in ["0.0.0.0:9400", "[::]:9400", "192.0.2.7:9400"] {
            let err = load(&format!("[export.prometheus]\nlisten = \"{remote}\"\n"), &[]).unwrap_err().to_string();
            assert!(
                err.contains("export.prometheus.listen: must be a loopback address")
                    && err.contains("export.prometheus.allow_remote = true")
                    && err.contains(remote),
                "{remote}: {err}"
            );
            let s = load(&format!("[export.prometheus]\nlisten = \"{remote}\"\nallow_remote = true\n"), &[]).unwrap();
            assert!(s.export.prometheus.allow_remote);
        }
        let err = load("", &[("RINGTAIL_EXPORT__PROMETHEUS__LISTEN", "0.0.0.0:9400")]).unwrap_err().to_string();
        assert!(err.contains("loopback"), "the environment is held to the same rule: {err}");
    }

    #[test]
    fn redaction_keys_from_file_and_env() {
        let s = load("[redaction]\nquery_keys = [\"Token\"]\ndrop_query = true\n", &[]).unwrap();
        assert_eq!(s.redaction.query_keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(), ["token"], "kept lowercase");
        assert!(s.redaction.drop_query);
        let s = load("", &[("RINGTAIL_REDACTION__QUERY_KEYS", "api_key,Password")]).unwrap();
        assert_eq!(s.redaction.query_keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(), ["api_key", "password"]);
        assert!(!s.redaction.drop_query, "off by default");
        let many = format!("[redaction]\nquery_keys = [{}]\n", (0..257).map(|i| format!("\"k{i}\"")).collect::<Vec<_>>().join(","));
        let err = load(&many, &[]).unwrap_err().to_string();
        assert!(err.contains("redaction.query_keys") && err.contains("257"), "{err}");
    }

    #[test]
    fn text_parses_like_a_file() {
        let text = "[routes]\npatterns = [\"/users/{id}\"]\n[redaction]\nquery_keys = [\"t\"]\n";
        assert_eq!(Settings::from_toml(text).unwrap(), load(text, &[]).unwrap());
        let err = Settings::from_toml("[probe]\nring_buffer_mb = 3\n").unwrap_err().to_string();
        assert!(err.contains("probe.ring_buffer_mb"), "{err}");
        assert!(Settings::from_toml("[[[").is_err());
    }

    #[test]
    fn without_secrets_drops_the_headers_only() {
        let s =
            load("[export.otlp]\nendpoint = \"http://127.0.0.1:4318\"\nheaders = { authorization = \"Bearer s3cr3t\" }\n", &[]).unwrap();
        assert!(s.to_toml().contains("s3cr3t"));
        let lean = s.without_secrets();
        assert!(!lean.to_toml().contains("s3cr3t"), "{}", lean.to_toml());
        assert!(lean.export.otlp.headers.is_empty());
        let mut back = lean.clone();
        back.export.otlp.headers = s.export.otlp.headers.clone();
        assert_eq!(back, s, "nothing else changes");
    }

    #[test]
    fn an_endpoints_user_information_is_never_shown_nor_handed_to_the_others() {
        let text = "[export.otlp]\nendpoint = \"https://user:pa55word@collector:4318\"\nheaders = { authorization = \"Bearer s3cr3t\" }\n";
        let s = load(text, &[]).unwrap();
        assert!(s.to_toml().contains("user:pa55word@"), "the exporter's copy keeps it: {}", s.to_toml());
        let shown = s.redacted().to_toml();
        assert!(!shown.contains("pa55word") && !shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("https://REDACTED@collector:4318") && shown.contains("authorization = \"REDACTED\""), "{shown}");
        assert!(!s.without_secrets().to_toml().contains("pa55word"));
        assert!(!format!("{s:?}").contains("pa55word"), "Debug shows no user information");
        // Refused values, from the file or the environment, and the
        // parse errors of a broken file.
        for (text, env) in [
            ("[export.otlp]\nendpoint = \"https://user:pa55word@collector\"\n", vec![]),
            ("", vec![("RINGTAIL_EXPORT__OTLP__ENDPOINT", "ftp://user:pa55word@c:1")]),
            ("[export.otlp]\nendpoint = \"https://user:pa55word@c:1\"\nendpoint = 2\n", vec![]),
            ("[export.otlp]\nendpoint = [\"https://user:pa55word@c:1\"]\n", vec![]),
        ] {
            let err = load(text, &env).unwrap_err();
            let chain = format!("{err} / {:?}", std::error::Error::source(&err).map(ToString::to_string));
            assert!(!chain.contains("pa55word"), "{chain}");
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

    /// LIST_KEYS and ENUM_RULES are written by hand (the `config` crate
    /// needs them by name): they must name exactly the keys whose type is a
    /// list of values, and exactly those whose type is an enum, as the
    /// types themselves say (their serialized shape, traced).
    #[test]
    fn list_and_enum_key_tables_match_the_types() {
        use serde_reflection::{ContainerFormat, Format, Named, Registry, Samples, Tracer, TracerConfig};
        // A sequence of tables shows as one only with an element.
        let sample = Settings {
            services: toml::from_str("rules = [{ name = \"a\", ports = [1] }]").expect("a services section"),
            // a deprecated name shows only when set
            probe: probe::ProbeSettings { db_ports: Some(vec![1]), ..Default::default() },
            ..Settings::default()
        };
        let mut tracer = Tracer::new(TracerConfig::default());
        let mut samples = Samples::new();
        let (root, _) = tracer.trace_value(&mut samples, &sample).expect("trace the settings");
        // (unchecked: an empty list of the defaults has an unknown element type)
        let registry: Registry = tracer.registry_unchecked();
        fn fields<'a>(f: &'a Format, registry: &'a Registry) -> Option<&'a Vec<Named<Format>>> {
            match f {
                Format::TypeName(name) => match registry.get(name)? {
                    ContainerFormat::Struct(fields) => Some(fields),
                    _ => None,
                },
                _ => None,
            }
        }
        fn is_enum(f: &Format, registry: &Registry) -> bool {
            let f = if let Format::Option(inner) = f { inner } else { f };
            matches!(f, Format::TypeName(n) if matches!(registry.get(n), Some(ContainerFormat::Enum(_))))
        }
        let (mut lists, mut enums, mut leaves) = (Vec::new(), Vec::new(), Vec::new());
        let mut walk = vec![(String::new(), root)];
        while let Some((prefix, format)) = walk.pop() {
            let Some(fs) = fields(&format, &registry) else { continue };
            for Named { name, value } in fs {
                let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
                // a deprecated list's former name is an optional list
                let value = match value {
                    Format::Option(inner) if matches!(**inner, Format::Seq(_)) => &**inner,
                    v => v,
                };
                match value {
                    Format::Seq(elem) if fields(elem, &registry).is_none() => lists.push(key),
                    v if is_enum(v, &registry) => enums.push(key),
                    v if fields(v, &registry).is_some() => walk.push((key, v.clone())),
                    _ => leaves.push(key),
                }
            }
        }
        lists.sort();
        enums.sort();
        let mut want_lists: Vec<String> = LIST_KEYS.iter().map(|k| k.to_string()).collect();
        want_lists.sort();
        assert_eq!(lists, want_lists, "LIST_KEYS");
        // Every enum-typed key has its rule; a rule may also name a key whose
        // type reads a closed set of words by hand (kubernetes.enabled:
        // "auto" or a boolean), never a key that does not exist.
        let missing: Vec<&String> = enums.iter().filter(|k| !ENUM_RULES.iter().any(|(r, _, _)| r == k)).collect();
        assert!(missing.is_empty(), "ENUM_RULES lacks {missing:?}");
        let stale: Vec<&str> = ENUM_RULES.iter().map(|(k, _, _)| *k).filter(|k| !enums.iter().chain(&leaves).any(|e| e == k)).collect();
        assert!(stale.is_empty(), "ENUM_RULES names keys that do not exist: {stale:?}");
    }

    #[test]
    fn a_bad_backend_names_the_allowed_values() {
        let err = Settings::from_toml("[probe]\nbackend = \"kprobes\"\n").unwrap_err().to_string();
        assert_eq!(err, "probe.backend: must be auto, socket or syscalls, e.g. \"auto\" (got \"kprobes\")");
    }
}
