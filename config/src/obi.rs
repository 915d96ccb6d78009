//! Settings a user of OpenTelemetry eBPF Instrumentation (OBI) or of
//! Grafana Beyla recognises: where ringtail has the same setting, OBI's
//! `OTEL_EBPF_*` environment variable (and Beyla's `BEYLA_*` where OBI
//! inherited it) is accepted too and mapped onto ringtail's key, here, in
//! one table ([`EQUIVALENTS`]); [`NO_EQUIVALENT`] lists those that have
//! none and what to do instead. Names as OBI's configuration reference and
//! Beyla's give them (read 2026-11, OBI's docs on opentelemetry.io, Beyla's
//! `docs/sources/configure/`).
//!
//! A mapped variable acts as the `RINGTAIL_…` variable of its key would
//! (it overrides the file). Two variables that set one key to different
//! values (`OTEL_EBPF_OPEN_PORT` and `BEYLA_OPEN_PORT`, either and
//! `RINGTAIL_DISCOVERY__OPEN_PORTS`, `OTEL_EBPF_METRICS_INTERVAL` and
//! `OTEL_METRIC_EXPORT_INTERVAL`) stop the start with both names; so does a
//! value ringtail cannot honour (`OTEL_EBPF_BPF_CONTEXT_PROPAGATION=all`),
//! never half-honoured. docs/configuration.md has the table, which a test
//! holds to these lists.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::ConfigError;

/// How a variable's value becomes ringtail's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Map {
    /// The value as it is.
    Same,
    /// Ports and ranges (`80,443,8000-8999`) → a list of ports.
    Ports,
    /// A comma-separated list, each item trimmed.
    List,
    /// `DEBUG`, `INFO`, `WARN`, `ERROR` (any case) → the `tracing` level.
    LogLevel,
    /// `text` → true, `disabled` → false (ringtail prints text lines only).
    TracePrinter,
    /// `true`, `false`, `autodetect` → `true`, `false`, `auto`.
    KubeEnable,
    /// `headers` → `probe.propagate`, `tcp` → `probe.carrier`, `disabled`
    /// → neither (`headers,tcp` and `all`, both at once, are refused).
    Propagation,
    /// A port → `127.0.0.1:PORT` (0: off).
    PrometheusPort,
    /// `/metrics` only (ringtail serves that path): sets nothing.
    MetricsPath,
    /// A Go duration (`30s`, `1m30s`, `500ms`).
    Duration,
    /// OBI's metric features → the two keys of `[metrics]`.
    Features,
}

/// One setting ringtail shares with OBI / Beyla.
#[derive(Debug, Clone, Copy)]
pub struct Equivalent {
    /// Their variables, OBI's first.
    pub theirs: &'static [&'static str],
    /// Ringtail's keys it sets (none: checked only).
    pub ours: &'static [&'static str],
    /// How the value is read.
    pub map: Map,
    /// What differs, if anything.
    pub note: &'static str,
}

/// Every OBI / Beyla variable ringtail honours. The one table.
pub const EQUIVALENTS: &[Equivalent] = &[
    Equivalent {
        theirs: &["OTEL_EBPF_OPEN_PORT", "BEYLA_OPEN_PORT"],
        ours: &["discovery.open_ports"],
        map: Map::Ports,
        note: "ports and ranges (`80,443,8000-8999`), at most 1,024 ports in all",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_TARGET_PID", "BEYLA_TARGET_PID"],
        ours: &["discovery.pids"],
        map: Map::List,
        note: "ringtail also traces their children",
    },
    Equivalent { theirs: &["OTEL_EBPF_BPF_WAKEUP_LEN", "BEYLA_BPF_WAKEUP_LEN"], ours: &["probe.wakeup_len"], map: Map::Same, note: "" },
    Equivalent {
        theirs: &["OTEL_EBPF_BPF_CONTEXT_PROPAGATION", "BEYLA_BPF_CONTEXT_PROPAGATION"],
        ours: &["probe.propagate", "probe.carrier"],
        map: Map::Propagation,
        note: "`headers` (the `traceparent` header), `tcp` (the TCP option, OBI's format) or `disabled`; not both at once (`headers,tcp` and `all` are refused)",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_LOG_LEVEL", "BEYLA_LOG_LEVEL"],
        ours: &["log.level"],
        map: Map::LogLevel,
        note: "`DEBUG`, `INFO`, `WARN`, `ERROR`",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_TRACE_PRINTER", "BEYLA_TRACE_PRINTER"],
        ours: &["export.stdout"],
        map: Map::TracePrinter,
        note: "`text` or `disabled`: ringtail prints one text line per span (no `json`, `json_indent`, `counter`)",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_PROFILE_PORT", "BEYLA_PROFILE_PORT"],
        ours: &["profile.port"],
        map: Map::Same,
        note: "the first of five loopback ports, one per ringtail process",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_METRICS_INTERVAL", "BEYLA_METRICS_INTERVAL"],
        ours: &["export.otlp.metrics_interval"],
        map: Map::Duration,
        note: "set with a different `OTEL_METRIC_EXPORT_INTERVAL`, a conflict",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_PROMETHEUS_PORT", "BEYLA_PROMETHEUS_PORT"],
        ours: &["export.prometheus.listen"],
        map: Map::PrometheusPort,
        note: "on loopback (`127.0.0.1:PORT`; 0: off): for other hosts set `export.prometheus.listen` and `allow_remote`",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_PROMETHEUS_PATH", "BEYLA_PROMETHEUS_PATH"],
        ours: &[],
        map: Map::MetricsPath,
        note: "`/metrics` only, the one path ringtail serves",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_METRICS_FEATURES", "BEYLA_OTEL_METRICS_FEATURES", "BEYLA_PROMETHEUS_FEATURES"],
        ours: &["metrics.service_graph", "metrics.span_metrics"],
        map: Map::Features,
        note: "`application_service_graph` and `application_span_otel` (or `all`, `*`) turn these on, their absence off; `application` is always on in ringtail; the other features (`application_span`'s older names, `network`, `application_host`...) are refused",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_KUBE_METADATA_ENABLE", "BEYLA_KUBE_METADATA_ENABLE"],
        ours: &["kubernetes.enabled"],
        map: Map::KubeEnable,
        note: "`autodetect` is `auto`",
    },
    Equivalent {
        theirs: &["OTEL_EBPF_SENSITIVE_QUERY_PARAMS_ADD", "BEYLA_SENSITIVE_QUERY_PARAMS_ADD"],
        ours: &["redaction.query_keys"],
        map: Map::List,
        note: "matched case-insensitively (OBI: case-sensitively)",
    },
];

/// OBI / Beyla variables with no equivalent in ringtail, and what to do
/// instead. Set, they are ignored and named in a warning at start
/// ([`unmapped`]); so is any other `OTEL_EBPF_*` or `BEYLA_*` variable.
pub const NO_EQUIVALENT: &[(&str, &str)] = &[
    ("OTEL_EBPF_AUTO_TARGET_EXE", "a glob on the executable's path: `discovery.exe_names` takes regexes on its name"),
    ("OTEL_EBPF_AUTO_TARGET_LANGUAGE", "select by `discovery.exe_names`, `open_ports` or `pids`"),
    ("OTEL_EBPF_CONFIG_PATH", "`ringtail --config FILE`"),
    ("OTEL_EBPF_SHUTDOWN_TIMEOUT", "fixed deadlines (docs/architecture.md)"),
    ("OTEL_EBPF_LOG_FORMAT", "text logs only"),
    ("OTEL_EBPF_ENFORCE_SYS_CAPS", "ringtail always checks its capabilities at start and names a missing one"),
    ("OTEL_EBPF_HOSTNAME", "`host.name` is the host's; `OTEL_RESOURCE_ATTRIBUTES` adds attributes"),
    ("OTEL_EBPF_KUBE_CLUSTER_NAME", "`OTEL_RESOURCE_ATTRIBUTES=k8s.cluster.name=…`"),
    ("OTEL_EBPF_PROMETHEUS_TTL", "idle series are forgotten after 10 export intervals, at least 10 minutes"),
    ("OTEL_EBPF_ALLOW_SERVICE_GRAPH_SELF_REFERENCES", "a service calling itself is an edge, as Tempo counts it"),
    ("OTEL_EBPF_PROMETHEUS_ALLOW_SERVICE_GRAPH_SELF_REFERENCES", "a service calling itself is an edge, as Tempo counts it"),
    ("OTEL_EBPF_METRICS_INSTRUMENTATIONS", "`probe.stream_ports = []` (no database or messaging calls), `tls.enabled = false` (no HTTPS)"),
    ("OTEL_EBPF_TRACES_INSTRUMENTATIONS", "`probe.stream_ports = []` (no database or messaging calls), `tls.enabled = false` (no HTTPS)"),
    (
        "OTEL_EBPF_PROMETHEUS_INSTRUMENTATIONS",
        "`probe.stream_ports = []` (no database or messaging calls), `tls.enabled = false` (no HTTPS)",
    ),
    ("OTEL_EBPF_SENSITIVE_QUERY_PARAMS_REMOVE", "`redaction.default_query_keys = false` drops the common secret keys as a whole"),
    ("OTEL_EBPF_BPF_TRACK_REQUEST_HEADERS", "an incoming `traceparent` is always joined"),
    ("OTEL_EBPF_BPF_HTTP_REQUEST_TIMEOUT", "a request without an answer makes no span"),
    ("OTEL_EBPF_BPF_HIGH_REQUEST_VOLUME", "`probe.wakeup_len`, `probe.flush_interval`"),
    ("OTEL_EBPF_INSECURE_SKIP_VERIFY", "never: the collector's certificate is always verified"),
    ("OTEL_EBPF_PROMETHEUS_EXTRA_RESOURCE_ATTRIBUTES", "`service_name` and `service_instance_id` labels; the rest over OTLP"),
    ("OTEL_EBPF_INTERNAL_METRICS_EXPORTER", "ringtail's own metrics are always on `/metrics` and OTLP"),
];

/// The prefixes of the variables this module reads.
const PREFIXES: [&str; 2] = ["OTEL_EBPF_", "BEYLA_"];

/// At most this many ports from a list with ranges (the kernel's table of
/// listening ports holds 1,024).
pub const MAX_PORTS: usize = 1024;

/// The `RINGTAIL_…` variable of key `key` (`probe.wakeup_len` →
/// `RINGTAIL_PROBE__WAKEUP_LEN`).
pub fn env_name(key: &str) -> String {
    format!("{}_{}", crate::ENV_PREFIX, key.to_ascii_uppercase().replace('.', "__"))
}

fn bad(var: &str, rule: &'static str, example: &'static str, value: &str) -> ConfigError {
    ConfigError::Invalid { key: var.to_owned(), rule, example, value: format!("{value:?}") }
}

fn ports(var: &str, v: &str) -> Result<String, ConfigError> {
    const RULE: &str = "must be ports and port ranges 1..=65535, at most 1024 ports in all";
    let mut out: Vec<u16> = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let (Ok(lo), Ok(hi)) = (lo.trim().parse::<u16>(), hi.trim().parse::<u16>()) else {
            return Err(bad(var, RULE, "\"80,443,8000-8999\"", v));
        };
        if lo == 0 || lo > hi || out.len() + usize::from(hi - lo) + 1 > MAX_PORTS {
            return Err(bad(var, RULE, "\"80,443,8000-8999\"", v));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out.iter().map(u16::to_string).collect::<Vec<_>>().join(","))
}

/// A Go duration (`1h2m3.5s`, `500ms`, `10us`) as a [`Duration`].
fn go_duration(v: &str) -> Option<Duration> {
    let mut rest = v.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let ns = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += n * ns;
        rest = &rest[unit_end..];
    }
    (total.is_finite() && total < 1e18).then(|| Duration::from_nanos(total as u64))
}

/// OTEL's `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds), as the exporter reads it.
fn otel_interval(env: &BTreeMap<String, String>) -> Option<Duration> {
    env.get("OTEL_METRIC_EXPORT_INTERVAL")?.trim().parse::<u64>().ok().map(Duration::from_millis)
}

/// The values `var`'s value `v` gives ringtail's keys `e.ours`.
fn values(e: &Equivalent, var: &str, v: &str) -> Result<Vec<String>, ConfigError> {
    let t = v.trim();
    let one = |s: &str| Ok(vec![s.to_owned()]);
    match e.map {
        Map::Same => one(t),
        Map::Ports => Ok(vec![ports(var, t)?]),
        Map::List => one(&t.split(',').map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(",")),
        Map::LogLevel => match t.to_ascii_lowercase().as_str() {
            l @ ("debug" | "info" | "warn" | "error") => one(l),
            _ => Err(bad(var, "must be DEBUG, INFO, WARN or ERROR", "\"INFO\"", v)),
        },
        Map::TracePrinter => match t {
            "text" => one("true"),
            "disabled" => one("false"),
            _ => Err(bad(var, "must be text or disabled (ringtail prints one text line per span; no json, json_indent, counter)", "\"text\"", v)),
        },
        Map::KubeEnable => match t.to_ascii_lowercase().as_str() {
            "true" => one("true"),
            "false" => one("false"),
            "autodetect" => one("auto"),
            _ => Err(bad(var, "must be true, false or autodetect", "\"autodetect\"", v)),
        },
        Map::Propagation => match t {
            "headers" => Ok(vec!["true".into(), "false".into()]),
            "tcp" => Ok(vec!["false".into(), "true".into()]),
            "disabled" => Ok(vec!["false".into(), "false".into()]),
            _ => Err(bad(
                var,
                "must be headers, tcp or disabled: ringtail writes the traceparent header or the TCP option, not both at once (headers,tcp and all have no equivalent)",
                "\"headers\"",
                v,
            )),
        },
        Map::PrometheusPort => match t.parse::<u16>() {
            Ok(0) => one(""),
            Ok(p) => one(&format!("127.0.0.1:{p}")),
            Err(_) => Err(bad(var, "must be a TCP port (0: off)", "\"9400\"", v)),
        },
        Map::MetricsPath => match t {
            "/metrics" => Ok(Vec::new()),
            _ => Err(bad(var, "must be /metrics: the one path ringtail serves", "\"/metrics\"", v)),
        },
        Map::Duration => match go_duration(t) {
            Some(d) if !d.is_zero() => one(&humantime::format_duration(d).to_string()),
            _ => Err(bad(var, "must be a duration", "\"30s\"", v)),
        },
        Map::Features => {
            let (mut graph, mut spans) = (false, false);
            for f in t.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                match f {
                    "application" => {}
                    "application_service_graph" => graph = true,
                    "application_span_otel" => spans = true,
                    "all" | "*" => (graph, spans) = (true, true),
                    _ => {
                        return Err(bad(
                            var,
                            "must list only application, application_service_graph, application_span_otel, all or *: ringtail has no equivalent of the others \
                             (application_span's older traces_spanmetrics_* names: use application_span_otel)",
                            "\"application,application_service_graph\"",
                            v,
                        ))
                    }
                }
            }
            Ok(vec![graph.to_string(), spans.to_string()])
        }
    }
}

/// The `RINGTAIL_…` variables the OBI / Beyla variables of `env` stand
/// for, with their values; an error for a value ringtail cannot honour or
/// two variables that set one key to different values (the `RINGTAIL_…`
/// variable of that key among them).
pub fn overlay(env: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, ConfigError> {
    // ringtail's variable -> (value, the variable that set it)
    let mut set: BTreeMap<String, (String, String)> = BTreeMap::new();
    for e in EQUIVALENTS {
        for var in e.theirs {
            let Some(v) = env.get(*var) else { continue };
            let vals = values(e, var, v)?;
            if e.map == Map::Duration {
                if let (Some(theirs), Some(otel)) = (go_duration(v), otel_interval(env)) {
                    if theirs != otel {
                        return Err(conflict(var, "OTEL_METRIC_EXPORT_INTERVAL", e.ours[0], v, &env["OTEL_METRIC_EXPORT_INTERVAL"]));
                    }
                }
            }
            for (key, val) in e.ours.iter().zip(vals) {
                let name = env_name(key);
                if let Some(ours) = env.get(&name) {
                    if ours.trim() != val {
                        return Err(conflict(var, &name, key, &val, ours));
                    }
                }
                match set.get(&name) {
                    Some((prev, by)) if *prev != val => return Err(conflict(by, var, key, prev, &val)),
                    Some(_) => {}
                    None => {
                        set.insert(name, (val, (*var).to_owned()));
                    }
                }
            }
        }
    }
    Ok(set.into_iter().map(|(k, (v, _))| (k, v)).collect())
}

fn conflict(a: &str, b: &str, key: &str, va: &str, vb: &str) -> ConfigError {
    ConfigError::Conflict { first: a.to_owned(), second: b.to_owned(), key: key.to_owned(), values: format!("{va:?} and {vb:?}") }
}

/// The `OTEL_EBPF_*` and `BEYLA_*` variables of `env` that ringtail does
/// not read, each with what to do instead when known: warned about at start.
pub fn unmapped(env: &BTreeMap<String, String>) -> Vec<(String, &'static str)> {
    env.keys()
        .filter(|k| PREFIXES.iter().any(|p| k.starts_with(p)))
        .filter(|k| !EQUIVALENTS.iter().any(|e| e.theirs.contains(&k.as_str())))
        .map(|k| {
            let obi = k.strip_prefix("BEYLA_").map_or_else(|| k.clone(), |rest| format!("OTEL_EBPF_{rest}"));
            let hint = NO_EQUIVALENT.iter().find(|(n, _)| *n == obi).map_or("ringtail has no equivalent", |(_, h)| *h);
            (k.clone(), hint)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Settings;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn load(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::load_with_env(None, env(pairs))
    }

    #[test]
    fn each_equivalent_sets_ringtails_key() {
        let s = load(&[
            ("OTEL_EBPF_OPEN_PORT", "8080, 443,8000-8002"),
            ("OTEL_EBPF_TARGET_PID", "12,34"),
            ("OTEL_EBPF_BPF_WAKEUP_LEN", "100"),
            ("OTEL_EBPF_BPF_CONTEXT_PROPAGATION", "headers"),
            ("OTEL_EBPF_LOG_LEVEL", "DEBUG"),
            ("OTEL_EBPF_TRACE_PRINTER", "disabled"),
            ("OTEL_EBPF_PROFILE_PORT", "6060"),
            ("OTEL_EBPF_METRICS_INTERVAL", "1m30s"),
            ("OTEL_EBPF_PROMETHEUS_PORT", "9400"),
            ("OTEL_EBPF_PROMETHEUS_PATH", "/metrics"),
            ("OTEL_EBPF_METRICS_FEATURES", "application,application_span_otel"),
            ("OTEL_EBPF_KUBE_METADATA_ENABLE", "autodetect"),
            ("OTEL_EBPF_SENSITIVE_QUERY_PARAMS_ADD", "tenant_secret, Otp"),
        ])
        .unwrap();
        assert_eq!(s.discovery.open_ports.iter().map(|p| p.get()).collect::<Vec<_>>(), [443, 8000, 8001, 8002, 8080]);
        assert_eq!(s.discovery.pids, [12, 34]);
        assert_eq!(s.probe.wakeup_len, 100);
        assert!(s.probe.propagate);
        assert_eq!(s.log.level, "debug");
        assert!(!s.export.stdout);
        assert_eq!(s.profile.port, 6060);
        assert_eq!(s.export.otlp.metrics_interval, Duration::from_secs(90));
        assert_eq!(s.export.prometheus.listen.map(|l| l.get().to_string()), Some("127.0.0.1:9400".to_owned()));
        assert!(!s.metrics.service_graph, "OBI's features list turns off what it does not name");
        assert!(s.metrics.span_metrics);
        assert_eq!(s.kubernetes.enabled, crate::kubernetes::Enabled::Auto);
        assert_eq!(s.redaction.query_keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(), ["tenant_secret", "otp"]);
    }

    #[test]
    fn beylas_names_are_obis() {
        for e in EQUIVALENTS {
            for beyla in e.theirs.iter().filter(|v| v.starts_with("BEYLA_")) {
                assert!(e.theirs.iter().any(|v| v.starts_with("OTEL_EBPF_")), "{beyla} stands beside an OTEL_EBPF_ name");
            }
        }
        let s = load(&[
            ("BEYLA_OPEN_PORT", "8080"),
            ("BEYLA_TRACE_PRINTER", "text"),
            ("BEYLA_PROMETHEUS_FEATURES", "application_service_graph"),
        ])
        .unwrap();
        assert_eq!(s.discovery.open_ports.iter().map(|p| p.get()).collect::<Vec<_>>(), [8080]);
        assert!(s.export.stdout);
        assert!(s.metrics.service_graph && !s.metrics.span_metrics);
        let s = load(&[("OTEL_EBPF_METRICS_FEATURES", "*"), ("OTEL_EBPF_PROMETHEUS_PORT", "0")]).unwrap();
        assert!(s.metrics.service_graph && s.metrics.span_metrics);
        assert_eq!(s.export.prometheus.listen, None, "port 0 is off");
    }

    #[test]
    fn the_same_value_twice_is_no_conflict() {
        let s = load(&[
            ("OTEL_EBPF_OPEN_PORT", "80,8000-8001"),
            ("BEYLA_OPEN_PORT", "8000,8001,80"),
            ("RINGTAIL_DISCOVERY__OPEN_PORTS", "80,8000,8001"),
        ])
        .unwrap();
        assert_eq!(s.discovery.open_ports.len(), 3);
        assert!(load(&[("OTEL_EBPF_METRICS_INTERVAL", "5s"), ("OTEL_METRIC_EXPORT_INTERVAL", "5000")]).is_ok());
    }

    #[test]
    fn a_conflicting_pair_stops_the_start_naming_both() {
        type Env<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(Env, [&str; 2])] = &[
            (&[("OTEL_EBPF_OPEN_PORT", "80"), ("BEYLA_OPEN_PORT", "81")], ["OTEL_EBPF_OPEN_PORT", "BEYLA_OPEN_PORT"]),
            (
                &[("OTEL_EBPF_BPF_WAKEUP_LEN", "10"), ("RINGTAIL_PROBE__WAKEUP_LEN", "20")],
                ["OTEL_EBPF_BPF_WAKEUP_LEN", "RINGTAIL_PROBE__WAKEUP_LEN"],
            ),
            (
                &[("OTEL_EBPF_METRICS_INTERVAL", "5s"), ("OTEL_METRIC_EXPORT_INTERVAL", "1000")],
                ["OTEL_EBPF_METRICS_INTERVAL", "OTEL_METRIC_EXPORT_INTERVAL"],
            ),
            (
                &[("BEYLA_OTEL_METRICS_FEATURES", "application_service_graph"), ("BEYLA_PROMETHEUS_FEATURES", "application")],
                ["BEYLA_OTEL_METRICS_FEATURES", "BEYLA_PROMETHEUS_FEATURES"],
            ),
            (
                &[("OTEL_EBPF_METRICS_FEATURES", "all"), ("RINGTAIL_METRICS__SPAN_METRICS", "false")],
                ["OTEL_EBPF_METRICS_FEATURES", "RINGTAIL_METRICS__SPAN_METRICS"],
            ),
        ];
        for (pairs, names) in cases {
            let err = load(pairs).unwrap_err();
            assert!(matches!(err, ConfigError::Conflict { .. }), "{pairs:?}: {err:?}");
            let text = err.to_string();
            assert!(names.iter().all(|n| text.contains(n)), "{pairs:?}: {text}");
        }
    }

    #[test]
    fn values_ringtail_cannot_honour_are_refused_with_the_rule() {
        let cases: &[(&str, &str, &str)] = &[
            ("OTEL_EBPF_BPF_CONTEXT_PROPAGATION", "headers,tcp", "headers, tcp or disabled"),
            ("OTEL_EBPF_BPF_CONTEXT_PROPAGATION", "all", "headers, tcp or disabled"),
            ("OTEL_EBPF_TRACE_PRINTER", "json", "text or disabled"),
            ("OTEL_EBPF_LOG_LEVEL", "verbose", "DEBUG"),
            ("OTEL_EBPF_OPEN_PORT", "1-2000", "at most 1024"),
            ("OTEL_EBPF_OPEN_PORT", "90-80", "port ranges"),
            ("OTEL_EBPF_OPEN_PORT", "http", "port ranges"),
            ("OTEL_EBPF_PROMETHEUS_PATH", "/m", "/metrics"),
            ("OTEL_EBPF_PROMETHEUS_PORT", "99999", "TCP port"),
            ("OTEL_EBPF_METRICS_FEATURES", "application,network", "no equivalent"),
            ("OTEL_EBPF_METRICS_FEATURES", "application_span", "application_span_otel"),
            ("OTEL_EBPF_METRICS_INTERVAL", "soon", "duration"),
            ("OTEL_EBPF_KUBE_METADATA_ENABLE", "maybe", "autodetect"),
        ];
        for (var, value, rule) in cases {
            let err = load(&[(var, value)]).unwrap_err().to_string();
            assert!(err.contains(var) && err.contains(rule) && err.contains(value), "{var}={value}: {err}");
        }
        // A mapped value is then held to ringtail's own rules.
        let err = load(&[("OTEL_EBPF_PROFILE_PORT", "80")]).unwrap_err().to_string();
        assert!(err.contains("profile.port"), "{err}");
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("1h2m3.5s"), Some(Duration::from_millis(3_723_500)));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(go_duration("10us"), Some(Duration::from_micros(10)));
        for bad in ["", "5", "s", "5 s", "1d", "-1s"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_rest_are_named_for_a_warning() {
        let e = env(&[
            ("OTEL_EBPF_AUTO_TARGET_EXE", "*/srv"),
            ("BEYLA_KUBE_CLUSTER_NAME", "c"),
            ("OTEL_EBPF_OPEN_PORT", "80"),
            ("OTEL_EBPF_MADE_UP", "1"),
        ]);
        let u = unmapped(&e);
        let names: Vec<&str> = u.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["BEYLA_KUBE_CLUSTER_NAME", "OTEL_EBPF_AUTO_TARGET_EXE", "OTEL_EBPF_MADE_UP"]);
        assert!(u[0].1.contains("k8s.cluster.name"), "Beyla's name finds OBI's hint: {u:?}");
        assert_eq!(u[2].1, "ringtail has no equivalent");
        assert!(load(&[("OTEL_EBPF_AUTO_TARGET_EXE", "*/srv")]).is_ok(), "ignored, not an error");
    }

    /// docs/configuration.md's table names every variable of both lists,
    /// and ringtail's key of each equivalent.
    #[test]
    fn the_documented_table_is_these_lists() {
        let doc = include_str!("../../docs/configuration.md");
        for e in EQUIVALENTS {
            for v in e.theirs.iter().chain(e.ours) {
                assert!(doc.contains(&format!("`{v}`")), "docs/configuration.md does not name `{v}`");
            }
        }
        for (v, _) in NO_EQUIVALENT {
            assert!(doc.contains(&format!("`{v}`")), "docs/configuration.md does not name `{v}`");
        }
    }
}
