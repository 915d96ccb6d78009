//! Files opened without trusting their names.
//!
//! A root process that opens a path another user can change may be made to
//! block (a FIFO: `open` waits for a writer), to trigger a device's open,
//! to read a file that user could not, or to connect to someone else's
//! socket. So what ringtail opens on a path it does not own is opened
//! `O_PATH` first (the file's own open never runs: a FIFO cannot block, a
//! device sees nothing), checked through that descriptor (`fstat`: its
//! type, its owner, its identity), and only then used: reopened through
//! `/proc/self/fd/N` for reading (the very inode checked, never the name
//! again), or connected to through the same path.
//!
//! A file another user serves is another matter: on a FUSE mount, the
//! filesystem is a process, and any call into it (`fstat`, `read`, a path
//! walk, the page the kernel reads to place a uprobe) waits for that
//! process's answer, uninterruptibly once it has read the request. So the
//! mount a descriptor is on is found from the descriptor's own record
//! ([`mount_id`], `/proc/self/fdinfo`) and its type from the mount table
//! ([`mount_type`]), neither of which calls into the filesystem, before
//! anything else is done with the file ([`served_by_a_process`]).
//!
//! Layout: [`open_regular`] and [`open_regular_at`] (files to inspect),
//! [`open_path`], [`open_path_at`] and [`reopen_regular`] (the same in two
//! steps, for a caller that checks the mount in between), [`mount_id`],
//! [`mount_type`], [`served_by_a_process`], [`open_socket`] (socket files to
//! connect to), the `*at` helpers the pin directory code uses ([`open_at`],
//! [`stat_at`], [`unlink_at`], [`mkdir_at`], [`names_in`]), and
//! [`FileError`], [`Kind`].

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What a file is, by its mode's type bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Unknown,
}

impl Kind {
    /// The kind of a `st_mode`.
    pub fn of(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::Regular,
            libc::S_IFDIR => Kind::Directory,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDevice,
            libc::S_IFBLK => Kind::BlockDevice,
            _ => Kind::Unknown,
        }
    }

    /// For messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Regular => "regular file",
            Kind::Directory => "directory",
            Kind::Symlink => "symlink",
            Kind::Fifo => "FIFO",
            Kind::Socket => "socket",
            Kind::CharDevice => "character device",
            Kind::BlockDevice => "block device",
            Kind::Unknown => "file of unknown type",
        }
    }
}

/// Why a file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot open {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is a {}, not a {}: refused", found.name(), wanted.name())]
    Kind { path: PathBuf, found: Kind, wanted: Kind },
    #[error("{path} belongs to uid {owner}, which may not be on the other end: refused")]
    Owner { path: PathBuf, owner: u32 },
    #[error("{path} is on a {fstype} filesystem, served by a process that may never answer: refused")]
    ServedByAProcess { path: PathBuf, fstype: String },
    #[error("{path} is on mount {mount}, which the process's mount table does not list: refused")]
    UnknownMount { path: PathBuf, mount: u64 },
}

impl FileError {
    /// True when the file was not there (nothing was refused).
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::Open { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
}

/// `openat(dir, path, flags | O_CLOEXEC)`; `dir` None: relative to the
/// working directory (or `path` is absolute).
pub fn open_at(dir: Option<BorrowedFd<'_>>, path: &Path, flags: i32) -> io::Result<OwnedFd> {
    let c = cstring(path.as_os_str())?;
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: c is a valid C string; the flags are plain integers.
    let fd = unsafe { libc::openat(dirfd, c.as_ptr(), flags | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a descriptor openat just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstat` of a descriptor (an `O_PATH` one too).
pub fn stat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: st is a writable stat; fd is a live descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: a symlink is described, not followed.
pub fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<libc::stat> {
    let c = cstring(name)?;
    // SAFETY: st is a writable stat; c a valid C string; dir a live descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `unlinkat(dir, name, flags)` (`libc::AT_REMOVEDIR` for a directory): the
/// entry itself, whatever it points to.
pub fn unlink_at(dir: BorrowedFd<'_>, name: &OsStr, flags: i32) -> io::Result<()> {
    let c = cstring(name)?;
    // SAFETY: c is a valid C string; dir a live descriptor.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `mkdirat(dir, name, mode)`; an existing entry is fine (the caller opens
/// and checks what is there).
pub fn mkdir_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    let c = cstring(name)?;
    // SAFETY: c is a valid C string; dir a live descriptor.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) } != 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    Ok(())
}

/// The names in the directory open at `dir` (read through
/// `/proc/self/fd/N`: that directory, whatever its path has become).
pub fn names_in(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let entries = std::fs::read_dir(fd_path(dir))?;
    entries.map(|e| e.map(|e| e.file_name())).collect()
}

/// `/proc/self/fd/N`: the inode open at `fd`, as a path the kernel resolves
/// through the descriptor, not through any name.
pub fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Opens `path` for reading only if it is a regular file (see the module
/// doc): `O_PATH` first, `fstat`, then reopened non-blocking through the
/// descriptor. `follow`: whether a symlink as the last component is
/// followed (a `/proc/PID/exe` magic link must be; a name another user
/// controls must not be). Returns the file and what `fstat` said of it.
/// The file's filesystem is trusted to answer: for another process's
/// files, [`open_path`], the mount checked, then [`reopen_regular`].
pub fn open_regular(path: &Path, follow: bool) -> Result<(File, libc::stat), FileError> {
    let opath = open_path(path, follow)?;
    reopen_regular(opath.as_fd(), path)
}

/// An `O_PATH` descriptor of `path` (the file's own open never runs; a
/// magic link such as `/proc/PID/exe` is a jump to the file, with no call
/// into its filesystem). `follow`: as in [`open_regular`].
pub fn open_path(path: &Path, follow: bool) -> Result<OwnedFd, FileError> {
    let flags = libc::O_PATH | if follow { 0 } else { libc::O_NOFOLLOW };
    open_at(None, path, flags).map_err(|source| FileError::Open { path: path.to_owned(), source })
}

/// Opens `path` below the directory `root` for reading only if it is a
/// regular file, resolving it as a process whose root directory is `root`
/// would (`openat2` with `RESOLVE_IN_ROOT`: `..` and absolute symlinks stay
/// below `root`; `RESOLVE_NO_MAGICLINKS`), never following a symlink as the
/// last component. Then as [`open_regular`].
pub fn open_regular_at(root: BorrowedFd<'_>, path: &Path, shown: &Path) -> Result<(File, libc::stat), FileError> {
    let opath = open_path_at(root, path, shown)?;
    reopen_regular(opath.as_fd(), shown)
}

/// The `O_PATH` step of [`open_regular_at`]. The walk is made from the
/// kernel's cache of names alone where the kernel can (`RESOLVE_CACHED`,
/// Linux 5.12+): no lookup reaches a filesystem, so a directory on a mount
/// whose server stopped answering cannot hold the walk (a name not cached
/// fails, `EAGAIN`; a file some process maps has its whole path cached).
/// An older kernel walks as usual.
pub fn open_path_at(root: BorrowedFd<'_>, path: &Path, shown: &Path) -> Result<OwnedFd, FileError> {
    let open_err = |source| FileError::Open { path: shown.to_owned(), source };
    let c = cstring(path.as_os_str()).map_err(open_err)?;
    let walk = |resolve: u64| -> io::Result<OwnedFd> {
        // SAFETY: open_how is plain integers; all-zero is its empty value.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS | resolve;
        // SAFETY: openat2 reads a valid C string and an open_how of the size given.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor openat2 just returned (it fits an i32), owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    };
    match walk(libc::RESOLVE_CACHED) {
        // Before Linux 5.12: no RESOLVE_CACHED.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => walk(0).map_err(open_err),
        other => other.map_err(open_err),
    }
}

/// The mount the file open at `fd` is on (the `mnt_id` of
/// `/proc/self/fdinfo/N`): the kernel prints it from the descriptor, with
/// no call into the file's filesystem.
pub fn mount_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut info = String::new();
    use std::io::Read;
    File::open(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?.take(4096).read_to_string(&mut info)?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no mnt_id in fdinfo"))
}

/// Largest mount table read ([`mount_type`]): a line per mount, some
/// hundred bytes each, so about 16,000 mounts.
pub const MAX_MOUNTINFO: u64 = 4 << 20;

/// The filesystem type of mount `id` in a mount table (`/proc/PID/mountinfo`:
/// the mounts of that process's namespace; mount ids are the kernel's,
/// the same in every namespace), None if it does not list it. The table
/// is read up to [`MAX_MOUNTINFO`] (a longer one is an error); printing it
/// calls into no filesystem.
pub fn mount_type(mountinfo: &Path, id: u64) -> io::Result<Option<String>> {
    use std::io::Read;
    let mut text = Vec::new();
    File::open(mountinfo)?.take(MAX_MOUNTINFO + 1).read_to_end(&mut text)?;
    if text.len() as u64 > MAX_MOUNTINFO {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "mount table too long"));
    }
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
    // (spaces inside paths are printed as \040, so " - " only separates).
    let wanted = id.to_string();
    for line in text.split(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(line);
        if line.split(' ').next() != Some(wanted.as_str()) {
            continue;
        }
        return Ok(line.split_once(" - ").and_then(|(_, rest)| rest.split(' ').next()).map(str::to_owned));
    }
    Ok(None)
}

/// Whether files of this filesystem type are served by a process (FUSE:
/// `fuse`, `fuseblk`, `fuse.<subtype>`; any user may serve one where
/// `/dev/fuse` is open to all, as on Debian), so that a call into it waits
/// for that process. `virtiofs` speaks FUSE's protocol to the hypervisor's
/// daemon and only root can mount it: not.
pub fn served_by_a_process(fstype: &str) -> bool {
    fstype == "fuse" || fstype == "fuseblk" || fstype.starts_with("fuse.")
}

/// Reopens the `O_PATH` descriptor `opath` for reading if it is a regular
/// file (`shown` names it in errors).
pub fn reopen_regular(opath: BorrowedFd<'_>, shown: &Path) -> Result<(File, libc::stat), FileError> {
    let open_err = |source| FileError::Open { path: shown.to_owned(), source };
    let st = stat(opath).map_err(open_err)?;
    let found = Kind::of(st.st_mode);
    if found != Kind::Regular {
        return Err(FileError::Kind { path: shown.to_owned(), found, wanted: Kind::Regular });
    }
    // Non-blocking: a lease held on it makes open fail (EWOULDBLOCK) rather
    // than wait up to lease-break-time.
    let fd = open_at(None, &fd_path(opath), libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY).map_err(open_err)?;
    let file = File::from(fd);
    let again = stat(file.as_fd()).map_err(open_err)?;
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
        // Cannot happen (the descriptor names one inode); said if it does.
        return Err(open_err(io::ErrorKind::InvalidData.into()));
    }
    Ok((file, st))
}

/// An `O_PATH` descriptor of the socket file `path`, which must be a socket
/// (a symlink there is refused, not followed) owned by a uid `owner_ok`
/// accepts. Connect to [`fd_path`] of it: the socket reached is the one
/// checked, whatever the name points to by then.
pub fn open_socket(path: &Path, owner_ok: impl Fn(u32) -> bool) -> Result<OwnedFd, FileError> {
    let fd = open_at(None, path, libc::O_PATH | libc::O_NOFOLLOW).map_err(|source| FileError::Open { path: path.to_owned(), source })?;
    let st = stat(fd.as_fd()).map_err(|source| FileError::Open { path: path.to_owned(), source })?;
    let found = Kind::of(st.st_mode);
    if found != Kind::Socket {
        return Err(FileError::Kind { path: path.to_owned(), found, wanted: Kind::Socket });
    }
    if !owner_ok(st.st_uid) {
        return Err(FileError::Owner { path: path.to_owned(), owner: st.st_uid });
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rk-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mkfifo(path: &Path) {
        let c = cstring(path.as_os_str()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
    }

    #[test]
    fn only_regular_files_are_opened_and_a_fifo_never_blocks() {
        let dir = temp("regular");
        std::fs::write(dir.join("file"), b"hello").unwrap();
        let (mut f, st) = open_regular(&dir.join("file"), false).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!((s.as_str(), st.st_size), ("hello", 5));
        // A FIFO with no writer: open(O_RDONLY) would wait for one forever.
        mkfifo(&dir.join("fifo"));
        let e = open_regular(&dir.join("fifo"), true).unwrap_err();
        assert!(matches!(e, FileError::Kind { found: Kind::Fifo, .. }), "{e}");
        // A symlink: refused as the last component unless followed.
        std::os::unix::fs::symlink(dir.join("file"), dir.join("link")).unwrap();
        let e = open_regular(&dir.join("link"), false).unwrap_err();
        assert!(matches!(e, FileError::Kind { found: Kind::Symlink, .. }), "{e}");
        assert!(open_regular(&dir.join("link"), true).is_ok());
        let e = open_regular(Path::new("/dev/null"), true).unwrap_err();
        assert!(matches!(e, FileError::Kind { found: Kind::CharDevice, .. }), "{e}");
        assert!(open_regular(&dir.join("absent"), true).unwrap_err().is_not_found());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn in_root_resolution_keeps_absolute_symlinks_below_the_root() {
        let dir = temp("inroot");
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::fs::write(dir.join("etc/name"), b"inside").unwrap();
        // An absolute symlink in the tree means the tree's own /etc/name.
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::os::unix::fs::symlink("/etc", dir.join("lib/up")).unwrap();
        let root = File::open(&dir).unwrap();
        let (mut f, _) = open_regular_at(root.as_fd(), Path::new("lib/up/name"), Path::new("shown")).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "inside");
        // `..` stops at the root too.
        assert!(open_regular_at(root.as_fd(), Path::new("../../../../etc/name"), Path::new("shown")).is_ok());
        mkfifo(&dir.join("fifo"));
        let e = open_regular_at(root.as_fd(), Path::new("fifo"), Path::new("shown")).unwrap_err();
        assert!(matches!(e, FileError::Kind { found: Kind::Fifo, .. }), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_descriptor_s_mount_and_its_type_come_from_the_kernel_s_tables() {
        // /proc is procfs in every mount namespace this runs in.
        let fd = open_path(Path::new("/proc/self/status"), false).unwrap();
        let id = mount_id(fd.as_fd()).unwrap();
        assert_eq!(mount_type(Path::new("/proc/self/mountinfo"), id).unwrap().as_deref(), Some("proc"));
        assert_eq!(mount_type(Path::new("/proc/self/mountinfo"), u64::MAX).unwrap(), None);
        // A table as the kernel prints it, spaces in paths escaped.
        let dir = temp("mountinfo");
        std::fs::write(
            dir.join("mountinfo"),
            "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
             66 46 0:40 / /tmp/a\\040-\\040b rw,nosuid,nodev - fuse.sshfs u@h:/ rw,user_id=1000\n\
             67 46 0:41 / /tmp/c rw - fuse /tmp/d rw,allow_other\n",
        )
        .unwrap();
        let table = dir.join("mountinfo");
        assert_eq!(mount_type(&table, 66).unwrap().as_deref(), Some("fuse.sshfs"));
        assert_eq!(mount_type(&table, 67).unwrap().as_deref(), Some("fuse"));
        assert_eq!(mount_type(&table, 6).unwrap(), None);
        for (fstype, served) in
            [("fuse", true), ("fuseblk", true), ("fuse.sshfs", true), ("virtiofs", false), ("ext4", false), ("fusectl", false)]
        {
            assert_eq!(served_by_a_process(fstype), served, "{fstype}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_socket_is_connected_through_its_checked_descriptor_never_a_symlink() {
        let dir = temp("socket");
        let path = dir.join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let fd = open_socket(&path, |uid| uid == me).unwrap();
        let _client = std::os::unix::net::UnixStream::connect(fd_path(fd.as_fd())).unwrap();
        assert!(listener.accept().is_ok());
        let e = open_socket(&path, |uid| uid != me).unwrap_err();
        assert!(matches!(e, FileError::Owner { .. }), "{e}");
        std::os::unix::fs::symlink(&path, dir.join("link")).unwrap();
        let e = open_socket(&dir.join("link"), |_| true).unwrap_err();
        assert!(matches!(e, FileError::Kind { found: Kind::Symlink, .. }), "{e}");
        std::fs::write(dir.join("plain"), b"").unwrap();
        assert!(matches!(open_socket(&dir.join("plain"), |_| true), Err(FileError::Kind { found: Kind::Regular, .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
