//! Loading and attaching the eBPF programs of the chosen capture backend
//! (`backend`), and the maps the loader uses.
//!
//! Every program is a BTF tracepoint (`tp_btf`) or, for the syscall backend,
//! a tracefs tracepoint: no kprobes, no fentry. The kernel needs BTF and the
//! ring buffer (5.8).

use std::time::Duration;

use aya::maps::{HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use ringtail_config::{DiscoverySettings, ProbeSettings};

use crate::backend::{Chosen, Hook};
use crate::kernel::contract::{SEL_EXE, SEL_EXPLICIT};
use crate::kernel::COUNTERS;

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
    #[error("map {map} has an unexpected type")]
    Map {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
}

/// The loaded, attached programs and the maps user space updates.
pub struct Probes {
    ebpf: Ebpf,
    backend: Chosen,
    sel_pids: HashMap<MapData, u32, u8>,
    /// Kept so the map lives as long as the programs that read it.
    _sel_ports: HashMap<MapData, u16, u8>,
    counters: PerCpuArray<MapData, u64>,
}

/// Why a process is selected (the `sel_pids` value, SEL_* in bpf/ringtail.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Selected {
    /// A configured pid, a listener on a configured port, or a child of one:
    /// kept across exec.
    Explicit = SEL_EXPLICIT,
    /// The executable name matched: re-decided at every exec.
    ByExe = SEL_EXE,
}

/// The two ring buffers: request events, and exec events for discovery.
pub struct Rings {
    pub events: RingBuf<MapData>,
    pub execs: RingBuf<MapData>,
}

/// Per-program kernel statistics (bpf_stats; zero unless
/// `kernel.bpf_stats_enabled=1`).
#[derive(Debug, Clone)]
pub struct ProgramStats {
    pub name: &'static str,
    pub run_time: Duration,
    pub run_count: u64,
}

impl Probes {
    /// Loads the object with this configuration baked in and attaches every
    /// program; the kernel wakes the loader every `wakeup_len` events.
    pub fn load(
        btf: &Btf,
        backend: Chosen,
        probe: &ProbeSettings,
        discovery: &DiscoverySettings,
        wakeup_len: u32,
    ) -> Result<(Probes, Rings), ProbeError> {
        let wakeup_len = u64::from(wakeup_len);
        let select_all = u8::from(discovery.selects_all());
        let watch_exec = u8::from(!discovery.exe_names.is_empty());
        let ring_bytes = probe.ring_buffer_mb << 20;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(btf))
            // The task- and socket-local storage maps (`active`, `conns`)
            // have no aya wrapper; only the kernel programs use them.
            .allow_unsupported_maps()
            .override_global("wakeup_len", &wakeup_len, true)
            .override_global("select_all", &select_all, true)
            .override_global("watch_exec", &watch_exec, true)
            .map_max_entries("events", ring_bytes)
            // the syscall backend's connection table (bpf/conn.h)
            .map_max_entries("conn_table", probe.max_connections)
            .load(backend.object())
            .map_err(|source| ProbeError::Load { source })?;

        // Maps first: selection must be in place before data programs run.
        let take = |ebpf: &mut Ebpf, map: &'static str| ebpf.take_map(map).ok_or(ProbeError::MissingMap { map });
        let events = RingBuf::try_from(take(&mut ebpf, "events")?).map_err(|source| ProbeError::Map { map: "events", source })?;
        let execs = RingBuf::try_from(take(&mut ebpf, "execs")?).map_err(|source| ProbeError::Map { map: "execs", source })?;
        let sel_pids = HashMap::try_from(take(&mut ebpf, "sel_pids")?).map_err(|source| ProbeError::Map { map: "sel_pids", source })?;
        let mut sel_ports: HashMap<MapData, u16, u8> =
            HashMap::try_from(take(&mut ebpf, "sel_ports")?).map_err(|source| ProbeError::Map { map: "sel_ports", source })?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, "counters")?).map_err(|source| ProbeError::Map { map: "counters", source })?;
        for port in &discovery.open_ports {
            sel_ports.insert(port.get(), 1, 0).map_err(|source| ProbeError::Map { map: "sel_ports", source })?;
        }

        for (program, hook) in backend.programs() {
            attach(&mut ebpf, btf, program, *hook)?;
        }
        Ok((Probes { ebpf, backend, sel_pids, _sel_ports: sel_ports, counters }, Rings { events, execs }))
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

    /// bpf_stats of every program.
    pub fn program_stats(&self) -> Vec<ProgramStats> {
        self.backend
            .programs()
            .iter()
            .filter_map(|&(name, _)| {
                let info = self.ebpf.program(name)?.info().ok()?;
                Some(ProgramStats { name, run_time: info.run_time(), run_count: info.run_count() })
            })
            .collect()
    }
}

/// Loads `program` and attaches it to `hook`.
fn attach(ebpf: &mut Ebpf, btf: &Btf, program: &'static str, hook: Hook) -> Result<(), ProbeError> {
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
    match hook {
        Hook::Btf(tracepoint) => {
            let prog: &mut BtfTracePoint = prog.try_into().map_err(|source| ProbeError::Program { program, tracepoint, source })?;
            prog.load(tracepoint, btf).map_err(load_error)?;
            prog.attach().map_err(|source| ProbeError::Program { program, tracepoint, source })?;
            tracing::debug!(program, tracepoint, "attached");
        }
        Hook::Syscalls(tracepoints) => {
            let prog: &mut TracePoint = prog.try_into().map_err(|source| ProbeError::Program { program, tracepoint, source })?;
            prog.load().map_err(load_error)?;
            for &tracepoint in tracepoints {
                prog.attach("syscalls", tracepoint).map_err(|source| ProbeError::Program { program, tracepoint, source })?;
                tracing::debug!(program, tracepoint, "attached");
            }
        }
    }
    Ok(())
}
