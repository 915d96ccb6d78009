//! Where the TLS uprobes go (`bpf/tls_hooks.h`): the OpenSSL files to attach
//! to, each once.
//!
//! A uprobe belongs to a file (its inode), not to a process: attached once to
//! a `libssl`, it fires in every process that maps that file, including
//! processes started later. The files are found at start, while the loader
//! is privileged:
//! - every `libssl.so*` in the dynamic loader's directories (`/etc/ld.so.conf`
//!   and the files it includes, and the standard ones);
//! - every `libssl` mapped by a selected process running at start, read
//!   through `/proc/PID/root` (a container's own copy);
//! - the executable of a selected process running at start, when it exports
//!   OpenSSL's functions (Node's `node` links OpenSSL statically and exports
//!   them: every later process of that file is covered too);
//! - `tls.libraries` (a private copy, or an executable that exports the
//!   OpenSSL symbols).
//!
//! Files are told apart by device and inode, so a library reached by several
//! paths (symlinks, bind mounts, `/proc/PID/root`) is attached once. A file
//! that lacks `SSL_read` is not OpenSSL (NSS also ships a `libssl3.so`) and
//! is skipped, unless the configuration named it. Files that appear after
//! start are not attached (the loader keeps no privilege to do it), unless
//! `tls.attach_later`.
//!
//! # Hostile files
//! What a process maps, and what its root shows, is that process's to
//! choose: a name may be a FIFO (an `open` that never returns), a device, a
//! symlink, or a name with spaces that reads as another path; and the file
//! may be on a filesystem another process serves (FUSE), which answers
//! every call into it when it likes, or never. So a file is only ever
//! inspected open, as a regular file on a filesystem no process serves,
//! and found without trusting a name the process controls:
//! - its executable through `/proc/PID/exe` (the file it runs, not the name);
//! - a mapped `libssl` through `/proc/PID/map_files/START-END` (the file
//!   mapped there; needs CAP_SYS_ADMIN, or CAP_CHECKPOINT_RESTORE), else by
//!   the whole name `/proc/PID/maps` prints, resolved inside the process's
//!   root from the kernel's cache of names (`RESOLVE_IN_ROOT`,
//!   `RESOLVE_CACHED`, no symlink as the last component), and kept only if
//!   it is the device and inode that line gives (on btrfs and on overlayfs
//!   before Linux 6.8 the two differ: such a file is refused);
//! - opened `O_PATH` first (no call into its filesystem), its mount read
//!   from the descriptor and that mount's type from the process's mount
//!   table ([`reopen_checked`]): FUSE is refused there, before `fstat`, a
//!   read, or the uprobe attach, which reads the probed instruction's page
//!   holding a lock that every `fork` on the host waits for;
//! - each process's files inspected by a job with a deadline
//!   ([`crate::deadline`]): a job past it is abandoned, the mount it was in
//!   never entered again;
//! - its symbols read by bounded `pread`s ([`dynamic_symbols`]), the
//!   probed instructions read too (so that attaching finds them cached),
//!   and the uprobes given file offsets and `/proc/self/fd/N`, so that aya
//!   neither maps nor opens anything by name.
//!
//! A refused file is logged (`event=tls_file_refused`) and counted,
//! `ringtail_tls_files_refused_total{reason}` ([`Reason`]).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use runtime_kit::files::{self, FileError};

use crate::budget::{Allowance, ReadAt};

/// One uprobe: a program of `bpf/tls_hooks.h` on a library function.
#[derive(Debug, Clone, Copy)]
pub struct Uprobe {
    pub program: &'static str,
    pub symbol: &'static str,
    /// OpenSSL 1.1.0 has no `_ex` functions: those may be missing.
    pub required: bool,
}

/// Every uprobe, in attach order: the returns before the entries (a return
/// never finds an entry's record missing, and the socket hooks are attached
/// already), the writes and SSL_free last.
pub const PROGRAMS: &[Uprobe] = &[
    Uprobe { program: "tls_call_exit", symbol: "SSL_read", required: true },
    Uprobe { program: "tls_call_exit", symbol: "SSL_read_ex", required: false },
    Uprobe { program: "tls_call_exit", symbol: "SSL_do_handshake", required: true },
    Uprobe { program: "tls_read_enter", symbol: "SSL_read", required: true },
    Uprobe { program: "tls_read_ex_enter", symbol: "SSL_read_ex", required: false },
    Uprobe { program: "tls_handshake_enter", symbol: "SSL_do_handshake", required: true },
    Uprobe { program: "tls_write_enter", symbol: "SSL_write", required: true },
    Uprobe { program: "tls_write_ex_enter", symbol: "SSL_write_ex", required: false },
    Uprobe { program: "tls_free", symbol: "SSL_free", required: true },
];

/// The programs of `bpf/go_tls.h` on Go's crypto/tls: Read's entry, each
/// of Read's returns, Write's entry (offsets from [`crate::gobin`]).
pub const GO_READ_ENTER: &str = "go_tls_read_enter";
pub const GO_READ_EXIT: &str = "go_tls_read_exit";
pub const GO_WRITE_ENTER: &str = "go_tls_write_enter";

/// Why a file of another process was not inspected: each a label of
/// `ringtail_tls_files_refused_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Not a regular file (a FIFO, a device, a symlink, a directory...).
    NotRegular,
    /// The name a process's maps show leads to another file than the one
    /// mapped there.
    NotMapped,
    /// On a filesystem a process serves (FUSE): never called into.
    ServedByAProcess,
    /// On a mount the process's mount table does not list (its type cannot
    /// be told).
    UnknownMount,
    /// On a mount that hung an earlier inspection.
    MountHung,
    /// Its inspection ran past its deadline and was abandoned.
    Deadline,
    /// Not inspected: too many inspections were abandoned already.
    WorkersExhausted,
    /// Its user's share of the time or bytes allowed for reading other
    /// processes' files was spent (`crate::budget`).
    Budget,
    /// A table it declares lies in a hole of a sparse file.
    Sparse,
}

impl Reason {
    /// Every reason's label, in variant order.
    pub const LABELS: [&'static str; 9] = [
        "not_regular",
        "not_mapped",
        "served_by_a_process",
        "unknown_mount",
        "mount_hung",
        "deadline",
        "workers_exhausted",
        "budget",
        "sparse",
    ];

    /// Why a reader within an allowance stopped, as a reason.
    pub fn of_stop(stop: crate::budget::Stop) -> Reason {
        match stop {
            crate::budget::Stop::Hole => Reason::Sparse,
            crate::budget::Stop::Bytes | crate::budget::Stop::Time => Reason::Budget,
        }
    }

    /// The counter's `reason` label.
    pub fn label(self) -> &'static str {
        Self::LABELS[self as usize]
    }
}

/// Files refused on inspection, by reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// By [`Reason`] (its index).
    pub files: [u64; Reason::LABELS.len()],
    /// Go executables not attached, by [`crate::gobin::Refusal::REASONS`].
    pub go: [u64; crate::gobin::Refusal::REASONS.len()],
    /// Go executables attached (not a refusal: counted with them, as the
    /// load step hands both back at once).
    pub go_attached: u64,
}

/// A file of another process that was not opened.
#[derive(Debug, thiserror::Error)]
pub enum Unopened {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{path}: {hung}")]
    Hung { path: PathBuf, hung: crate::deadline::Hung },
}

impl Refused {
    /// The counter these go to.
    pub const METRIC: &'static str = "ringtail_tls_files_refused_total";

    /// The count of one reason.
    #[cfg(test)]
    pub fn of(&self, reason: Reason) -> u64 {
        self.files[reason as usize]
    }

    /// The counter Go executables not attached go to, by reason.
    pub const GO_METRIC: &'static str = "ringtail_go_binaries_refused_total";
    /// The counter of Go executables attached.
    pub const GO_ATTACHED: &'static str = "ringtail_go_binaries_attached_total";
    /// How many numbers [`Refused::to_array`] gives.
    pub const ARRAY: usize = Reason::LABELS.len() + 1 + crate::gobin::Refusal::REASONS.len();

    /// Adds them to the registry's counters.
    pub fn count(&self, registry: &runtime_kit::counters::Registry) {
        for (reason, n) in Reason::LABELS.iter().zip(self.files) {
            if n > 0 {
                registry.counter(Self::METRIC, &[("reason", reason)]).add(n);
            }
        }
        for (reason, n) in crate::gobin::Refusal::REASONS.iter().zip(self.go) {
            if n > 0 {
                registry.counter(Self::GO_METRIC, &[("reason", reason)]).add(n);
            }
        }
        if self.go_attached > 0 {
            registry.counter(Self::GO_ATTACHED, &[]).add(self.go_attached);
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Refused) {
        self.files.iter_mut().zip(other.files).for_each(|(a, b)| *a += b);
        self.go.iter_mut().zip(other.go).for_each(|(a, b)| *a += b);
        self.go_attached += other.go_attached;
    }

    /// All counts as numbers (the load step hands them back so).
    pub fn to_array(self) -> [u64; Self::ARRAY] {
        let mut a = [0u64; Self::ARRAY];
        let n = Reason::LABELS.len();
        a[..n].copy_from_slice(&self.files);
        a[n] = self.go_attached;
        a[n + 1..].copy_from_slice(&self.go);
        a
    }

    /// The counts [`Refused::to_array`] gave.
    pub fn from_array(a: [u64; Self::ARRAY]) -> Self {
        let n = Reason::LABELS.len();
        let mut r = Refused { go_attached: a[n], ..Refused::default() };
        r.files.copy_from_slice(&a[..n]);
        r.go.copy_from_slice(&a[n + 1..]);
        r
    }

    /// Logs and counts a Go executable that is not attached.
    pub fn note_go(&mut self, path: &Path, refusal: &crate::gobin::Refusal) {
        let reason = refusal.reason();
        if let Some(at) = crate::gobin::Refusal::REASONS.iter().position(|r| *r == reason) {
            self.go[at] += 1;
        }
        tracing::warn!(event = "go_tls_refused", reason, path = ?path, why = %refusal, "a Go executable's crypto/tls is not traced");
    }

    /// Logs and counts a file refused for `reason` (`why` says more).
    pub fn refuse(&mut self, reason: Reason, path: &Path, why: &dyn std::fmt::Display) {
        self.files[reason as usize] += 1;
        tracing::warn!(event = "tls_file_refused", reason = reason.label(), path = ?path, why = %why, "a file of another process: not inspected");
    }

    /// Logs and counts a file that was not opened; a file that is simply
    /// not there (a process gone) is neither.
    fn note(&mut self, error: &Unopened) {
        let reason = match error {
            Unopened::File(FileError::Kind { path, found, .. }) => {
                self.files[Reason::NotRegular as usize] += 1;
                tracing::warn!(event = "tls_file_refused", reason = "not_regular", path = ?path, kind = found.name(), "not a regular file: not opened");
                return;
            }
            Unopened::File(FileError::ServedByAProcess { .. }) => Reason::ServedByAProcess,
            Unopened::File(FileError::UnknownMount { .. }) => Reason::UnknownMount,
            Unopened::Hung { .. } => Reason::MountHung,
            error => {
                tracing::debug!(%error, "TLS candidate not opened");
                return;
            }
        };
        let path = match error {
            Unopened::File(FileError::ServedByAProcess { path, .. } | FileError::UnknownMount { path, .. })
            | Unopened::Hung { path, .. } => path,
            _ => return,
        };
        self.refuse(reason, path, error);
    }
}

/// A file of another process, open for reading.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    /// What `fstat` said of it.
    pub st: libc::stat,
    /// The mount it is on (each read of it is a call into that mount).
    pub mount: u64,
}

/// Opens, for reading, the file at the `O_PATH` descriptor `opath` (found
/// through a process whose mount table is `mounts`), only if its
/// filesystem is not served by a process: its mount comes from the
/// descriptor and its type from that table, before any call into the file
/// (see `runtime_kit::files`); the calls that follow (`fstat`, the reopen)
/// go through the gate, which refuses a mount that hung an earlier job.
/// Regular files only.
pub fn reopen_checked(opath: OwnedFd, shown: &Path, mounts: &Path, gate: &crate::deadline::Gate) -> Result<Opened, Unopened> {
    let open_err = |source| FileError::Open { path: shown.to_owned(), source };
    let mount = files::mount_id(opath.as_fd()).map_err(open_err)?;
    // Mount 0: the kernel's own internal mount (a memfd's, shmem's), in no
    // table and served by no process.
    let fstype = if mount == 0 { Some("internal".to_owned()) } else { files::mount_type(mounts, mount).map_err(open_err)? };
    match fstype {
        None => return Err(FileError::UnknownMount { path: shown.to_owned(), mount }.into()),
        Some(fstype) if files::served_by_a_process(&fstype) => {
            return Err(FileError::ServedByAProcess { path: shown.to_owned(), fstype }.into())
        }
        Some(_) => {}
    }
    let (file, st) = gate
        .call(mount, || files::reopen_regular(opath.as_fd(), shown))
        .map_err(|hung| Unopened::Hung { path: shown.to_owned(), hung })??;
    Ok(Opened { file, st, mount })
}

/// [`reopen_checked`] of `path` (a host file, or a `/proc/PID/...` magic
/// link: `follow`).
pub fn open_checked(path: &Path, follow: bool, mounts: &Path, gate: &crate::deadline::Gate) -> Result<Opened, Unopened> {
    reopen_checked(files::open_path(path, follow)?, path, mounts, gate)
}

/// Directories searched for `libssl` besides those of `/etc/ld.so.conf`.
const STANDARD_DIRS: &[&str] = &[
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/local/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
];

/// Most `include` levels followed in ld.so.conf.
const MAX_INCLUDE_DEPTH: u32 = 4;

/// One file to attach to, open, and where its uprobes go (read by the
/// job that opened it: attaching reads nothing more of it).
#[derive(Debug)]
pub struct Target {
    /// The name it was found by, for logs (maybe through `/proc/PID/root`).
    pub path: PathBuf,
    /// The file itself: the uprobes go to it through `/proc/self/fd/N`.
    pub file: File,
    /// Its device and inode (`fstat`).
    pub id: (u64, u64),
    /// Named by `tls.libraries`: a file without the symbols is an error.
    pub configured: bool,
    /// A Go executable: where its crypto/tls functions are (not OpenSSL).
    pub go: Option<crate::gobin::GoTls>,
    /// OpenSSL: the file offset of each of [`PROGRAMS`]' symbols (None:
    /// not defined there; all None: not an ELF object with a `.dynsym`).
    pub offsets: Vec<Option<u64>>,
}

/// The files, each once (by device and inode), configured ones first.
#[derive(Debug, Default)]
pub struct Targets {
    seen: BTreeSet<(u64, u64)>,
    pub files: Vec<Target>,
    /// Files of the process (device, inode) that an earlier job looked into
    /// (`Looked`): not read again, attached from what that job found.
    pub known: Vec<(u64, u64)>,
    /// What was refused on the way.
    pub refused: Refused,
}

/// Reads the bytes a uprobe at each offset makes the kernel read (the
/// instruction, up to 16 bytes), so that attaching finds them in the page
/// cache and reads nothing from the file's filesystem itself (it does so
/// holding a lock every fork on the host waits for).
fn prefetch(file: &File, offsets: impl IntoIterator<Item = u64>) {
    use std::os::unix::fs::FileExt;
    let mut insn = [0u8; 16];
    for at in offsets {
        let _ = file.read_at(&mut insn, at);
    }
}

impl Targets {
    /// Adds an open OpenSSL candidate unless it is there already: where
    /// its symbols are is read now, within `allowance`, through `gate` (a
    /// reader it stops leaves the file out, counted).
    pub fn push(&mut self, path: PathBuf, opened: Opened, configured: bool, allowance: &Allowance, gate: &crate::deadline::Gate) {
        let Opened { file, st, mount } = opened;
        let id = (st.st_dev, st.st_ino);
        if !self.seen.insert(id) {
            return;
        }
        let symbols: Vec<&str> = PROGRAMS.iter().map(|p| p.symbol).collect();
        let offsets = dynamic_symbols(&allowance.over_on(&file, gate, mount), &symbols).unwrap_or_else(|_| vec![None; symbols.len()]);
        if let Some(stop) = allowance.stopped() {
            self.refused.refuse(Reason::of_stop(stop), &path, &format!("reading its symbols stopped: {stop:?}"));
            return;
        }
        prefetch(&file, offsets.iter().flatten().copied());
        self.files.push(Target { path, file, id, configured, go: None, offsets });
    }

    /// Adds a Go executable and where its crypto/tls functions are.
    pub fn push_go(&mut self, path: PathBuf, Opened { file, st, .. }: Opened, go: crate::gobin::GoTls) {
        let id = (st.st_dev, st.st_ino);
        if self.seen.insert(id) {
            prefetch(
                &file,
                go.read_returns.iter().copied().chain([go.read, go.write]).chain(go.lazy.into_iter().flat_map(|l| [l.alert, l.close])),
            );
            self.files.push(Target { path, file, id, configured: false, go: Some(go), offsets: Vec::new() });
        }
    }

    /// Opens `path` (a host file: a symlink there is followed; its mount
    /// checked in this process's table) and adds it; why not, if it cannot
    /// be used.
    pub fn add(&mut self, path: PathBuf, configured: bool, gate: &crate::deadline::Gate, allowance: &Allowance) -> Result<(), Unopened> {
        let opened = open_checked(&path, true, Path::new("/proc/self/mountinfo"), gate)?;
        self.push(path, opened, configured, allowance, gate);
        Ok(())
    }

    /// Moves `other`'s files (those not here already) and counts here.
    pub fn merge(&mut self, other: Targets) {
        self.refused.add(&other.refused);
        for t in other.files {
            if self.seen.insert(t.id) {
                self.files.push(t);
            }
        }
        for id in other.known {
            if !self.known.contains(&id) {
                self.known.push(id);
            }
        }
    }

    /// Whether file `id` was looked into by an earlier job: then it is only
    /// noted as this process's ([`Targets::known`]); else it is marked
    /// looked into now, and the caller reads it.
    fn first_look(&mut self, looked: &Looked, id: (u64, u64)) -> bool {
        let mut looked = looked.lock().unwrap_or_else(|e| e.into_inner());
        if looked.len() >= MAX_LOOKED {
            looked.clear();
        }
        if looked.insert(id) {
            return true;
        }
        if !self.known.contains(&id) {
            self.known.push(id);
        }
        false
    }
}

/// Whether a file name is a `libssl` shared object (`libssl.so`,
/// `libssl.so.3`, `libssl.so.1.1`, ...; NSS's `libssl3.so` too: it is told
/// apart later, by its symbols).
pub fn is_libssl(name: &str) -> bool {
    name.starts_with("libssl") && name.contains(".so")
}

/// The directories the dynamic loader searches: ld.so.conf's (with its
/// includes) and the standard ones.
pub fn loader_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    conf_dirs(root, &root.join("etc/ld.so.conf"), 0, &mut dirs);
    dirs.extend(STANDARD_DIRS.iter().map(|d| root.join(d.trim_start_matches('/'))));
    dirs
}

/// Largest ld.so.conf file read.
const MAX_CONF: u64 = 1 << 20;

fn conf_dirs(root: &Path, file: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let mut text = String::new();
    let Ok((f, _)) = files::open_regular(file, true) else { return };
    if f.take(MAX_CONF).read_to_string(&mut text).is_err() {
        return;
    }
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if let Some(pattern) = line.strip_prefix("include").map(str::trim) {
            if depth < MAX_INCLUDE_DEPTH {
                for conf in glob_conf(root, pattern) {
                    conf_dirs(root, &conf, depth + 1, out);
                }
            }
        } else if line.starts_with('/') {
            out.push(root.join(line.trim_start_matches('/')));
        }
    }
}

/// The files an `include` line names: a path, or `dir/*.conf`-like (one `*`
/// in the file name; what ld.so.conf files use).
fn glob_conf(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let path = root.join(pattern.trim_start_matches('/'));
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else { return Vec::new() };
    let Some((prefix, suffix)) = name.split_once('*') else { return vec![path.clone()] };
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix)))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

/// The `libssl` files in `dirs`.
pub fn libssl_in(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut found: Vec<PathBuf> =
            entries.flatten().filter(|e| e.file_name().to_str().is_some_and(is_libssl)).map(|e| e.path()).collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// Longest `/proc/PID/maps` line read (a path of PATH_MAX bytes, each
/// newline in it printed as `\012`, and the fields before it); longer
/// lines are skipped.
const MAX_MAPS_LINE: usize = 4 * 4096 + 256;

/// One line of `/proc/PID/maps` that maps a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// The device (major, minor) and inode of the file mapped.
    pub dev: (u32, u32),
    pub ino: u64,
    /// The name printed: all of the rest of the line (it may hold spaces).
    pub path: Vec<u8>,
}

/// Parses `START-END PERMS OFFSET MAJ:MIN INODE   PATH` (the path is what
/// follows the padding after the inode, spaces included); None for lines
/// without a file, or a deleted one.
pub fn parse_mapping(line: &[u8]) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let end = rest.iter().position(|b| *b == b' ')?;
        let f = &rest[..end];
        rest = &rest[end + 1..];
        Some(f)
    };
    let range = field()?;
    let (_perms, _offset, dev, ino) = (field()?, field()?, field()?, field()?);
    let hex = |b: &[u8]| u64::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok();
    let split = range.iter().position(|b| *b == b'-')?;
    let (start, end) = (hex(&range[..split])?, hex(&range[split + 1..])?);
    let colon = dev.iter().position(|b| *b == b':')?;
    let (major, minor) = (u32::try_from(hex(&dev[..colon])?).ok()?, u32::try_from(hex(&dev[colon + 1..])?).ok()?);
    let ino = std::str::from_utf8(ino).ok()?.parse().ok()?;
    let path = rest.iter().position(|b| *b != b' ').map_or(&[][..], |at| &rest[at..]);
    if !path.starts_with(b"/") || path.ends_with(b" (deleted)") || ino == 0 {
        return None;
    }
    Some(Mapping { start, end, dev: (major, minor), ino, path: path.to_vec() })
}

/// Each line of `reader` up to [`MAX_MAPS_LINE`] bytes (longer ones are
/// skipped whole): memory stays bounded whatever a process maps.
fn bounded_lines(reader: impl Read, mut each: impl FnMut(&[u8])) {
    let mut reader = std::io::BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        let Ok(n) = (&mut reader).take(MAX_MAPS_LINE as u64).read_until(b'\n', &mut line) else { return };
        if n == 0 {
            return;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            each(&line);
            continue;
        }
        if n < MAX_MAPS_LINE {
            // the last line, without its newline
            each(&line);
            return;
        }
        // Too long: drop the rest of it.
        let mut skip = Vec::new();
        loop {
            skip.clear();
            match (&mut reader).take(MAX_MAPS_LINE as u64).read_until(b'\n', &mut skip) {
                Ok(0) | Err(_) => return,
                Ok(_) if skip.last() == Some(&b'\n') => break,
                Ok(_) => {}
            }
        }
    }
}

/// The `libssl` files process `pid` maps, each once, from `/proc/PID/maps`.
pub fn libssl_mappings(proc: &Path, pid: u32) -> Vec<Mapping> {
    let Ok((maps, _)) = files::open_regular(&proc.join(pid.to_string()).join("maps"), false) else { return Vec::new() };
    let mut out: Vec<Mapping> = Vec::new();
    bounded_lines(maps, |line| {
        let Some(m) = parse_mapping(line) else { return };
        let name = m.path.rsplit(|b| *b == b'/').next().unwrap_or_default();
        let is_ssl = std::str::from_utf8(name).is_ok_and(is_libssl);
        if is_ssl && !out.iter().any(|o| (o.dev, o.ino) == (m.dev, m.ino)) {
            out.push(m);
        }
    });
    out
}

/// The file mapped at `m` in process `pid`, open; `shown` is its name
/// through the process's root, for logs. Through `/proc/PID/map_files`
/// where the loader may (CAP_SYS_ADMIN), else by the printed name inside
/// the process's root and then only if it has the device and inode the
/// maps line gives (see the module doc). Either way, only on a mount the
/// process's table lists and no process serves ([`reopen_checked`]).
pub fn open_mapped(proc: &Path, pid: u32, m: &Mapping, refused: &mut Refused, gate: &crate::deadline::Gate) -> Option<(PathBuf, Opened)> {
    let dir = proc.join(pid.to_string());
    let shown = dir.join("root").join(Path::new(std::ffi::OsStr::from_bytes(&m.path[1..])));
    let through = dir.join("map_files").join(format!("{:x}-{:x}", m.start, m.end));
    match files::open_path(&through, true) {
        Ok(opath) => match reopen_checked(opath, &shown, &dir.join("mountinfo"), gate) {
            Ok(opened) => Some((shown, opened)),
            Err(e) => {
                refused.note(&e);
                None
            }
        },
        Err(e) if e.is_not_found() => None,
        // Not allowed to: by name, checked.
        Err(_) => open_mapped_by_name(proc, pid, m, refused, gate),
    }
}

/// [`open_mapped`] by the name the maps line prints: resolved inside the
/// process's root from the kernel's cache of names
/// (`files::open_path_at`), kept only if it is the device and inode mapped.
pub fn open_mapped_by_name(
    proc: &Path,
    pid: u32,
    m: &Mapping,
    refused: &mut Refused,
    gate: &crate::deadline::Gate,
) -> Option<(PathBuf, Opened)> {
    let dir = proc.join(pid.to_string());
    let relative = Path::new(std::ffi::OsStr::from_bytes(&m.path[1..]));
    let shown = dir.join("root").join(relative);
    let root: OwnedFd = files::open_at(None, &dir.join("root"), libc::O_PATH | libc::O_DIRECTORY).ok()?;
    let opened = files::open_path_at(root.as_fd(), relative, &shown)
        .map_err(Unopened::from)
        .and_then(|opath| reopen_checked(opath, &shown, &dir.join("mountinfo"), gate));
    let opened = match opened {
        Ok(opened) => opened,
        Err(e) => {
            refused.note(&e);
            return None;
        }
    };
    let dev = (libc::major(opened.st.st_dev), libc::minor(opened.st.st_dev));
    if (dev, opened.st.st_ino) != (m.dev, m.ino) {
        refused.refuse(Reason::NotMapped, &shown, &"the name a process maps leads to another file than the one mapped: not used");
        return None;
    }
    Some((shown, opened))
}

/// The executable of process `pid`, open through `/proc/PID/exe` (the file
/// it runs, whatever its name shows now; its mount checked in the
/// process's table), and its name through the process's root, for logs.
pub fn exe_of(proc: &Path, pid: u32, refused: &mut Refused, gate: &crate::deadline::Gate) -> Option<(PathBuf, Opened)> {
    let dir = proc.join(pid.to_string());
    let opened = match open_checked(&dir.join("exe"), true, &dir.join("mountinfo"), gate) {
        Ok(opened) => opened,
        Err(e) => {
            refused.note(&e);
            return None;
        }
    };
    let shown = std::fs::read_link(dir.join("exe"))
        .ok()
        .and_then(|t| t.strip_prefix("/").ok().map(|t| dir.join("root").join(t)))
        .unwrap_or_else(|| dir.join("exe"));
    Some((shown, opened))
}

/// Most bytes of section headers read (65,535 headers of 64 bytes).
const MAX_SECTION_HEADERS: u64 = 4 << 20;

/// Whether the ELF `file` defines the dynamic symbol `name`.
pub fn exports(file: &dyn ReadAt, name: &str) -> bool {
    dynamic_symbols(file, &[name]).is_ok_and(|found| found[0].is_some())
}

/// Where in `file` (an ELF object) each of `names` is, as uprobes take it:
/// the file offset of a symbol `.dynsym` defines (None: not defined there).
/// Only the header, the section headers, `.dynsym` and `.dynstr` are read,
/// by `pread` (an executable can be hundreds of megabytes; a file someone
/// shortens meanwhile reads short, it cannot fault), the two tables
/// streamed through a window of 64 KiB with a budget of reads (each at
/// most 64 MiB: Node's are 1.8 and 5.3 MB), so memory stays at a few
/// megabytes whatever the file says; anything that is not a well-formed
/// 64-bit little-endian ELF is an error.
pub fn dynamic_symbols(file: &dyn ReadAt, names: &[&str]) -> std::io::Result<Vec<Option<u64>>> {
    let invalid = || std::io::Error::from(std::io::ErrorKind::InvalidData);
    let refused = |r: crate::gobin::Refusal| match r {
        crate::gobin::Refusal::Io { source } => source,
        _ => invalid(),
    };
    let read = |offset: u64, len: u64| -> std::io::Result<Vec<u8>> {
        if len > MAX_SECTION_HEADERS {
            return Err(invalid());
        }
        let mut buf = vec![0; len as usize];
        file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    };
    let u16_at = |b: &[u8], o: usize| b.get(o..o + 2).map_or(0, |s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |b: &[u8], o: usize| b.get(o..o + 4).map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap_or_default()));
    let u64_at = |b: &[u8], o: usize| b.get(o..o + 8).map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or_default()));
    let head = read(0, 64)?;
    // ELFCLASS64, ELFDATA2LSB
    if head[..4] != *b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(invalid());
    }
    // ET_EXEC, ET_DYN: a symbol's value is an address, made a file offset
    // through its section; otherwise it is one already.
    const ET_EXEC: u16 = 2;
    const ET_DYN: u16 = 3;
    let translate = matches!(u16_at(&head, 0x10), ET_EXEC | ET_DYN);
    let (shoff, shentsize, shnum) = (u64_at(&head, 0x28), u64::from(u16_at(&head, 0x3a)), u64::from(u16_at(&head, 0x3c)));
    if shentsize < 64 {
        return Err(invalid());
    }
    let len = shentsize.checked_mul(shnum).ok_or_else(invalid)?;
    let sections = read(shoff, len)?;
    let section = |i: u64| -> Option<&[u8]> {
        if i >= shnum {
            return None;
        }
        let at = usize::try_from(i.checked_mul(shentsize)?).ok()?;
        sections.get(at..at.checked_add(64)?)
    };
    const SHT_DYNSYM: u32 = 11;
    let dynsym = (0..shnum).filter_map(section).find(|h| u32_at(h, 4) == SHT_DYNSYM).ok_or_else(invalid)?;
    let strtab = section(u64::from(u32_at(dynsym, 0x28))).ok_or_else(invalid)?;
    // Where each name is written in .dynstr (Elf64_Shdr: sh_offset 0x18, sh_size 0x20).
    let mut strings = crate::gobin::Window::new(file, u64_at(strtab, 0x18), u64_at(strtab, 0x20)).map_err(refused)?;
    let written = crate::gobin::find_names(&mut strings, names).map_err(refused)?;
    let (sym_at, sym_size) = (u64_at(dynsym, 0x18), u64_at(dynsym, 0x20));
    let mut symbols = crate::gobin::Window::new(file, sym_at, sym_size).map_err(refused)?;
    // Below SHN_LORESERVE: a real section (not ABS, COMMON...).
    const SHN_LORESERVE: u16 = 0xff00;
    let mut found: Vec<Option<u64>> = vec![None; names.len()];
    let mut at = 0;
    // Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, st_value u64, st_size u64
    while at + 24 <= sym_size && found.iter().any(Option::is_none) {
        let sym = symbols.bytes(at, 24).map_err(refused)?;
        at += 24;
        let (name, shndx, value) = (u64::from(u32_at(sym, 0)), u16_at(sym, 6), u64_at(sym, 8));
        if shndx == 0 || shndx >= SHN_LORESERVE {
            continue;
        }
        for (slot, places) in found.iter_mut().zip(&written) {
            if slot.is_some() || !places.contains(&name) {
                continue;
            }
            *slot = if translate {
                // Elf64_Shdr: sh_addr at 0x10, sh_offset at 0x18
                section(u64::from(shndx)).and_then(|sec| value.checked_sub(u64_at(sec, 0x10))?.checked_add(u64_at(sec, 0x18)))
            } else {
                Some(value)
            };
        }
    }
    Ok(found)
}

/// Most files remembered as looked into ([`of_process`]); past it the
/// memory starts again (a file is then looked into once more).
pub const MAX_LOOKED: usize = 65_536;

/// The files looked into (executables, mapped libssl files), by device and
/// inode, shared with the jobs that look.
pub type Looked = std::sync::Arc<std::sync::Mutex<BTreeSet<(u64, u64)>>>;

/// How long one process's files may take to inspect (its mapped
/// `libssl` files and its executable: a Go executable of 100 MiB reads in
/// well under a second); past it the job is abandoned (`deadline`).
pub const PROCESS_DEADLINE: Duration = Duration::from_secs(2);
/// The CPU time one process's job may read for: half its deadline (a
/// reader stopped by its time ends the job well before the job is
/// abandoned as hung), both stretched as `budget::scaled` says.
pub fn job_time() -> Duration {
    crate::budget::scaled(PROCESS_DEADLINE) / 2
}

/// How long the host's own files may take (`tls.libraries`, the loader's
/// directories).
pub const HOST_DEADLINE: Duration = Duration::from_secs(10);

/// The files of process `pid` to attach to: the `libssl` files it maps and
/// its executable when that exports `SSL_read` or is a Go program that
/// links crypto/tls (each executable file, by device and inode in
/// `looked`, is looked into once), into `targets`. A Go executable that
/// cannot be attached is logged and counted (`targets.refused`). Runs as a
/// job ([`crate::deadline`]): every file is opened through `gate` and read
/// within `allowance` ([`crate::budget`]).
pub fn of_process(proc: &Path, pid: u32, looked: &Looked, targets: &mut Targets, gate: &crate::deadline::Gate, allowance: &Allowance) {
    for m in libssl_mappings(proc, pid) {
        if let Some((shown, opened)) = open_mapped(proc, pid, &m, &mut targets.refused, gate) {
            if targets.first_look(looked, (opened.st.st_dev, opened.st.st_ino)) {
                targets.push(shown, opened, false, allowance, gate);
            }
        }
    }
    let Some((shown, opened)) = exe_of(proc, pid, &mut targets.refused, gate) else { return };
    let mount = opened.mount;
    if !targets.first_look(looked, (opened.st.st_dev, opened.st.st_ino)) {
        return;
    }
    let exported = exports(&allowance.over_on(&opened.file, gate, mount), "SSL_read");
    if let Some(stop) = allowance.stopped() {
        targets.refused.refuse(Reason::of_stop(stop), &shown, &format!("reading its symbols stopped: {stop:?}"));
        return;
    }
    if exported {
        targets.push(shown, opened, false, allowance, gate);
        return;
    }
    let inspected = crate::gobin::inspect(&allowance.over_on(&opened.file, gate, mount));
    if let Some(stop) = allowance.stopped() {
        targets.refused.refuse(Reason::of_stop(stop), &shown, &format!("reading it as a Go executable stopped: {stop:?}"));
        return;
    }
    match inspected {
        Ok(Some(go)) => targets.push_go(shown, opened, go),
        Ok(None) => {}
        Err(refusal) => targets.refused.note_go(&shown, &refusal),
    }
}

/// [`of_process`] as a job of `overseer`, within [`PROCESS_DEADLINE`] and
/// `limits` (CPU time, bytes) for its reads: an abandoned job's files count
/// as `deadline`, one not run as `workers_exhausted`. Returns the CPU time
/// the job took and the bytes it read (what its uid is charged; an
/// abandoned job is charged its whole limits).
pub fn of_process_within(
    overseer: &mut crate::deadline::Overseer,
    proc: &Path,
    pid: u32,
    looked: &Looked,
    targets: &mut Targets,
    limits: (Duration, u64),
) -> (Duration, u64) {
    of_process_meanwhile(overseer, proc, pid, looked, targets, limits, || {})
}

/// [`of_process_within`], calling `meanwhile` every few milliseconds while
/// the job runs.
pub fn of_process_meanwhile(
    overseer: &mut crate::deadline::Overseer,
    proc: &Path,
    pid: u32,
    looked: &Looked,
    targets: &mut Targets,
    limits: (Duration, u64),
    meanwhile: impl FnMut(),
) -> (Duration, u64) {
    let (proc_owned, looked) = (proc.to_owned(), looked.clone());
    let deadline = crate::budget::scaled(PROCESS_DEADLINE);
    let outcome = overseer.run_with(
        deadline,
        move |gate| {
            let mut found = Targets::default();
            let allowance = Allowance::new(limits.1, limits.0.min(job_time()));
            of_process(&proc_owned, pid, &looked, &mut found, gate, &allowance);
            (found, allowance.spent(), allowance.read())
        },
        meanwhile,
    );
    let shown = proc.join(pid.to_string());
    match outcome {
        crate::deadline::Outcome::Done((found, spent, read)) => {
            targets.merge(found);
            (spent, read)
        }
        crate::deadline::Outcome::Abandoned { mount } => {
            let why = format!(
                "process {pid}'s files took longer than {deadline:?} (mount {mount:?}): abandoned, that mount is not entered again"
            );
            targets.refused.refuse(Reason::Deadline, &shown, &why);
            limits
        }
        crate::deadline::Outcome::Exhausted => {
            targets.refused.refuse(Reason::WorkersExhausted, &shown, &"too many inspections abandoned: not inspected");
            (Duration::ZERO, 0)
        }
    }
}

/// Every file to attach to: `configured` (tls.libraries) first, then the
/// loader's directories under `root`, then what the processes `pids` map,
/// then their executables that export OpenSSL's functions, each process
/// a job of `overseer`, taken round-robin by uid within the scan's budget
/// ([`crate::budget`]: a process whose uid's share is spent is counted
/// `budget`, not inspected). The second value: why each configured file
/// that cannot be used cannot.
pub fn find(
    configured: &[PathBuf],
    root: &Path,
    proc: &Path,
    pids: impl IntoIterator<Item = u32>,
    looked: &Looked,
    overseer: &mut crate::deadline::Overseer,
) -> (Targets, Vec<Unopened>) {
    let mut t = Targets::default();
    let (configured, root_owned) = (configured.to_vec(), root.to_owned());
    let host_deadline = crate::budget::scaled(HOST_DEADLINE);
    let host = overseer.run(host_deadline, move |gate| {
        let mut t = Targets::default();
        let mut unusable = Vec::new();
        // The host's own files: root's, bounded per file only.
        for path in configured {
            if let Err(e) = t.add(path, true, gate, &Allowance::new(crate::budget::PROCESS_BYTES, host_deadline)) {
                unusable.push(e);
            }
        }
        for path in libssl_in(&loader_dirs(&root_owned)) {
            if let Err(e) = t.add(path, false, gate, &Allowance::new(crate::budget::PROCESS_BYTES, host_deadline)) {
                t.refused.note(&e);
            }
        }
        (t, unusable)
    });
    let unusable = match host {
        crate::deadline::Outcome::Done((found, unusable)) => {
            t.merge(found);
            unusable
        }
        _ => {
            t.refused.refuse(Reason::Deadline, root, &format!("the host's libssl files took longer than {host_deadline:?}"));
            Vec::new()
        }
    };
    let mut refused = Refused::default();
    let mut found = Vec::new();
    scan_processes(proc, pids, looked, overseer, &mut refused, |_, f| found.push(f));
    t.refused.add(&refused);
    for f in found {
        t.merge(f);
    }
    (t, unusable)
}

/// What the processes `pids` map and run (`of_process`), each process a
/// job of `overseer`, taken round-robin by uid within the scan's budget
/// ([`crate::budget`]: a process whose uid's share is spent is counted
/// `budget` in `refused`, not inspected); `each(pid, found)` for each
/// process inspected.
pub fn scan_processes(
    proc: &Path,
    pids: impl IntoIterator<Item = u32>,
    looked: &Looked,
    overseer: &mut crate::deadline::Overseer,
    refused: &mut Refused,
    mut each: impl FnMut(u32, Targets),
) {
    let (order, uids) = crate::budget::round_robin(proc, pids);
    let mut shares = crate::budget::Shares::new(crate::budget::scaled(crate::budget::SCAN_TIME), crate::budget::SCAN_BYTES, uids);
    let mut over_budget = 0u64;
    for (uid, pid) in order {
        let Some(limits) = shares.allowance(uid, job_time()) else {
            over_budget += 1;
            refused.files[Reason::Budget as usize] += 1;
            continue;
        };
        let mut found = Targets::default();
        let (took, read) = of_process_within(overseer, proc, pid, looked, &mut found, limits);
        shares.charge(uid, took, read);
        each(pid, found);
    }
    if over_budget > 0 {
        // One line for them all: they may be thousands.
        tracing::warn!(
            event = "tls_file_refused",
            reason = "budget",
            processes = over_budget,
            "processes not inspected: their user's share of the start scan's time or bytes was spent"
        );
    }
}

/// Every process id in `proc`.
pub fn all_pids(proc: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(proc) else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ringtail-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn counts_go_through_the_load_step_whole() {
        let mut r = Refused { go_attached: 3, ..Refused::default() };
        r.files[Reason::NotRegular as usize] = 1;
        r.files[Reason::WorkersExhausted as usize] = 2;
        r.go[0] = 4;
        r.go[crate::gobin::Refusal::REASONS.len() - 1] = 5;
        assert_eq!(Refused::from_array(r.to_array()), r);
    }

    #[test]
    fn libssl_names() {
        for name in ["libssl.so", "libssl.so.3", "libssl.so.1.1", "libssl3.so"] {
            assert!(is_libssl(name), "{name}");
        }
        for name in ["libcrypto.so.3", "libssl.a", "libsslx", "ssl.so"] {
            assert!(!is_libssl(name), "{name}");
        }
    }

    #[test]
    fn ld_so_conf_includes_are_followed_and_files_deduplicated_by_inode() {
        let root = temp("conf");
        std::fs::create_dir_all(root.join("etc/ld.so.conf.d")).expect("mkdir");
        std::fs::create_dir_all(root.join("opt/ssl/lib")).expect("mkdir");
        std::fs::write(root.join("etc/ld.so.conf"), "# comment\ninclude /etc/ld.so.conf.d/*.conf\n").expect("write");
        std::fs::write(root.join("etc/ld.so.conf.d/a.conf"), "/opt/ssl/lib\n").expect("write");
        std::fs::write(root.join("etc/ld.so.conf.d/ignored.txt"), "/nowhere\n").expect("write");
        let lib = root.join("opt/ssl/lib/libssl.so.3");
        std::fs::write(&lib, b"not really").expect("write");
        std::os::unix::fs::symlink(&lib, root.join("opt/ssl/lib/libssl.so")).expect("symlink");
        let dirs = loader_dirs(&root);
        assert_eq!(dirs[0], root.join("opt/ssl/lib"));
        assert!(!dirs.contains(&root.join("nowhere")));
        let mut overseer = crate::deadline::Overseer::new();
        let (targets, unusable) = find(&[root.join("absent.so")], &root, &root.join("proc"), [], &Looked::default(), &mut overseer);
        assert!(
            matches!(&unusable[..], [Unopened::File(e @ FileError::Open { path, .. })] if e.is_not_found() && path == &root.join("absent.so")),
            "{unusable:?}"
        );
        // libssl.so and libssl.so.3 are one file: attached once
        let found: Vec<_> = targets.files.iter().map(|t| (t.path.clone(), t.configured)).collect();
        assert_eq!(found, vec![(root.join("opt/ssl/lib/libssl.so"), false)]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn exported_symbols_are_found_in_the_dynamic_table() {
        let path = libssl_in(&loader_dirs(Path::new("/"))).into_iter().next().expect("the host has a libssl");
        let libssl = File::open(&path).expect("open libssl");
        assert!(exports(&libssl, "SSL_read"));
        assert!(exports(&libssl, "SSL_write_ex"));
        // a prefix of a name, or an imported symbol, is no export
        assert!(!exports(&libssl, "SSL_rea"));
        assert!(!exports(&libssl, "malloc"));
        // file offsets: distinct, inside the file
        let size = libssl.metadata().expect("stat").len();
        let offsets = dynamic_symbols(&libssl, &["SSL_read", "SSL_write", "malloc"]).expect("an ELF");
        let (read, write) = (offsets[0].expect("SSL_read"), offsets[1].expect("SSL_write"));
        assert!(read != write && read < size && write < size, "{offsets:?} in {size} bytes");
        assert_eq!(offsets[2], None);
        let exe = File::open(std::env::current_exe().expect("current exe")).expect("open exe");
        assert!(!exports(&exe, "SSL_read"));
        let dir = temp("elf");
        for (name, bytes) in [("empty", &b""[..]), ("short", &b"\x7fELF\x02\x01"[..]), ("text", &b"#!/bin/sh\necho\n"[..])] {
            std::fs::write(dir.join(name), bytes).expect("write");
            assert!(!exports(&File::open(dir.join(name)).expect("open"), "SSL_read"), "{name}");
        }
        // a header whose section table points far past the end
        let mut bad = std::fs::read(&path).expect("read libssl")[..64].to_vec();
        bad[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(dir.join("bad"), &bad).expect("write");
        assert!(!exports(&File::open(dir.join("bad")).expect("open"), "SSL_read"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_process_executable_is_the_file_it_runs() {
        use std::os::unix::fs::MetadataExt;
        let me = std::process::id();
        let (shown, Opened { st, .. }) =
            exe_of(Path::new("/proc"), me, &mut Refused::default(), &crate::deadline::Gate::new()).expect("our exe");
        assert!(shown.starts_with(format!("/proc/{me}/root/")), "{}", shown.display());
        assert_eq!(st.st_ino, std::fs::metadata(std::env::current_exe().expect("exe")).expect("stat").ino());
    }

    #[test]
    fn maps_lines_keep_their_whole_name() {
        let m = parse_mapping(b"7f00-7f10 r-xp 00000000 08:01 123                        /tmp/a/libssl.so.3 x").expect("a file");
        assert_eq!((m.start, m.end, m.dev, m.ino), (0x7f00, 0x7f10, (8, 1), 123));
        assert_eq!(m.path, b"/tmp/a/libssl.so.3 x");
        let m = parse_mapping(b"00400000-00452000 r-xp 00000000 fd:1f 9 /usr/bin/x").expect("a file");
        assert_eq!((m.start, m.dev), (0x400000, (0xfd, 0x1f)));
        assert_eq!(parse_mapping(b"7f40-7f50 rw-p 00000000 00:00 0 [heap]"), None);
        assert_eq!(parse_mapping(b"7f40-7f50 rw-p 00000000 00:00 0 "), None);
        assert_eq!(parse_mapping(b"7f30-7f40 r-xp 00000000 08:01 125 /old/libssl.so.1.1 (deleted)"), None);
        assert_eq!(parse_mapping(b"garbage"), None);
    }

    #[test]
    fn mapped_libraries_are_listed_once_with_whole_names_and_bounded_lines() {
        let proc = temp("proc");
        std::fs::create_dir_all(proc.join("7")).expect("mkdir");
        let long = format!("7f60-7f70 r-xp 00000000 08:01 127 /{}/libssl.so.3\n", "x".repeat(MAX_MAPS_LINE));
        std::fs::write(
            proc.join("7/maps"),
            format!(
                "7f00-7f10 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libssl.so.3\n\
                 7f10-7f20 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libssl.so.3\n\
                 7f20-7f30 r-xp 00000000 08:01 124 /usr/lib/libcrypto.so.3\n\
                 {long}\
                 7f30-7f40 r-xp 00000000 08:01 125 /old/libssl.so.1.1 (deleted)\n\
                 7f40-7f50 rw-p 00000000 00:00 0 [heap]\n\
                 7f50-7f60 r--p 00000000 08:01 126 /tmp/d/libssl.so.3 x"
            ),
        )
        .expect("write");
        let paths: Vec<Vec<u8>> = libssl_mappings(&proc, 7).into_iter().map(|m| m.path).collect();
        assert_eq!(paths, vec![b"/usr/lib/x86_64-linux-gnu/libssl.so.3".to_vec(), b"/tmp/d/libssl.so.3 x".to_vec()]);
        assert!(libssl_mappings(&proc, 8).is_empty());
        let _ = std::fs::remove_dir_all(&proc);
    }

    /// This process maps `file` (read-only); the mapping's line in its maps.
    fn map(file: &Path) -> Mapping {
        let f = File::open(file).expect("open to map");
        // SAFETY: a fresh read-only shared mapping of a whole small file, never unmapped (the test's life).
        let at =
            unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, std::os::fd::AsRawFd::as_raw_fd(&f), 0) };
        assert_ne!(at, libc::MAP_FAILED);
        let maps = std::fs::read("/proc/self/maps").expect("maps");
        maps.split(|b| *b == b'\n').filter_map(parse_mapping).find(|m| m.start == at as u64).expect("the mapping")
    }

    #[test]
    fn a_mapped_name_is_used_only_for_the_file_mapped() {
        let dir = temp("mapped");
        let me = std::process::id();
        let proc = Path::new("/proc");
        let name = dir.join("libssl.so.3 x");
        std::fs::write(&name, vec![7u8; 4096]).expect("write");
        let m = map(&name);
        assert_eq!(m.path, name.as_os_str().as_bytes());
        let mut refused = Refused::default();
        let gate = crate::deadline::Gate::new();
        let (shown, _) = open_mapped_by_name(proc, me, &m, &mut refused, &gate).expect("the file mapped, by its whole name");
        assert_eq!(shown, proc.join(me.to_string()).join("root").join(name.strip_prefix("/").expect("absolute")));
        // Through map_files (root here): the same file, whatever its name.
        assert!(open_mapped(proc, me, &m, &mut refused, &gate).is_some());
        // The name now leads to another file: refused, not read.
        std::fs::rename(&name, dir.join("moved")).expect("rename");
        std::fs::write(&name, vec![8u8; 4096]).expect("another file");
        assert!(open_mapped_by_name(proc, me, &m, &mut refused, &gate).is_none());
        assert_eq!((refused.of(Reason::NotRegular), refused.of(Reason::NotMapped)), (0, 1));
        // A FIFO there: refused without blocking; a symlink: not followed.
        std::fs::remove_file(&name).expect("rm");
        let c = std::ffi::CString::new(name.as_os_str().as_bytes()).expect("c path");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(open_mapped_by_name(proc, me, &m, &mut refused, &gate).is_none());
        std::fs::remove_file(&name).expect("rm");
        std::os::unix::fs::symlink(dir.join("moved"), &name).expect("symlink");
        assert!(open_mapped_by_name(proc, me, &m, &mut refused, &gate).is_none());
        assert_eq!((refused.of(Reason::NotRegular), refused.of(Reason::NotMapped)), (2, 1));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
