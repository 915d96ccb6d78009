//! `[probe]`: how events leave the kernel.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{duration_between, invalid, ConfigError};

/// The default `probe.pin_dir`.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/ringtail";

/// Which hooks capture socket I/O (the probe-loader decides `Auto` at start
/// by probing the running kernel; `ringtail check-kernel` shows the choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// `Socket` where the kernel has it, else `Syscalls`.
    Auto,
    /// The `sock_recv_length`/`sock_send_length` BTF tracepoints (Linux
    /// 6.3+): only socket I/O reaches the programs; state in socket-local
    /// storage.
    Socket,
    /// The per-syscall tracepoints (`syscalls/sys_enter_*`, Linux 5.8+ with
    /// BTF; tracefs, mounted by the loader if missing): every read/write
    /// of every traced process enters, non-sockets leave early; state in a
    /// table of `max_connections`.
    Syscalls,
}

impl Backend {
    /// The configuration spelling (also the exported label value).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Socket => "socket",
            Backend::Syscalls => "syscalls",
        }
    }
}

/// With `probe.propagate`: whether a connection stays in the socket map
/// after its first request, so that the later requests it keeps alive
/// carry a `traceparent` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeepAlive {
    /// `Always` where the kernel reports FIONREAD right for a socket in a
    /// socket map (the loader tries one at start), else `Never`.
    Auto,
    /// Also where FIONREAD reads 0 for a socket in a socket map (kernel
    /// commit 929e30f93125: Linux 6.6.128+, 6.12.75+, 6.18.14+, 6.19+,
    /// until its fix): a traced client that sizes its reads with FIONREAD
    /// on such a connection (nginx, Java, .NET can) then waits for data
    /// that is there.
    Always,
    /// Each connection leaves the socket map within its first request's
    /// send: only that request is written into.
    Never,
}

impl KeepAlive {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            KeepAlive::Auto => "auto",
            KeepAlive::Always => "always",
            KeepAlive::Never => "never",
        }
    }
}

/// Kernel side: how events leave the kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeSettings {
    /// The capture backend: `"auto"`, `"socket"` or `"syscalls"`.
    pub backend: Backend,
    /// How much waits in the ring before the kernel wakes the loader, in
    /// HTTP events' worth of bytes (680 bytes each; the kernel counts the
    /// ring's unread bytes, so a database record of up to ~16.5 KiB counts
    /// for what it takes; at most an eighth of the ring). A wakeup costs
    /// more than handling an event, so batching them is the main lever on
    /// the agent's CPU cost; 0 = the kernel's default (a wakeup per record
    /// whenever the loader has caught up). Higher values add latency only
    /// up to `flush_interval`.
    pub wakeup_len: u32,
    /// The loader drains the ring at least this often, so that an event
    /// never waits longer than this for `wakeup_len` to fill up.
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
    /// Ring buffer size in MiB (a power of two). Bigger rides out longer
    /// loader stalls before events are lost (and counted); the loader maps
    /// it twice, so it costs twice this in resident memory once used. 4 MiB
    /// holds ~6,200 HTTP events (over half a second at 10,000 requests/s),
    /// or ~1,600 database calls of 2 KiB values.
    pub ring_buffer_mb: u32,
    /// Connections tracked at once by the `syscalls` backend (a hash table:
    /// tracepoint programs may not use socket-local storage); beyond it new
    /// connections are not traced, and counted
    /// (`ringtail_dropped_events_total{reason="connection_state_failed"}`);
    /// the table's memory (~1.1 KB a connection) is allocated at start. The
    /// `socket` backend
    /// keeps each connection's state in the socket itself (freed with it),
    /// so no number of idle or half-open connections can crowd others out,
    /// and this bound does not apply to it.
    pub max_connections: u32,
    /// Read `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` of the
    /// traced processes: at start from `/proc/PID/environ` (which needs
    /// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH at start, dropped after), and
    /// for processes started later from the first 8 KiB of the environment
    /// the kernel copies at exec. Off: no environment is read (and those two
    /// capabilities are not needed); other users' processes that were
    /// running at start are then named by argv[0].
    pub read_process_env: bool,
    /// Where the probes' maps, programs and links are pinned (a directory
    /// on a bpffs, which the loader mounts at /sys/fs/bpf if missing), so
    /// that capture and the ring buffer outlive a loader restart. Empty: no
    /// pins (probes die with the loader).
    pub pin_dir: PathBuf,
    /// On an orderly stop, leave the pins in place: capture goes on into the
    /// ring buffer while ringtail is down (a `systemctl restart` loses
    /// nothing up to the ring's size). `ringtail cleanup` removes them.
    pub keep_pins_on_stop: bool,
    /// Write a W3C `traceparent` into the HTTP/1 requests that traced
    /// processes send in clear text without one, so that the server they
    /// call (ringtail on its host, or its own OpenTelemetry SDK) continues
    /// the client span's trace. Calls a process makes while serving a
    /// request are not written (their trace is that request's, which the
    /// kernel does not know), nor TLS or HTTP/2 requests. Needs the
    /// `socket` backend (Linux 6.3+), a cgroup v2 hierarchy, and
    /// CAP_NET_ADMIN at start (a sockops program on the root cgroup, an
    /// sk_msg program on the traced processes' connections).
    pub propagate: bool,
    /// With `propagate`: `"auto"`, `"always"` or `"never"`. A connection
    /// in the socket map gets the kernel's tcp_bpf socket calls, whose
    /// FIONREAD reads 0 on recent kernels (see [`KeepAlive`]): `"auto"`
    /// keeps connections there after their first request (so that a kept
    /// alive connection's later requests are written too) only where the
    /// loader found FIONREAD right at start; elsewhere, as with `"never"`,
    /// each connection leaves the map within its first request's send and
    /// its later requests are counted (`keep_alive_off`).
    pub propagate_keep_alive: KeepAlive,
    /// Carry each traced request's trace context to the next host in a TCP
    /// header option (kind 25, OpenTelemetry eBPF Instrumentation's format),
    /// which `sockops` writes on the segment that begins a request and the
    /// receiving host's ringtail reads: the kernel decides HTTP/1 server
    /// requests' ids at their start, and a call a thread makes while it
    /// serves one request continues that request's trace there, whatever
    /// the call's bytes (the payload is never changed). Needs the `socket`
    /// backend (Linux 6.3+), a cgroup v2 hierarchy and CAP_NET_ADMIN at
    /// start, and ringtail (or OBI) on the receiving host; not with
    /// `propagate` (yet). docs/telemetry.md, "Across hosts".
    pub carrier: bool,
    /// Server ports of the byte-stream protocols whose calls become spans:
    /// the databases (PostgreSQL 5432, MySQL/MariaDB 3306, Redis 6379,
    /// memcached 11211) and the message brokers (Kafka 9092, RabbitMQ's
    /// AMQP 5672, NATS 4222, MQTT 1883). A traced process's connection to
    /// one of these ports is shipped as a byte stream and read as that
    /// protocol's client (told from its first bytes; the port picks one
    /// where they do not say). At most 16, none 0; empty: no database or
    /// messaging calls are traced.
    pub stream_ports: Vec<u16>,
    /// The former name of `stream_ports`, from when only databases were
    /// read: still read (it wins over a default `stream_ports`), with a
    /// deprecation warning at start ([`ProbeSettings::deprecated`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db_ports: Option<Vec<u16>>,
}

/// The most `probe.stream_ports` the kernel checks (STREAM_PORTS in
/// bpf/ringtail.h: the loader's build checks they agree).
pub const MAX_STREAM_PORTS: usize = 16;

/// `probe.stream_ports`' default: the databases', then the brokers'.
pub const DEFAULT_STREAM_PORTS: [u16; 8] = [5432, 3306, 6379, 11211, 9092, 5672, 4222, 1883];

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings {
            backend: Backend::Auto,
            wakeup_len: 768,
            flush_interval: Duration::from_millis(100),
            ring_buffer_mb: 4,
            max_connections: 16384,
            read_process_env: true,
            pin_dir: PathBuf::from(DEFAULT_PIN_DIR),
            keep_pins_on_stop: false,
            propagate: false,
            propagate_keep_alive: KeepAlive::Auto,
            carrier: false,
            stream_ports: DEFAULT_STREAM_PORTS.to_vec(),
            db_ports: None,
        }
    }
}

impl ProbeSettings {
    /// The ports whose connections are shipped as byte streams
    /// (`stream_ports`, or its former name `db_ports` when that is set).
    pub fn stream_ports(&self) -> &[u16] {
        self.db_ports.as_deref().unwrap_or(&self.stream_ports)
    }

    /// The deprecated keys this configuration sets, each with what to write
    /// instead (the probe-loader warns of them at start).
    pub fn deprecated(&self) -> Vec<(&'static str, &'static str)> {
        self.db_ports.as_ref().map(|_| ("probe.db_ports", "probe.stream_ports")).into_iter().collect()
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let p = self;
        if p.wakeup_len > 1_000_000 {
            return Err(invalid("probe.wakeup_len", "must be 0..=1000000", "768", p.wakeup_len));
        }
        let limits = (Duration::from_millis(1), Duration::from_secs(10));
        duration_between("probe.flush_interval", p.flush_interval, limits, "must be between 1ms and 10s", "\"100ms\"")?;
        if !p.ring_buffer_mb.is_power_of_two() || p.ring_buffer_mb > 1024 {
            return Err(invalid("probe.ring_buffer_mb", "must be a power of two from 1 to 1024", "16", p.ring_buffer_mb));
        }
        if !(64..=1 << 20).contains(&p.max_connections) {
            return Err(invalid("probe.max_connections", "must be 64..=1048576", "16384", p.max_connections));
        }
        if p.propagate && p.backend == Backend::Syscalls {
            return Err(invalid(
                "probe.propagate",
                "needs the socket backend (Linux 6.3+): set probe.backend to \"auto\" or \"socket\", or propagate to false",
                "false",
                p.propagate,
            ));
        }
        if p.carrier && p.backend == Backend::Syscalls {
            return Err(invalid(
                "probe.carrier",
                "needs the socket backend (Linux 6.3+): set probe.backend to \"auto\" or \"socket\", or carrier to false",
                "false",
                p.carrier,
            ));
        }
        if p.carrier && p.propagate {
            return Err(invalid("probe.carrier", "cannot be on with probe.propagate (yet): choose one", "false", p.carrier));
        }
        let example = "[5432, 3306, 6379, 11211, 9092, 5672, 4222, 1883]";
        for (key, ports) in [("probe.stream_ports", Some(&p.stream_ports)), ("probe.db_ports", p.db_ports.as_ref())] {
            let Some(ports) = ports else { continue };
            if ports.len() > MAX_STREAM_PORTS || ports.contains(&0) {
                return Err(invalid(key, "must be at most 16 ports, none of them 0", example, format!("{ports:?}")));
            }
        }
        if let Some(old) = &p.db_ports {
            if p.stream_ports[..] != DEFAULT_STREAM_PORTS[..] && p.stream_ports != *old {
                return Err(invalid(
                    "probe.db_ports",
                    "is probe.stream_ports' former name: set only probe.stream_ports",
                    example,
                    format!("{old:?}"),
                ));
            }
        }
        if !p.pin_dir.as_os_str().is_empty() && (!p.pin_dir.is_absolute() || p.pin_dir.parent().is_none()) {
            return Err(invalid(
                "probe.pin_dir",
                "must be an absolute directory path below a bpffs mount, or empty",
                "\"/sys/fs/bpf/ringtail\"",
                p.pin_dir.display(),
            ));
        }
        Ok(())
    }

    /// Whether the probes are pinned.
    pub fn pins(&self) -> bool {
        !self.pin_dir.as_os_str().is_empty()
    }
}
