//! Pins: the probes, their maps and the ring buffer outlive the loader.
//!
//! A loader that loads the programs pins them under `probe.pin_dir` in a
//! directory named by a stamp: a hash of the eBPF objects, the kernel
//! contract (`bpf/ringtail.h`) and every setting baked into the programs.
//! A restarted loader with the same stamp opens those pins instead of
//! loading and attaching (no BTF parse, no capture gap: the kernel kept
//! writing into the ring meanwhile). A set with another stamp (an older
//! ringtail, other settings) or an incomplete one is removed before a fresh
//! load: removing a link's last pin detaches its program.
//!
//! # Layout
//! `<pin_dir>/<stamp>/`: `map_<name>` for the maps user space uses,
//! `prog_<name>` for every program (statistics), `link_<name>` for its
//! attachment, and `map_epoch` (the capture epoch) pinned last: a set
//! without it is incomplete.

use std::path::{Path, PathBuf};

use ringtail_config::{DiscoverySettings, ProbeSettings, TlsSettings};

use crate::kernel::{CONTRACT_HEADER, SOCKET_OBJECT, SYSCALLS_OBJECT};

/// Why pins could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("cannot mount a bpffs at {dir} (probe.pin_dir; needs CAP_SYS_ADMIN, or mount it beforehand: mount -t bpf bpf /sys/fs/bpf)")]
    Mount {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{dir} (probe.pin_dir) is not on a bpffs")]
    NotBpffs { dir: PathBuf },
    #[error("cannot prepare the pin directory {dir} (probe.pin_dir)")]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The bpffs magic number (statfs f_type).
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// The name of the entry that completes a set (pinned last).
pub const COMPLETE: &str = "map_epoch";

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The stamp of a set loaded from this object with these settings.
pub fn stamp(probe: &ProbeSettings, discovery: &DiscoverySettings, tls: &TlsSettings, wakeup_len: u32) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325;
    h = fnv1a(h, SOCKET_OBJECT);
    h = fnv1a(h, SYSCALLS_OBJECT);
    h = fnv1a(h, CONTRACT_HEADER.as_bytes());
    // The whole selection, not only what is baked in: a reopened set keeps
    // the processes its maps selected, which other settings must not inherit.
    let baked = format!(
        "backend={} wakeup_len={wakeup_len} ring_mb={} conns={} read_env={} discovery={discovery:?} tls={tls:?}",
        probe.backend.name(),
        probe.ring_buffer_mb,
        probe.max_connections,
        probe.read_process_env
    );
    h = fnv1a(h, baked.as_bytes());
    format!("{h:016x}")
}

fn is_bpffs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: c is a valid C string; st is a writable statfs.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0) && st.f_type as i64 == BPF_FS_MAGIC
}

/// Makes sure `pin_dir`'s parent is a bpffs (mounting one at
/// /sys/fs/bpf if nothing is mounted there), and creates `pin_dir`.
pub fn prepare(pin_dir: &Path) -> Result<(), PinError> {
    let parent = pin_dir.parent().unwrap_or(pin_dir);
    if !is_bpffs(parent) {
        let root = Path::new("/sys/fs/bpf");
        if parent.starts_with(root) && !is_bpffs(root) {
            let target = std::ffi::CString::new("/sys/fs/bpf").unwrap_or_default();
            let fstype = std::ffi::CString::new("bpf").unwrap_or_default();
            // SAFETY: valid C strings; no data argument.
            let rc = unsafe { libc::mount(fstype.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
            if rc != 0 {
                return Err(PinError::Mount { dir: root.into(), source: std::io::Error::last_os_error() });
            }
            tracing::info!(event = "bpffs_mounted", "mounted a bpffs at /sys/fs/bpf");
        }
        if !is_bpffs(parent) {
            return Err(PinError::NotBpffs { dir: pin_dir.into() });
        }
    }
    std::fs::create_dir_all(pin_dir).map_err(|source| PinError::Dir { dir: pin_dir.into(), source })
}

/// Removes every set under `pin_dir` but `keep` (a stamp); what is not a
/// set (a foreign name) is left alone with a warning.
pub fn remove_others(pin_dir: &Path, keep: Option<&str>) -> Result<(), PinError> {
    let entries = std::fs::read_dir(pin_dir).map_err(|source| PinError::Dir { dir: pin_dir.into(), source })?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if Some(&*name) == keep {
            continue;
        }
        if name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            tracing::info!(set = %name, event = "pins_replaced", "removing pinned probes of another layout or configuration");
            remove_set(&entry.path())?;
        } else {
            tracing::warn!(entry = %entry.path().display(), "not a ringtail pin set: left alone");
        }
    }
    Ok(())
}

/// Creates the directory of a set about to be pinned.
pub fn create_set(set: &Path) -> Result<(), PinError> {
    std::fs::create_dir_all(set).map_err(|source| PinError::Dir { dir: set.into(), source })
}

/// Removes one set: its links first (detaching the programs), then the rest.
pub fn remove_set(set: &Path) -> Result<(), PinError> {
    let dir_err = |source| PinError::Dir { dir: set.into(), source };
    let mut names: Vec<PathBuf> = std::fs::read_dir(set).map_err(dir_err)?.flatten().map(|e| e.path()).collect();
    // Links first, then programs, then maps (the epoch last of all).
    names.sort_by_key(|p| {
        let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        (
            if n.starts_with("link_") {
                0
            } else if n.starts_with("prog_") {
                1
            } else if n == COMPLETE {
                3
            } else {
                2
            },
            n,
        )
    });
    for p in names {
        std::fs::remove_file(&p).map_err(dir_err)?;
    }
    std::fs::remove_dir(set).map_err(dir_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_follows_baked_settings_only() {
        let probe = ProbeSettings::default();
        let discovery = DiscoverySettings::default();
        let tls = TlsSettings::default();
        let a = stamp(&probe, &discovery, &tls, 512);
        assert_eq!(a.len(), 16);
        assert_eq!(a, stamp(&probe, &discovery, &tls, 512));
        assert_ne!(a, stamp(&probe, &discovery, &tls, 256), "wakeup_len is baked in");
        let bigger = ProbeSettings { ring_buffer_mb: 8, ..ProbeSettings::default() };
        assert_ne!(a, stamp(&bigger, &discovery, &tls, 512), "the ring's size is baked in");
        let no_env = ProbeSettings { read_process_env: false, ..ProbeSettings::default() };
        assert_ne!(a, stamp(&no_env, &discovery, &tls, 512), "reading environments at exec is baked in");
        let kept =
            ProbeSettings { keep_pins_on_stop: true, flush_interval: std::time::Duration::from_millis(7), ..ProbeSettings::default() };
        assert_eq!(a, stamp(&kept, &discovery, &tls, 512), "user-space settings are not");
        let no_tls = TlsSettings { enabled: false, ..TlsSettings::default() };
        assert_ne!(a, stamp(&probe, &discovery, &no_tls, 512), "TLS capture is baked in");
    }
}
