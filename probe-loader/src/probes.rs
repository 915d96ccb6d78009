//! Loading and attaching the eBPF programs of the chosen capture backend
//! (`backend`), and the maps the loader uses.
//!
//! With `probe.pin_dir` set they are pinned, and the next loader reopens
//! them instead (see `pins`): no BTF parse, no backend decision, no attach.
//!
//! Every program is a BTF tracepoint (`tp_btf`) or, for the syscall backend,
//! a tracefs tracepoint: no kprobes, no fentry. The kernel needs BTF and the
//! ring buffer (5.8). With `tls.enabled`, uprobes on OpenSSL's functions
//! are attached after them (`attach_tls`, where: `tls`).

use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray, RingBuf, SockHash};
use aya::programs::links::FdLink;
use aya::programs::uprobe::{UProbeAttachLocation, UProbeScope};
use aya::programs::ProbeKind;
use aya::programs::{BtfTracePoint, CgroupAttachMode, ProgramInfo, SkMsg, SockOps, TracePoint, UProbe};
use aya::{Btf, Ebpf, EbpfLoader};
use ringtail_config::{DiscoverySettings, ProbeSettings, TlsSettings};

use crate::backend::{BackendError, Chosen, Hook};
use crate::discovery::Selected;
use crate::kernel::COUNTERS;
use crate::pins;
use crate::ring::WalRing;
use crate::tls;

/// A fresh random capture epoch (never 0: 0 means "none").
fn random_epoch() -> u64 {
    runtime_kit::instance_id().max(1)
}

/// Why the probes could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot read the kernel's BTF (/sys/kernel/btf/vmlinux); ringtail needs CONFIG_DEBUG_INFO_BTF=y")]
    Btf {
        #[source]
        source: aya::BtfError,
    },
    #[error("cannot load the eBPF object")]
    Load {
        #[source]
        source: aya::EbpfError,
    },
    #[error("program {program} is missing from the eBPF object")]
    MissingProgram { program: &'static str },
    #[error("map {map} is missing from the eBPF object")]
    MissingMap { map: &'static str },
    #[error("the kernel refused program {program} (tracepoint {tracepoint}); verifier log:\n{log}")]
    Verifier { program: &'static str, tracepoint: &'static str, log: String },
    #[error("cannot load program {program} (tracepoint {tracepoint})")]
    Program {
        program: &'static str,
        tracepoint: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("program {program}'s link to {tracepoint} cannot be pinned")]
    Link {
        program: &'static str,
        tracepoint: &'static str,
        #[source]
        source: aya::programs::links::LinkError,
    },
    #[error("cannot pin the {what} (probe.pin_dir)")]
    Pin {
        what: String,
        #[source]
        source: aya::pin::PinError,
    },
    #[error(transparent)]
    Pins(#[from] pins::PinError),
    #[error("tls.libraries: {path} does not exist")]
    TlsMissing { path: PathBuf },
    #[error("tls.libraries: cannot use it")]
    TlsUnusable {
        #[source]
        source: tls::Unopened,
    },
    #[error("tls.libraries: {path} has no OpenSSL symbol {symbol}")]
    TlsNotOpenssl { path: PathBuf, symbol: &'static str },
    #[error("cannot attach program {program} to {symbol} in {path}")]
    TlsAttach {
        program: &'static str,
        symbol: &'static str,
        path: PathBuf,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("probe.propagate: {why}")]
    Propagation { why: String },
    #[error("cannot read the event ring buffer")]
    Ring {
        #[source]
        source: crate::ring::RingError,
    },
    #[error("map {map} has an unexpected type")]
    Map {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
}

/// The loaded, attached programs and the maps user space updates.
pub struct Probes {
    /// The object as loaded by this process; None when the programs were
    /// found pinned (their statistics come from the pins then).
    ebpf: Option<Ebpf>,
    /// The pin set in use, if any.
    set: Option<PathBuf>,
    backend: Chosen,
    sel_pids: HashMap<MapData, u32, u8>,
    /// Kept so the map lives as long as the programs that read it.
    _sel_ports: HashMap<MapData, u16, u8>,
    counters: PerCpuArray<MapData, u64>,
    epoch: u64,
    /// How the TLS uprobes are attached, if their programs are loaded (by
    /// this process, or pinned by an earlier one).
    tls: Option<crate::links::Kind>,
    /// The files (device, inode) the TLS uprobes went to, and those looked
    /// at and found not to be OpenSSL: each file is looked at once.
    tls_files: BTreeSet<(u64, u64)>,
    /// The TLS programs reopened from the pin set, for files attached later
    /// by a loader that did not load them.
    tls_pinned: Vec<(&'static str, UProbe)>,
    /// The executables looked into for OpenSSL or Go (device, inode),
    /// each once (bounded: `tls::MAX_LOOKED`).
    exes_looked: tls::Looked,
    /// Where other processes' files are read: a worker with a deadline
    /// per process (`deadline`).
    overseer: crate::deadline::Overseer,
    /// The kind of TLS links a fresh load's programs are for.
    fresh_tls_kind: crate::links::Kind,
    /// The TLS attacher's maps (`tls_reports`, `tls_reported`): kept open
    /// so that the TLS programs loaded after the maps were taken find them.
    _tls_maps: (MapData, MapData),
}

/// What `attach_tls` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsAttached {
    /// The files attached to, each once.
    pub files: Vec<PathBuf>,
    /// Uprobes attached, over all files.
    pub uprobes: usize,
    /// Files refused on the way (not regular, not the file mapped).
    pub refused: tls::Refused,
}

/// The two ring buffers: request events (the write-ahead log), and exec
/// events for discovery.
pub struct Rings {
    pub events: WalRing,
    pub execs: RingBuf<MapData>,
}

/// Per-program kernel statistics.
#[derive(Debug, Clone)]
pub struct ProgramStats {
    pub name: &'static str,
    /// bpf_stats: zero unless `kernel.bpf_stats_enabled=1`.
    pub run_time: Duration,
    pub run_count: u64,
    /// Instructions the verifier processed to accept the program (against
    /// its limit of 1,000,000); None before Linux 5.16, which does not say.
    pub verified_insns: Option<u32>,
}

/// How the probes were set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Loaded and attached by this process (and pinned if configured).
    Loaded,
    /// Found pinned by an earlier loader: opened, nothing loaded.
    Reopened,
}

/// The maps user space uses, however they were obtained: one list, from
/// which the struct, its collection by name (from a loaded object or from
/// pins) and its pinning are all made.
macro_rules! user_maps {
    ($($map:ident),* $(,)?) => {
        struct Maps {
            $($map: MapData,)*
        }

        impl Maps {
            /// Each map, by its name in the object.
            fn collect<E>(mut get: impl FnMut(&'static str) -> Result<MapData, E>) -> Result<Maps, E> {
                Ok(Maps { $($map: get(stringify!($map))?,)* })
            }

            /// (name, map) of each, in the list's order.
            fn named(&self) -> Vec<(&'static str, &MapData)> {
                vec![$((stringify!($map), &self.$map),)*]
            }
        }
    };
}

// `epoch` last: pinned last, it completes a set (pins::COMPLETE).
// (`tls_reports`, `tls_reported`: the TLS attacher's, pinned for it.)
user_maps!(events, execs, sel_pids, sel_ports, counters, tls_reports, tls_reported, epoch);

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> ProbeError {
    move |source| ProbeError::Map { map, source }
}

impl Probes {
    /// True if a complete pinned set for this configuration exists: a
    /// [`Probes::load`] now would open it, not load. (A pin directory that
    /// is not root's alone says no here; `load` then says why.)
    pub fn pinned_set_exists(probe: &ProbeSettings, discovery: &DiscoverySettings, tls: &TlsSettings, wakeup_len: u32) -> bool {
        probe.pins()
            && pins::open(&probe.pin_dir).ok().flatten().is_some_and(|dir| dir.is_complete(&pins::stamp(probe, discovery, tls, wakeup_len)))
    }

    /// Removes the pinned set for this configuration, if any (what a failed
    /// load step may have left complete but unseeded).
    pub fn remove_pinned_set(
        probe: &ProbeSettings,
        discovery: &DiscoverySettings,
        tls: &TlsSettings,
        wakeup_len: u32,
    ) -> Result<(), ProbeError> {
        if probe.pins() {
            if let Some(dir) = pins::open(&probe.pin_dir)? {
                dir.remove_set(&pins::stamp(probe, discovery, tls, wakeup_len))?;
            }
        }
        Ok(())
    }

    /// True if these probes are pinned (they outlive this process).
    pub fn pinned(&self) -> bool {
        self.set.is_some()
    }

    /// The pin set in use.
    pub fn pin_set(&self) -> Option<&Path> {
        self.set.as_deref()
    }

    /// How the TLS uprobes are attached, if their programs are loaded.
    pub fn tls_kind(&self) -> Option<crate::links::Kind> {
        self.tls
    }

    /// Opens the pinned set for this configuration if there is a complete
    /// one, or decides the backend (`probe.backend`), loads and attaches its
    /// programs (pinning them when `probe.pin_dir` is set); the kernel wakes
    /// the loader each time `wakeup_len` events' worth of bytes are waiting
    /// ([`crate::kernel::wakeup_bytes`]).
    pub fn load(
        probe: &ProbeSettings,
        discovery: &DiscoverySettings,
        tls: &TlsSettings,
        wakeup_len: u32,
    ) -> Result<(Probes, Rings, Origin), ProbeError> {
        let mut set = if probe.pins() {
            let dir = pins::prepare(&probe.pin_dir)?;
            let stamp = pins::stamp(probe, discovery, tls, wakeup_len);
            let set = dir.set_path(&stamp);
            dir.remove_others(Some(&stamp))?;
            if dir.is_complete(&stamp) {
                match Self::reopen(&set) {
                    Ok((backend, maps)) => {
                        tracing::info!(set = %set.display(), event = "pins_reopened", "probes found pinned: reading on where the last loader stopped");
                        let tls_pinned = crate::links::Kind::pinned_in(&set);
                        let (probes, rings) = Self::finish(None, Some(set), backend, maps, tls_pinned)?;
                        return Ok((probes, rings, Origin::Reopened));
                    }
                    Err(error) => {
                        tracing::warn!(set = %set.display(), %error, "pinned probes unusable: loading afresh");
                        dir.remove_set(&stamp)?;
                    }
                }
            } else if dir.has_set(&stamp) {
                tracing::warn!(set = %set.display(), "incomplete pin set: loading afresh");
                dir.remove_set(&stamp)?;
            }
            Some((dir, stamp))
        } else {
            None
        };
        let btf = Btf::from_sys_fs().map_err(|source| ProbeError::Btf { source })?;
        let backend = Chosen::decide(probe.backend, &btf)?;
        if backend == Chosen::Syscalls && set.is_some() && !aya::features().bpf_perf_link() {
            // Before Linux 5.15 a tracefs tracepoint is attached by a perf
            // event ioctl, which makes no link to pin.
            tracing::warn!(
                event = "pins_unsupported",
                "this kernel cannot pin tracepoint links (Linux 5.15+ needed): probes not pinned, capture stops while the loader restarts"
            );
            set = None;
        }
        let set = match set {
            Some((dir, stamp)) => Some(dir.create_set(&stamp)?),
            None => None,
        };
        let (probes, rings) = Self::attach_fresh(&btf, backend, probe, discovery, tls, wakeup_len, set)?;
        Ok((probes, rings, Origin::Loaded))
    }

    /// Loads `backend`'s object with this configuration baked in and
    /// attaches every program, pinned in `set` if given.
    pub fn attach_fresh(
        btf: &Btf,
        backend: Chosen,
        probe: &ProbeSettings,
        discovery: &DiscoverySettings,
        tls: &TlsSettings,
        wakeup_len: u32,
        set: Option<PathBuf>,
    ) -> Result<(Probes, Rings), ProbeError> {
        let (ebpf, maps) = Self::load_fresh(btf, backend, probe, discovery, tls, wakeup_len, set.as_deref())?;
        let pinned = set.is_some();
        let (mut probes, rings) = Self::finish(Some(ebpf), set, backend, maps, None)?;
        // Per-process and multi links need the attacher, which needs pins.
        probes.fresh_tls_kind = if pinned { crate::links::Kind::of_kernel(btf) } else { crate::links::Kind::Perf };
        Ok((probes, rings))
    }

    /// The maps of a pinned set, and the backend its programs are of.
    fn reopen(set: &Path) -> Result<(Chosen, Maps), String> {
        let backend = [Chosen::Socket, Chosen::Syscalls]
            .into_iter()
            .find(|b| b.programs().iter().all(|(name, _)| pins::prog(set, name).exists()))
            .ok_or("no backend's programs are all pinned")?;
        let maps = Maps::collect(|name| MapData::from_pin(pins::map(set, name)).map_err(|e| format!("map {name}: {e}")))?;
        Ok((backend, maps))
    }

    fn load_fresh(
        btf: &Btf,
        backend: Chosen,
        probe: &ProbeSettings,
        discovery: &DiscoverySettings,
        tls: &TlsSettings,
        wakeup_len: u32,
        set: Option<&Path>,
    ) -> Result<(Ebpf, Maps), ProbeError> {
        let tls_on = u8::from(tls.enabled);
        // Per-process links (the pid filter) where the kernel has them, a
        // subset of processes is selected, and an attacher will make them
        // (it needs the pins).
        let tls_kind = if set.is_some() { crate::links::Kind::of_kernel(btf) } else { crate::links::Kind::Perf };
        let tls_pid_links = u8::from(tls.enabled && tls_kind.per_process() && !discovery.selects_all());
        // The connection table: the syscall backend's, or (socket backend)
        // the TLS connections' alone, which needs none without TLS.
        let conn_table = if backend == Chosen::Socket && !tls.enabled { 1 } else { probe.max_connections };
        if probe.propagate && backend != Chosen::Socket {
            return Err(ProbeError::Propagation {
                why: "needs the socket backend (Linux 6.3+: socket-local storage from tracepoints, task-local storage from sk_msg programs); this one uses the syscalls backend".into(),
            });
        }
        if probe.carrier && backend != Chosen::Socket {
            return Err(ProbeError::Propagation {
                why: "probe.carrier needs the socket backend (Linux 6.3+: socket-local storage from tracepoints and sockops); this one uses the syscalls backend".into(),
            });
        }
        let propagate = u8::from(probe.propagate);
        let carrier = u8::from(probe.carrier);
        let tcp = crate::kernel_btf::TcpSeqOffsets::of_running_kernel();
        // Whether connections stay in the socket map after their first
        // request (bpf/propagate.h): tried on this kernel (sockmap.rs).
        let keep_alive = if probe.propagate {
            let (keep, why) = crate::sockmap::keep_alive(probe.propagate_keep_alive, tcp.write_seq != 0);
            if keep {
                tracing::info!(event = "propagation_mode", keep_alive = true, reason = %why, "connections stay in the socket map while their requests can be written: every request kept alive on one is written");
            } else {
                tracing::warn!(event = "propagation_mode", keep_alive = false, reason = %why, "each connection leaves the socket map within its first request's send: only that request is written (later ones counted as keep_alive_off)");
            }
            u8::from(keep)
        } else {
            0
        };
        let ring_bytes = probe.ring_buffer_mb << 20;
        let wakeup_bytes = crate::kernel::wakeup_bytes(wakeup_len, u64::from(ring_bytes));
        let select_all = u8::from(discovery.selects_all());
        let watch_exec = u8::from(!discovery.exe_names.is_empty());
        let exe_literals = crate::discovery::Discovery::new(discovery).kernel_literals();
        let select_ports = u8::from(!discovery.open_ports.is_empty());
        let read_env = u8::from(probe.read_process_env);
        let mut stream_ports = [0u16; crate::kernel::STREAM_PORTS];
        stream_ports.iter_mut().zip(probe.stream_ports()).for_each(|(slot, port)| *slot = *port);
        if tcp.copied_seq == 0 {
            tracing::warn!(
                event = "tcp_offsets_unknown",
                btf = crate::kernel_btf::VMLINUX_BTF,
                "struct tcp_sock's sequence numbers not found in the kernel's BTF: same-host requests are not joined into one trace"
            );
        }
        let mut ebpf = EbpfLoader::new()
            .btf(Some(btf))
            // The task- and socket-local storage maps (`active`, `conns`)
            // have no aya wrapper; only the kernel programs use them.
            .allow_unsupported_maps()
            .override_global("wakeup_bytes", &wakeup_bytes, true)
            .override_global("select_all", &select_all, true)
            .override_global("watch_exec", &watch_exec, true)
            .override_global("exe_literals", &exe_literals[..], true)
            .override_global("select_ports", &select_ports, true)
            .override_global("read_env", &read_env, true)
            .override_global("stream_ports", &stream_ports[..], true)
            .override_global("tls_on", &tls_on, true)
            .override_global("tls_pid_links", &tls_pid_links, true)
            .override_global("tcp_copied_seq_off", &tcp.copied_seq, true)
            .override_global("tcp_write_seq_off", &tcp.write_seq, true)
            .override_global("tcp_rack_mstamp_off", &tcp.rack_mstamp, true)
            .override_global("tcp_rack_end_seq_off", &tcp.rack_end_seq, true)
            .override_global("tcp_snd_nxt_off", &tcp.snd_nxt, true)
            .override_global("propagate", &propagate, true)
            .override_global("prop_keep_alive", &keep_alive, true)
            .override_global("carrier", &carrier, true)
            .map_max_entries("events", ring_bytes)
            // the connection table (bpf/conn.h), and the TLS bindings (bpf/tls.h)
            .map_max_entries("conn_table", conn_table)
            .map_max_entries("tls_socks", probe.max_connections)
            // the connections that may carry a traceparent (bpf/propagate.bpf.c)
            .map_max_entries("prop_socks", probe.max_connections)
            .load(backend.object(probe.propagate || probe.carrier, btf))
            .map_err(|source| ProbeError::Load { source })?;

        // Maps first: selection must be in place before data programs run.
        for port in &discovery.open_ports {
            let map = ebpf.map_mut("sel_ports").ok_or(ProbeError::MissingMap { map: "sel_ports" })?;
            let mut sel_ports: HashMap<&mut MapData, u16, u8> = HashMap::try_from(map).map_err(map_err("sel_ports"))?;
            sel_ports.insert(port.get(), 1, 0).map_err(map_err("sel_ports"))?;
        }
        let epoch = random_epoch();
        {
            let map = ebpf.map_mut("epoch").ok_or(ProbeError::MissingMap { map: "epoch" })?;
            let mut slot: Array<&mut MapData, u64> = Array::try_from(map).map_err(map_err("epoch"))?;
            slot.set(0, epoch, 0).map_err(map_err("epoch"))?;
        }
        let mut take = |map: &'static str| -> Result<MapData, ProbeError> {
            match ebpf.take_map(map).ok_or(ProbeError::MissingMap { map })? {
                Map::RingBuf(d) | Map::HashMap(d) | Map::LruHashMap(d) | Map::PerCpuArray(d) | Map::Array(d) => Ok(d),
                _ => Err(ProbeError::MissingMap { map }),
            }
        };
        let maps = Maps::collect(&mut take)?;

        for (program, hook) in backend.programs() {
            attach(&mut ebpf, btf, program, *hook, set)?;
        }
        if probe.propagate || probe.carrier {
            attach_propagation(&mut ebpf, set, probe.propagate)?;
        }
        if let Some(set) = set {
            // In the list's order: the epoch last, and a set with its epoch
            // pinned is complete.
            for (name, map) in maps.named() {
                map.pin(pins::map(set, name)).map_err(pin_err(format!("map {name}")))?;
            }
            tracing::info!(set = %set.display(), event = "pinned", "probes pinned: capture outlives this loader");
        }
        Ok((ebpf, maps))
    }

    fn finish(
        ebpf: Option<Ebpf>,
        set: Option<PathBuf>,
        backend: Chosen,
        maps: Maps,
        tls: Option<crate::links::Kind>,
    ) -> Result<(Probes, Rings), ProbeError> {
        let events = WalRing::new(maps.events).map_err(|source| ProbeError::Ring { source })?;
        let execs = RingBuf::try_from(Map::RingBuf(maps.execs)).map_err(map_err("execs"))?;
        let sel_pids = HashMap::try_from(Map::HashMap(maps.sel_pids)).map_err(map_err("sel_pids"))?;
        let sel_ports = HashMap::try_from(Map::HashMap(maps.sel_ports)).map_err(map_err("sel_ports"))?;
        let counters = PerCpuArray::try_from(Map::PerCpuArray(maps.counters)).map_err(map_err("counters"))?;
        let slot: Array<MapData, u64> = Array::try_from(Map::Array(maps.epoch)).map_err(map_err("epoch"))?;
        let epoch = slot.get(&0, 0).map_err(map_err("epoch"))?;
        // The files a loader before this one attached to: their links' pin
        // names carry device and inode (`link_tls_DEV_INODE_I`).
        let tls_files = set.as_deref().map(pinned_tls_files).unwrap_or_default();
        let probes = Probes {
            ebpf,
            set,
            backend,
            sel_pids,
            _sel_ports: sel_ports,
            counters,
            epoch,
            tls,
            tls_files,
            tls_pinned: Vec::new(),
            exes_looked: tls::Looked::default(),
            overseer: crate::deadline::Overseer::new(),
            fresh_tls_kind: crate::links::Kind::Perf,
            _tls_maps: (maps.tls_reports, maps.tls_reported),
        };
        Ok((probes, Rings { events, execs }))
    }

    /// A map of the probes' (the selection), to try what the kernel lets
    /// a process do with it ([`crate::privileges::map_access_needs_cap_bpf`]).
    pub fn map_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use aya::maps::IterableMap;
        use std::os::fd::AsFd;
        IterableMap::map(&self.sel_pids).fd().as_fd()
    }

    /// The capture backend in use.
    pub fn backend(&self) -> Chosen {
        self.backend
    }

    /// The capture epoch (see `ipc_schema::RawBatch::epoch`).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Adds a process to the selection, for `why`.
    pub fn select_pid(&mut self, pid: u32, why: Selected) -> Result<(), ProbeError> {
        // An explicit selection is never downgraded to a by-name one.
        if why == Selected::ByExe && self.sel_pids.get(&pid, 0).is_ok_and(|v| v == Selected::Explicit as u8) {
            return Ok(());
        }
        self.sel_pids.insert(pid, why as u8, 0).map_err(|source| ProbeError::Map { map: "sel_pids", source })
    }

    /// Drops a process selected only by its executable name (an exec event
    /// for a name that does not match; it may have been selected by an
    /// earlier exec event the loader read after the kernel handled this one).
    pub fn deselect_by_exe(&mut self, pid: u32) {
        if self.sel_pids.get(&pid, 0).is_ok_and(|v| v == Selected::ByExe as u8) {
            let _ = self.sel_pids.remove(&pid);
        }
    }

    /// The kernel counters, summed over CPUs, by index.
    pub fn counters(&self) -> [u64; COUNTERS.len()] {
        let mut out = [0u64; COUNTERS.len()];
        for (i, v) in out.iter_mut().enumerate() {
            if let Ok(values) = self.counters.get(&(i as u32), 0) {
                *v = values.iter().copied().fold(0u64, u64::wrapping_add);
            }
        }
        out
    }

    /// The TLS programs (`tls.enabled`), each loaded as this kernel's kind
    /// of link needs (`links`). With pins, they are pinned with the
    /// `tls_mmap` tracepoint's link (what processes map: the attacher's
    /// reports), and the TLS attacher attaches the uprobes, at start and as
    /// processes start (`attacher`): nothing is attached here. Without pins
    /// (no attacher), the uprobes go now, from this process, to every
    /// OpenSSL file and Go executable found now (`tls::find`: the loader's
    /// directories, `tls.libraries`, what the processes `pids` map), as
    /// perf events. Call it while privileged, after the selection is
    /// seeded. Probes reopened from pins keep what the loader that pinned
    /// them loaded.
    pub fn attach_tls(&mut self, settings: &TlsSettings, pids: Vec<u32>) -> Result<TlsAttached, ProbeError> {
        let mut done = TlsAttached::default();
        if !settings.enabled {
            return Ok(done);
        }
        let Some(ebpf) = self.ebpf.as_mut() else {
            tracing::info!(event = "tls_pinned", kind = self.tls.map(|k| k.name()), "TLS programs: those of the pinned set");
            return Ok(done);
        };
        let kind = self.fresh_tls_kind;
        for &(name, attach_type) in kind.programs() {
            let prog = ebpf.program_mut(name).ok_or(ProbeError::MissingProgram { program: name })?;
            let prog: &mut UProbe =
                prog.try_into().map_err(|source| ProbeError::Program { program: name, tracepoint: "uprobe", source })?;
            let loaded = match attach_type {
                Some(t) => prog.load_with_attach_type(t),
                None => prog.load(),
            };
            loaded.map_err(|source| match source {
                aya::programs::ProgramError::LoadError { verifier_log, .. } => {
                    ProbeError::Verifier { program: name, tracepoint: "uprobe", log: verifier_log.to_string() }
                }
                source => ProbeError::Program { program: name, tracepoint: "uprobe", source },
            })?;
            if let Some(set) = &self.set {
                prog.pin(pins::prog(set, name)).map_err(pin_err(format!("program {name}")))?;
            }
        }
        self.tls = Some(kind);
        if let Some(set) = self.set.clone() {
            // The files named here are the TLS attacher's to open and
            // inspect; one that is not there is a configuration error,
            // said now (the loader does not start) rather than a warning
            // of the attacher's. Only the name is looked up, not followed.
            for path in &settings.libraries {
                if std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
                    return Err(ProbeError::TlsMissing { path: path.clone() });
                }
            }
            attach_mmap_hook(ebpf, &set)?;
            tracing::info!(event = "tls_programs", kind = kind.name(), "TLS programs loaded: the TLS attacher attaches them");
            return Ok(done);
        }
        let (targets, unusable) =
            tls::find(&settings.libraries, Path::new("/"), Path::new("/proc"), pids, &self.exes_looked, &mut self.overseer);
        if let Some(e) = unusable.into_iter().next() {
            return Err(match e {
                tls::Unopened::File(runtime_kit::files::FileError::Open { path, source })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    ProbeError::TlsMissing { path }
                }
                source => ProbeError::TlsUnusable { source },
            });
        }
        done.refused = targets.refused;
        for target in targets.files {
            self.attach_tls_file(&target, &mut done)?;
        }
        Ok(done)
    }

    /// The TLS program `name`: this process's, or reopened from the pin set.
    fn tls_program(&mut self, name: &'static str) -> Result<&mut UProbe, ProbeError> {
        if let Some(ebpf) = self.ebpf.as_mut() {
            return ebpf
                .program_mut(name)
                .ok_or(ProbeError::MissingProgram { program: name })?
                .try_into()
                .map_err(|source| ProbeError::Program { program: name, tracepoint: "uprobe", source });
        }
        let Some(set) = self.set.as_ref() else { return Err(ProbeError::MissingProgram { program: name }) };
        let at = match self.tls_pinned.iter().position(|(n, _)| *n == name) {
            Some(at) => at,
            None => {
                let kind = if name == "tls_call_exit" { ProbeKind::Return } else { ProbeKind::Entry };
                let prog = UProbe::from_pin(pins::prog(set, name), kind).map_err(|source| ProbeError::Program {
                    program: name,
                    tracepoint: "uprobe",
                    source,
                })?;
                self.tls_pinned.push((name, prog));
                self.tls_pinned.len() - 1
            }
        };
        Ok(&mut self.tls_pinned[at].1)
    }

    /// Attaches every TLS program to `target`'s functions, unless the file
    /// was looked at already. A configured file that is not OpenSSL or
    /// cannot be attached is an error; a found one is skipped (not OpenSSL)
    /// or said loudly (attach refused) and left. The functions are found
    /// in the open file (`tls::dynamic_symbols`) and the uprobes given as
    /// file offsets on `/proc/self/fd/N`: nothing is opened by name.
    fn attach_tls_file(&mut self, target: &tls::Target, done: &mut TlsAttached) -> Result<(), ProbeError> {
        let path = &target.path;
        let file = target.id;
        if !self.tls_files.insert(file) {
            return Ok(());
        }
        if let Some(go) = &target.go {
            return self.attach_go_file(target, go, done);
        }
        let offsets = &target.offsets;
        if let Some(up) = tls::PROGRAMS.iter().zip(offsets).find_map(|(up, o)| (up.required && o.is_none()).then_some(up)) {
            // not OpenSSL (NSS's libssl3.so), or not an ELF object at all
            if target.configured {
                return Err(ProbeError::TlsNotOpenssl { path: path.clone(), symbol: up.symbol });
            }
            tracing::debug!(path = ?path, "not an OpenSSL library: skipped");
            return Ok(());
        }
        let through = runtime_kit::files::fd_path(target.file.as_fd());
        let mut attached = 0;
        // the pin set, apart from `self` (a program borrows it below)
        let set = self.set.clone();
        for (i, (up, &offset)) in tls::PROGRAMS.iter().zip(offsets).enumerate() {
            // OpenSSL 1.1.0 has no `_ex` functions
            let Some(offset) = offset else { continue };
            let program = up.program;
            let prog = self.tls_program(program)?;
            let link = match prog.attach(UProbeAttachLocation::AbsoluteOffset(offset), &through, UProbeScope::AllProcesses) {
                Ok(link) => link,
                Err(source) if target.configured => {
                    return Err(ProbeError::TlsAttach { program, symbol: up.symbol, path: path.clone(), source: Box::new(source) })
                }
                Err(source) => {
                    // A file found by the search: HTTPS goes untraced
                    // through it, said loudly, and the loader goes on.
                    // (Linux 6.18 refuses a uprobe perf event to
                    // CAP_BPF + CAP_PERFMON without CAP_SYS_ADMIN.)
                    let error = ProbeError::TlsAttach { program, symbol: up.symbol, path: path.clone(), source: Box::new(source) };
                    tracing::warn!(
                        event = "tls_attach_failed",
                        path = ?path,
                        error = %error_chain(&error),
                        "TLS uprobes not attached: HTTPS through this file is not traced (uprobes may need CAP_SYS_ADMIN at start on this kernel; tls.enabled = false silences this)"
                    );
                    break;
                }
            };
            attached += 1;
            if let Some(set) = &set {
                let link = prog.take_link(link).map_err(|source| ProbeError::Program { program, tracepoint: "uprobe", source })?;
                let link = FdLink::try_from(link).map_err(|source| ProbeError::Link { program, tracepoint: "uprobe", source })?;
                link.pin(pins::link_tls(set, file, i)).map_err(pin_err(format!("link {program} {}", up.symbol)))?;
            }
        }
        if attached > 0 {
            tracing::info!(event = "tls_attached", path = ?path, uprobes = attached, "TLS uprobes attached");
            done.uprobes += attached;
            done.files.push(path.clone());
        }
        Ok(())
    }

    /// Attaches the Go TLS programs (`bpf/go_tls.h`) to a Go executable:
    /// Read's entry, each of its returns, Write's entry, at the file
    /// offsets `go` gives. A refusal by the kernel is said loudly, the
    /// uprobes attached before it are detached with the program's links
    /// when the loader stops (a Read entry without all its returns only
    /// leaves records for the LRU), and the loader goes on.
    fn attach_go_file(&mut self, target: &tls::Target, go: &crate::gobin::GoTls, done: &mut TlsAttached) -> Result<(), ProbeError> {
        let path = &target.path;
        let through = runtime_kit::files::fd_path(target.file.as_fd());
        // Returns before the entry: a Read entered never misses its return.
        let mut at: Vec<(&'static str, u64)> = go.read_returns.iter().map(|&o| (tls::GO_READ_EXIT, o)).collect();
        at.push((tls::GO_READ_ENTER, go.read));
        at.push((tls::GO_WRITE_ENTER, go.write));
        let set = self.set.clone();
        let mut attached = 0;
        for (i, (program, offset)) in at.into_iter().enumerate() {
            let prog = self.tls_program(program)?;
            let link = match prog.attach(UProbeAttachLocation::AbsoluteOffset(offset), &through, UProbeScope::AllProcesses) {
                Ok(link) => link,
                Err(source) => {
                    let error =
                        ProbeError::TlsAttach { program, symbol: "crypto/tls.(*Conn)", path: path.clone(), source: Box::new(source) };
                    tracing::warn!(event = "go_tls_attach_failed", path = ?path, error = %error_chain(&error), "Go TLS uprobes not attached: HTTPS of this executable is not traced");
                    break;
                }
            };
            attached += 1;
            if let Some(set) = &set {
                let link = prog.take_link(link).map_err(|source| ProbeError::Program { program, tracepoint: "uprobe", source })?;
                let link = FdLink::try_from(link).map_err(|source| ProbeError::Link { program, tracepoint: "uprobe", source })?;
                link.pin(pins::link_tls(set, target.id, i)).map_err(pin_err(format!("link {program} of {}", path.display())))?;
            }
        }
        if attached > 0 {
            tracing::info!(
                event = "go_tls_attached",
                path = ?path,
                go = %go.version,
                stripped = !go.symbols,
                returns = go.read_returns.len(),
                uprobes = attached,
                "Go TLS uprobes attached"
            );
            done.uprobes += attached;
            done.files.push(path.clone());
            done.refused.go_attached += 1;
        }
        Ok(())
    }

    /// bpf_stats of every program.
    pub fn program_stats(&self) -> Vec<ProgramStats> {
        let tls: Vec<&'static str> = self.tls.map(|k| k.programs().iter().map(|(n, _)| *n).collect()).unwrap_or_default();
        self.backend
            .programs()
            .iter()
            .map(|&(name, _)| name)
            .chain(tls)
            // (propagation's, when its object is loaded: absent ones are skipped)
            .chain(crate::backend::PROPAGATION_PROGRAMS)
            .filter_map(|name| {
                let info = match (&self.ebpf, &self.set) {
                    (Some(ebpf), _) => ebpf.program(name)?.info().ok()?,
                    (None, Some(set)) => ProgramInfo::from_pin(pins::prog(set, name)).ok()?,
                    (None, None) => return None,
                };
                Some(ProgramStats {
                    name,
                    run_time: info.run_time(),
                    run_count: info.run_count(),
                    verified_insns: info.verified_instruction_count(),
                })
            })
            .collect()
    }
}

/// An error and its causes on one line, for a log field.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Attaches `tls_mmap` (bpf/tls_files.bpf.c) to the `syscalls/sys_enter_mmap`
/// tracepoint (tracefs, mounted if need be), pinned in `set`: which libssl
/// files processes map, for the TLS attacher. Without it (no tracefs, no
/// syscall tracepoints) files mapped after start are found only through a
/// process's exec or selection, said once.
fn attach_mmap_hook(ebpf: &mut Ebpf, set: &Path) -> Result<(), ProbeError> {
    const PROGRAM: &str = "tls_mmap";
    const TRACEPOINT: &str = "sys_enter_mmap";
    if let Err(error) = crate::backend::ensure_tracefs() {
        tracing::warn!(event = "tls_mmap_unavailable", %error, "no tracefs: libssl files mapped after start are found only at a process's exec or selection");
        return Ok(());
    }
    let prog = ebpf.program_mut(PROGRAM).ok_or(ProbeError::MissingProgram { program: PROGRAM })?;
    let err = |source| ProbeError::Program { program: PROGRAM, tracepoint: TRACEPOINT, source };
    let prog: &mut TracePoint = prog.try_into().map_err(err)?;
    prog.load().map_err(|source| match source {
        aya::programs::ProgramError::LoadError { verifier_log, .. } => {
            ProbeError::Verifier { program: PROGRAM, tracepoint: TRACEPOINT, log: verifier_log.to_string() }
        }
        source => err(source),
    })?;
    let link = match prog.attach("syscalls", TRACEPOINT) {
        Ok(link) => link,
        Err(error) => {
            tracing::warn!(event = "tls_mmap_unavailable", error = %error_chain(&error), "libssl files mapped after start are found only at a process's exec or selection");
            return Ok(());
        }
    };
    let link = prog.take_link(link).map_err(err)?;
    let link = FdLink::try_from(link).map_err(|source| ProbeError::Link { program: PROGRAM, tracepoint: TRACEPOINT, source })?;
    link.pin(pins::link(set, PROGRAM, Some(TRACEPOINT))).map_err(pin_err(format!("link {PROGRAM}")))?;
    prog.pin(pins::prog(set, PROGRAM)).map_err(pin_err(format!("program {PROGRAM}")))?;
    Ok(())
}

/// The files (device, inode) whose TLS links are pinned in `set`
/// (`link_tls_DEV_INODE_I`).
fn pinned_tls_files(set: &Path) -> BTreeSet<(u64, u64)> {
    let Ok(entries) = std::fs::read_dir(set) else { return BTreeSet::new() };
    entries.flatten().filter_map(|e| pins::tls_file_of(&e.file_name().into_string().ok()?)).collect()
}

fn pin_err(what: String) -> impl Fn(aya::pin::PinError) -> ProbeError {
    move |source| ProbeError::Pin { what: what.clone(), source }
}

/// Loads `program` and attaches it to `hook`; with a pin `set`, pins the
/// program and its links (one per tracepoint) there.
/// The cgroup v2 hierarchy's root (the first `cgroup2` mount), where the
/// propagation's sockops program sees every connection of the host.
fn cgroup2_root() -> Result<std::fs::File, ProbeError> {
    let why = |why: String| ProbeError::Propagation { why };
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| why(format!("cannot read /proc/self/mountinfo: {e}")))?;
    // "36 25 0:31 / /sys/fs/cgroup rw,... - cgroup2 cgroup2 rw,..."
    let root = info
        .lines()
        .filter_map(|l| l.split_once(" - "))
        .find(|(mount, fs)| fs.starts_with("cgroup2 ") && mount.split(' ').nth(3) == Some("/"))
        .and_then(|(mount, _)| mount.split(' ').nth(4))
        .ok_or_else(|| why("no cgroup v2 hierarchy is mounted (the sockops program attaches to its root)".into()))?;
    let root = root.replace("\\040", " ");
    std::fs::File::open(&root).map_err(|e| why(format!("cannot open the cgroup v2 root {root}: {e}")))
}

/// Attaches trace context propagation (`probe.propagate`, bpf/propagate.h):
/// the sk_msg program on the `prop_socks` map, then the sockops program on
/// the root cgroup (it claims traced processes' connections for the map).
/// The map holds the sk_msg program, the sockops program holds the map: a
/// pinned sockops link keeps both after this process.
/// The sockops program on the root cgroup, and (`msg`: probe.propagate) the
/// sk_msg program on the socket map; probe.carrier needs only the former.
fn attach_propagation(ebpf: &mut Ebpf, set: Option<&Path>, msg: bool) -> Result<(), ProbeError> {
    let cgroup = cgroup2_root()?;
    let socks = {
        let map = ebpf.map("prop_socks").ok_or(ProbeError::MissingMap { map: "prop_socks" })?;
        let socks: SockHash<&MapData, u64> = SockHash::try_from(map).map_err(map_err("prop_socks"))?;
        socks.fd().try_clone().map_err(|e| ProbeError::Propagation { why: format!("prop_socks: {e}") })?
    };
    let err = |program: &'static str, tracepoint: &'static str| move |source| ProbeError::Program { program, tracepoint, source };
    let verifier = |program: &'static str, tracepoint: &'static str| {
        move |source| match source {
            aya::programs::ProgramError::LoadError { verifier_log, .. } => {
                ProbeError::Verifier { program, tracepoint, log: verifier_log.to_string() }
            }
            source => ProbeError::Program { program, tracepoint, source },
        }
    };
    let [msg_prog, ops] = crate::backend::PROPAGATION_PROGRAMS;
    if msg {
        let msg = msg_prog;
        let map_target = "sockhash prop_socks";
        let prog: &mut SkMsg =
            ebpf.program_mut(msg).ok_or(ProbeError::MissingProgram { program: msg })?.try_into().map_err(err(msg, map_target))?;
        prog.load().map_err(verifier(msg, map_target))?;
        let link = prog.attach(&socks).map_err(err(msg, map_target))?;
        if let Some(set) = set {
            // Attached to the map, not by a link to pin: it stays as long as
            // user space holds the map (the kernel releases a socket map's
            // programs with its last file or pin, whatever programs use it), so
            // the map is pinned, and the attachment must not be undone when
            // this process's handle on it goes.
            std::mem::forget(prog.take_link(link).map_err(err(msg, map_target))?);
            let map = ebpf.map("prop_socks").ok_or(ProbeError::MissingMap { map: "prop_socks" })?;
            let data = match map {
                Map::SockHash(d) => d,
                _ => return Err(ProbeError::MissingMap { map: "prop_socks" }),
            };
            data.pin(pins::map(set, "prop_socks")).map_err(pin_err("map prop_socks".to_owned()))?;
        }
    }
    let cgroup_target = "the root cgroup's sock_ops";
    let prog: &mut SockOps =
        ebpf.program_mut(ops).ok_or(ProbeError::MissingProgram { program: ops })?.try_into().map_err(err(ops, cgroup_target))?;
    prog.load().map_err(|e| match verifier(ops, cgroup_target)(e) {
        // (sockops programs may read the current thread from Linux 6.10)
        ProbeError::Verifier { log, .. } if !msg && log.contains("get_current_pid_tgid") => ProbeError::Propagation {
            why: "probe.carrier needs Linux 6.10+: sockops programs may not read the sending thread before".into(),
        },
        e => e,
    })?;
    // A BPF link (Linux 5.7+; the socket backend needs 6.3): links take no
    // mode and are always one of many, so other sockops users of the host
    // (Cilium...) keep theirs.
    let link = prog.attach(&cgroup, CgroupAttachMode::Single).map_err(err(ops, cgroup_target))?;
    if let Some(set) = set {
        prog.pin(pins::prog(set, ops)).map_err(pin_err(format!("program {ops}")))?;
        let link = FdLink::try_from(prog.take_link(link).map_err(err(ops, cgroup_target))?).map_err(|source| ProbeError::Link {
            program: ops,
            tracepoint: cgroup_target,
            source,
        })?;
        link.pin(pins::link(set, ops, None)).map_err(pin_err(format!("link {ops}")))?;
    }
    if msg {
        tracing::info!(
            event = "propagation_attached",
            "traceparent propagation on: traced processes' HTTP/1 requests carry their client span's context"
        );
    } else {
        tracing::info!(
            event = "carrier_attached",
            "trace context carrier on: traced processes' requests carry their context in a TCP header option (kind 25)"
        );
    }
    Ok(())
}

fn attach(ebpf: &mut Ebpf, btf: &Btf, program: &'static str, hook: Hook, set: Option<&Path>) -> Result<(), ProbeError> {
    let prog = ebpf.program_mut(program).ok_or(ProbeError::MissingProgram { program })?;
    let tracepoint = match hook {
        Hook::Btf(tp) => tp,
        Hook::Syscalls(tps) => tps.first().copied().unwrap_or_default(),
    };
    let load_error = |source| match source {
        aya::programs::ProgramError::LoadError { verifier_log, .. } => {
            ProbeError::Verifier { program, tracepoint, log: verifier_log.to_string() }
        }
        source => ProbeError::Program { program, tracepoint, source },
    };
    let link_err = |tracepoint| move |source| ProbeError::Program { program, tracepoint, source };
    match hook {
        Hook::Btf(tracepoint) => {
            let prog: &mut BtfTracePoint = prog.try_into().map_err(link_err(tracepoint))?;
            prog.load(tracepoint, btf).map_err(load_error)?;
            let link = prog.attach().map_err(link_err(tracepoint))?;
            if let Some(set) = set {
                prog.pin(pins::prog(set, program)).map_err(pin_err(format!("program {program}")))?;
                let link = FdLink::from(prog.take_link(link).map_err(link_err(tracepoint))?);
                link.pin(pins::link(set, program, None)).map_err(pin_err(format!("link {program}")))?;
            }
            tracing::debug!(program, tracepoint, "attached");
        }
        Hook::Syscalls(tracepoints) => {
            let prog: &mut TracePoint = prog.try_into().map_err(link_err(tracepoint))?;
            prog.load().map_err(load_error)?;
            for &tracepoint in tracepoints {
                let link = prog.attach("syscalls", tracepoint).map_err(link_err(tracepoint))?;
                if let Some(set) = set {
                    let link = prog.take_link(link).map_err(link_err(tracepoint))?;
                    // `load` checked that this kernel makes BPF links for
                    // perf events (5.15+) before asking for pins.
                    let link = FdLink::try_from(link).map_err(|source| ProbeError::Link { program, tracepoint, source })?;
                    link.pin(pins::link(set, program, Some(tracepoint))).map_err(pin_err(format!("link {program} {tracepoint}")))?;
                }
                tracing::debug!(program, tracepoint, "attached");
            }
            if let Some(set) = set {
                prog.pin(pins::prog(set, program)).map_err(pin_err(format!("program {program}")))?;
            }
        }
    }
    Ok(())
}
