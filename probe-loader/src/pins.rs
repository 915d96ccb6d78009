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
//! # Who may touch them
//! The loader is root and removes what it finds there, so the pin
//! directory is root's alone: the bpffs it mounts (where none is) has
//! `mode=0700`; every directory from `/` to `probe.pin_dir` is opened
//! without following a symlink and must be root's and writable by nobody
//! else (a sticky bpffs root, what a mount without `mode=` gives, is
//! accepted: nobody else may remove or rename root's entries there, and
//! the loader says so); `probe.pin_dir` itself must be root's (a directory
//! another user made first is a start-up error naming its owner) and is
//! kept at 0700. A set is a root-owned directory with a stamp's name,
//! entered by descriptor, never through a symlink; only its pins (regular
//! files on the bpffs, named `link_`, `prog_` or `map_`) are unlinked there,
//! relative to its descriptor. Anything else is left alone and said.
//!
//! # Layout
//! `<pin_dir>/<stamp>/`: `map_<name>` for the maps user space uses,
//! `prog_<name>` for every program (statistics), `link_<name>` for its
//! attachment, and `map_epoch` (the capture epoch) pinned last: a set
//! without it is incomplete.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ringtail_config::{DiscoverySettings, ProbeSettings, TlsSettings};
use runtime_kit::dirs::DirError;
use runtime_kit::files::{self, Kind};

use crate::fnv::{fnv1a, FNV_OFFSET};
use crate::kernel::{CONTRACT_HEADER, OBJECT_DIGESTS};

/// Why pins could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("cannot mount a bpffs at {dir} (probe.pin_dir; needs CAP_SYS_ADMIN, or mount it beforehand: mount -t bpf -o mode=0700 bpf /sys/fs/bpf)")]
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
    #[error("the way to the pin directory {dir} (probe.pin_dir) is not root's alone")]
    Untrusted {
        dir: PathBuf,
        #[source]
        source: DirError,
    },
    #[error("{dir} (probe.pin_dir) is a {}, not a directory: refusing to use it", found.name())]
    NotDir { dir: PathBuf, found: Kind },
    #[error(
        "{dir} (probe.pin_dir) belongs to uid {owner}, not root: another user made it (any user can where the bpffs is mounted without mode=0700); \
         refusing to use it: remove it, and mount the bpffs with mode=0700"
    )]
    Owner { dir: PathBuf, owner: u32 },
    #[error("pin set {set} holds {entry:?}, which is not a pin: left in place, so the set cannot be removed")]
    Foreign { set: PathBuf, entry: OsString },
}

/// The bpffs magic number (statfs f_type).
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// Where the loader mounts a bpffs when there is none.
const BPFFS_ROOT: &str = "/sys/fs/bpf";

/// What a set's entries are named: `prog_<program>`, `map_<map>`,
/// `link_<program>` (a tp_btf link), `link_<program>_<tracepoint>` (a
/// syscall tracepoint's) and `link_tls_<dev>_<inode>_<i>` (a TLS uprobe's,
/// on the file with that device and inode). Every name of a set is made
/// here; cleanup removes only entries with these prefixes.
const PROG: &str = "prog_";
const MAP: &str = "map_";
const LINK: &str = "link_";
const LINK_TLS: &str = "link_tls_";

/// A program's pin in `set`.
pub fn prog(set: &Path, program: &str) -> PathBuf {
    set.join(format!("{PROG}{program}"))
}

/// A map's pin in `set`.
pub fn map(set: &Path, map: &str) -> PathBuf {
    set.join(format!("{MAP}{map}"))
}

/// The link of `program` (one tp_btf attachment), or with a tracepoint the
/// link of that attachment of it.
pub fn link(set: &Path, program: &str, tracepoint: Option<&str>) -> PathBuf {
    match tracepoint {
        None => set.join(format!("{LINK}{program}")),
        Some(tp) => set.join(format!("{LINK}{program}_{tp}")),
    }
}

/// The `i`th TLS uprobe link on the file (`dev`, `ino`).
pub fn link_tls(set: &Path, (dev, ino): (u64, u64), i: usize) -> PathBuf {
    set.join(format!("{LINK_TLS}{dev}_{ino}_{i}"))
}

/// The file (device, inode) of a TLS link's pin name, if it is one.
pub fn tls_file_of(name: &str) -> Option<(u64, u64)> {
    let mut parts = name.strip_prefix(LINK_TLS)?.split('_');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The name of the entry that completes a set (pinned last): the epoch map.
pub const COMPLETE: &str = "map_epoch";

/// The stamp of a set loaded from this object with these settings.
pub fn stamp(probe: &ProbeSettings, discovery: &DiscoverySettings, tls: &TlsSettings, wakeup_len: u32) -> String {
    // The objects by their build-time digests: hashing the embedded bytes
    // here would page megabytes of them into a loader that never loads
    // them itself (the load step does).
    let mut h = FNV_OFFSET;
    for (_, digest) in OBJECT_DIGESTS {
        h = fnv1a(h, &digest.to_le_bytes());
    }
    h = fnv1a(h, CONTRACT_HEADER.as_bytes());
    // The whole selection, not only what is baked in: a reopened set keeps
    // the processes its maps selected, which other settings must not inherit.
    let baked = format!(
        "backend={} wakeup_len={wakeup_len} ring_mb={} conns={} read_env={} propagate={} keep_alive={} carrier={} discovery={discovery:?} tls={tls:?}",
        probe.backend.name(),
        probe.ring_buffer_mb,
        probe.max_connections,
        probe.read_process_env,
        probe.propagate,
        probe.propagate_keep_alive.name(),
        probe.carrier
    );
    h = fnv1a(h, baked.as_bytes());
    format!("{h:016x}")
}

/// Whether a name is a stamp's (16 hex digits).
fn is_stamp(name: &[u8]) -> bool {
    name.len() == 16 && name.iter().all(u8::is_ascii_hexdigit)
}

/// Whether a name is one a set's pins have.
fn is_pin_name(name: &[u8]) -> bool {
    [LINK, PROG, MAP].iter().any(|p| name.starts_with(p.as_bytes()))
}

fn fs_type(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<i64> {
    use std::os::fd::AsRawFd;
    // SAFETY: st is a writable statfs; fd is a live descriptor.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

fn is_bpffs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: c is a valid C string; st is a writable statfs.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0) && st.f_type as i64 == BPF_FS_MAGIC
}

/// Mounts a bpffs at `/sys/fs/bpf` that only root may enter.
fn mount_bpffs() -> Result<(), PinError> {
    let target = c"/sys/fs/bpf";
    let fstype = c"bpf";
    // Not the kernel's default (1777: anyone may create entries).
    let data = c"mode=0700";
    // SAFETY: valid C strings.
    let rc = unsafe { libc::mount(fstype.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, data.as_ptr().cast()) };
    if rc != 0 {
        return Err(PinError::Mount { dir: BPFFS_ROOT.into(), source: std::io::Error::last_os_error() });
    }
    tracing::info!(event = "bpffs_mounted", mode = "0700", "mounted a bpffs at /sys/fs/bpf");
    Ok(())
}

/// `probe.pin_dir`, open and checked: what is done in it is done relative
/// to this descriptor.
pub struct PinDir {
    dir: File,
    path: PathBuf,
}

/// Makes sure `pin_dir`'s parent is a bpffs (mounting one at /sys/fs/bpf,
/// 0700, if nothing is mounted there), creates `pin_dir` (root's, 0700)
/// and opens it, checked (see the module doc).
pub fn prepare(pin_dir: &Path) -> Result<PinDir, PinError> {
    let parent = pin_dir.parent().unwrap_or(pin_dir);
    if !is_bpffs(parent) {
        let root = Path::new(BPFFS_ROOT);
        if parent.starts_with(root) && !is_bpffs(root) {
            mount_bpffs()?;
        }
        if !is_bpffs(parent) {
            return Err(PinError::NotBpffs { dir: pin_dir.into() });
        }
    }
    open_checked(pin_dir, true)?.ok_or_else(|| PinError::Dir { dir: pin_dir.into(), source: std::io::ErrorKind::NotFound.into() })
}

/// Opens `pin_dir` checked as [`prepare`] does, without creating or
/// mounting anything: None if it is not there.
pub fn open(pin_dir: &Path) -> Result<Option<PinDir>, PinError> {
    open_checked(pin_dir, false)
}

fn open_checked(pin_dir: &Path, create: bool) -> Result<Option<PinDir>, PinError> {
    let dir_err = |source| PinError::Dir { dir: pin_dir.into(), source };
    let (Some(parent), Some(name)) = (pin_dir.parent(), pin_dir.file_name()) else {
        return Err(dir_err(std::io::ErrorKind::InvalidInput.into()));
    };
    let parent = runtime_kit::dirs::open_trusted(parent).map_err(|source| PinError::Untrusted { dir: pin_dir.into(), source })?;
    if let Ok(mode) = parent.metadata().map(|m| m.mode() & 0o7777) {
        // Said once a start (where it is made), not at every look.
        if create && mode & 0o002 != 0 {
            tracing::warn!(
                event = "bpffs_open_to_all",
                dir = ?pin_dir.parent(),
                mode = format!("{mode:04o}"),
                "the pin directory's parent is writable by every user (sticky): any user may create probe.pin_dir before ringtail does, \
                 which stops it from starting; mount the bpffs with mode=0700"
            );
        }
    }
    if create {
        files::mkdir_at(parent.as_fd(), name, 0o700).map_err(dir_err)?;
    }
    let fd = match files::open_at(Some(parent.as_fd()), Path::new(name), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(None),
        Err(e) => {
            // A symlink or something else planted there: say what it is.
            let found = files::stat_at(parent.as_fd(), name).map(|st| Kind::of(st.st_mode));
            return Err(match found {
                Ok(found) if found != Kind::Directory => PinError::NotDir { dir: pin_dir.into(), found },
                _ => dir_err(e),
            });
        }
    };
    let dir = File::from(fd);
    let meta = dir.metadata().map_err(dir_err)?;
    if meta.uid() != 0 {
        return Err(PinError::Owner { dir: pin_dir.into(), owner: meta.uid() });
    }
    if fs_type(dir.as_fd()).map_err(dir_err)? != BPF_FS_MAGIC {
        return Err(PinError::NotBpffs { dir: pin_dir.into() });
    }
    let mode = meta.mode() & 0o7777;
    if mode != 0o700 {
        // Root's, but open to others (made by hand, or by an older
        // ringtail): closed again; what others may have left in it is
        // handled as foreign below.
        dir.set_permissions(std::fs::Permissions::from_mode(0o700)).map_err(dir_err)?;
        if mode & 0o022 != 0 {
            tracing::warn!(event = "pin_dir_repaired", dir = %pin_dir.display(), was = format!("{mode:04o}"), "probe.pin_dir was writable by others: now 0700");
        }
    }
    Ok(Some(PinDir { dir, path: pin_dir.to_owned() }))
}

impl PinDir {
    /// The path of the set `stamp` (for the pins aya opens by path: below
    /// this checked directory, only root can change what it names).
    pub fn set_path(&self, stamp: &str) -> PathBuf {
        self.path.join(stamp)
    }

    /// Removes every set but `keep` (a stamp); what is not a set (a foreign
    /// name, a symlink, someone else's directory) is left alone with a
    /// warning.
    pub fn remove_others(&self, keep: Option<&str>) -> Result<(), PinError> {
        let names = files::names_in(self.dir.as_fd()).map_err(|source| PinError::Dir { dir: self.path.clone(), source })?;
        for name in names {
            if Some(name.as_bytes()) == keep.map(str::as_bytes) {
                continue;
            }
            if self.is_set(&name) {
                tracing::info!(set = ?name, event = "pins_replaced", "removing pinned probes of another layout or configuration");
                self.remove_named(&name)?;
            } else {
                tracing::warn!(entry = ?self.path.join(&name), event = "pins_foreign", "not a ringtail pin set: left alone");
            }
        }
        Ok(())
    }

    /// Whether the entry `name` is a set: a stamp's name on a directory of
    /// root's (not a symlink to one).
    fn is_set(&self, name: &OsStr) -> bool {
        is_stamp(name.as_bytes())
            && files::stat_at(self.dir.as_fd(), name).is_ok_and(|st| Kind::of(st.st_mode) == Kind::Directory && st.st_uid == 0)
    }

    /// Whether the set `stamp` is there (complete or not).
    pub fn has_set(&self, stamp: &str) -> bool {
        self.is_set(OsStr::new(stamp))
    }

    /// Whether the set `stamp` is complete (its epoch map pinned).
    pub fn is_complete(&self, stamp: &str) -> bool {
        self.has_set(stamp)
            && files::open_at(Some(self.dir.as_fd()), Path::new(stamp), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .and_then(|set| files::stat_at(set.as_fd(), OsStr::new(COMPLETE)))
                .is_ok_and(|st| Kind::of(st.st_mode) == Kind::Regular)
    }

    /// Creates the directory of a set about to be pinned; its path.
    pub fn create_set(&self, stamp: &str) -> Result<PathBuf, PinError> {
        let set = self.set_path(stamp);
        files::mkdir_at(self.dir.as_fd(), OsStr::new(stamp), 0o700).map_err(|source| PinError::Dir { dir: set.clone(), source })?;
        if !self.has_set(stamp) {
            return Err(PinError::Dir { dir: set, source: std::io::ErrorKind::InvalidData.into() });
        }
        Ok(set)
    }

    /// Removes the set `stamp`, if it is there.
    pub fn remove_set(&self, stamp: &str) -> Result<(), PinError> {
        if self.has_set(stamp) {
            self.remove_named(OsStr::new(stamp))?;
        }
        Ok(())
    }

    /// Removes one set: its links first (detaching the programs), then the
    /// rest; each pin unlinked relative to the set's descriptor.
    fn remove_named(&self, name: &OsStr) -> Result<(), PinError> {
        let set = self.path.join(name);
        let dir_err = |source| PinError::Dir { dir: set.clone(), source };
        let fd = files::open_at(Some(self.dir.as_fd()), Path::new(name), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .map_err(dir_err)?;
        let st = files::stat(fd.as_fd()).map_err(dir_err)?;
        if st.st_uid != 0 || fs_type(fd.as_fd()).map_err(dir_err)? != BPF_FS_MAGIC {
            return Err(PinError::Foreign { set: self.path.clone(), entry: name.to_owned() });
        }
        let mut names = files::names_in(fd.as_fd()).map_err(dir_err)?;
        // Links first, then programs, then maps (the epoch last of all).
        names.sort_by_key(|n| {
            let b = n.as_bytes();
            (
                if b.starts_with(LINK.as_bytes()) {
                    0
                } else if b.starts_with(PROG.as_bytes()) {
                    1
                } else if b == COMPLETE.as_bytes() {
                    3
                } else {
                    2
                },
                n.clone(),
            )
        });
        let mut foreign = None;
        for n in names {
            // Pins are regular files on the bpffs, root's; nothing else is
            // what a set holds, and nothing else is removed.
            let pin = files::stat_at(fd.as_fd(), &n).is_ok_and(|st| Kind::of(st.st_mode) == Kind::Regular && st.st_uid == 0);
            if pin && is_pin_name(n.as_bytes()) {
                files::unlink_at(fd.as_fd(), &n, 0).map_err(dir_err)?;
            } else {
                tracing::warn!(set = %set.display(), entry = ?n, event = "pins_foreign", "not a pin: left alone");
                foreign.get_or_insert(n);
            }
        }
        if let Some(entry) = foreign {
            return Err(PinError::Foreign { set, entry });
        }
        files::unlink_at(self.dir.as_fd(), name, libc::AT_REMOVEDIR).map_err(dir_err)
    }
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
        let always = ProbeSettings { propagate_keep_alive: ringtail_config::probe::KeepAlive::Always, ..ProbeSettings::default() };
        assert_ne!(a, stamp(&always, &discovery, &tls, 512), "whether connections stay in the socket map is baked in");
    }

    /// A set's name on a symlink, and a "pin" that is a symlink inside a
    /// set: neither is followed nor removed, and what they point to stays.
    #[test]
    fn sets_are_entered_by_descriptor_and_only_pins_are_removed() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root (mounts a bpffs)");
            return;
        }
        let base = std::env::temp_dir().join(format!("ringtail-pins-{}", std::process::id()));
        let (mnt, victim) = (base.join("bpffs"), base.join("victim"));
        std::fs::create_dir_all(&mnt).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("file"), b"root's").unwrap();
        let c = std::ffi::CString::new(mnt.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C strings; no data.
        assert_eq!(unsafe { libc::mount(c"bpf".as_ptr(), c.as_ptr(), c"bpf".as_ptr(), 0, std::ptr::null()) }, 0);
        let pins = mnt.join("pins");
        let dir = prepare(&pins).unwrap();
        assert_eq!(std::fs::metadata(&pins).unwrap().mode() & 0o7777, 0o700);
        std::os::unix::fs::symlink(&victim, pins.join("0123456789abcdef")).unwrap();
        std::fs::create_dir(pins.join("fedcba9876543210")).unwrap();
        std::os::unix::fs::symlink(victim.join("file"), pins.join("fedcba9876543210/link_x")).unwrap();
        let e = dir.remove_others(None).unwrap_err();
        assert!(matches!(&e, PinError::Foreign { entry, .. } if entry == "link_x"), "{e}");
        assert!(victim.join("file").exists());
        assert!(std::fs::symlink_metadata(pins.join("0123456789abcdef")).unwrap().file_type().is_symlink());
        assert!(std::fs::symlink_metadata(pins.join("fedcba9876543210/link_x")).unwrap().file_type().is_symlink());
        // Another user's pin directory is refused, naming its owner.
        drop(dir);
        std::os::unix::fs::chown(&pins, Some(65534), None).unwrap();
        let e = prepare(&pins).err().expect("refused");
        assert!(e.to_string().contains("belongs to uid 65534, not root"), "{e}");
        // SAFETY: a valid C string.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir_all(&base);
    }
}

#[cfg(test)]
mod names {
    use super::*;

    #[test]
    fn every_name_a_set_gets_is_one_cleanup_removes() {
        let set = Path::new("/s");
        let made = [
            prog(set, "sock_recv"),
            map(set, "events"),
            link(set, "sock_recv", None),
            link(set, "sys_exit_recv", Some("sys_exit_read")),
            link_tls(set, (2049, 77), 3),
            set.join(COMPLETE),
        ];
        for p in &made {
            let name = p.file_name().and_then(|n| n.to_str()).expect("a name");
            assert!(is_pin_name(name.as_bytes()), "{name}");
        }
        assert_eq!(COMPLETE, map(Path::new(""), "epoch").to_str().expect("UTF-8"));
        assert_eq!(tls_file_of("link_tls_2049_77_3"), Some((2049, 77)));
        assert_eq!(tls_file_of("link_sock_recv"), None);
    }
}
