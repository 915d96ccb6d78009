//! The runtime directory and the actors' directory, made safely: created
//! private, then opened without following a symlink (`O_NOFOLLOW`), checked
//! to be a directory owned by root or by the user it is for, and only then
//! given its owner and mode through the open descriptor (`fchown`,
//! `fchmod`). A symlink or another user's directory planted at the path is a
//! start-up error, never followed.
//!
//! A directory that root keeps its own files in below a path it does not
//! make itself (the pins on a bpffs) is opened by [`open_trusted`]: each
//! component from `/` opened under the previous one without following a
//! symlink, each checked to be root's and writable by nobody else (or
//! sticky), so that no one else can put anything in the way. Root's own
//! runtime directory is made by [`ensure_trusted`]: its parents so
//! checked (made, root's, where missing), then the directory itself
//! made and opened under the last of them: a user who owns a parent could
//! otherwise rename root's directory away and put one of theirs in its
//! place, between the start's checks or between two starts.
//!
//! Layout: [`ensure`], [`ensure_trusted`], [`open_trusted`] and their
//! [`DirError`].

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a directory could not be made safe.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("cannot create {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open {path} as a directory without following symlinks (a symlink there is refused)")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} belongs to uid {owner}, not root or uid {expected}: refusing to use it")]
    Owner { path: PathBuf, owner: u32, expected: u32 },
    #[error("{path} belongs to uid {owner}, not root: refusing to use what is below it")]
    NotRoot { path: PathBuf, owner: u32 },
    #[error("{path} is writable by others (mode {mode:04o}, not sticky): another user could replace what is below it; refusing to use it")]
    OpenToOthers { path: PathBuf, mode: u32 },
    #[error("{path} is not an absolute path of plain names (no `.` or `..`)")]
    NotPlain { path: PathBuf },
    #[error("cannot set owner or mode of {path}")]
    Permissions {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: every directory above it must be root's and writable by no one else")]
    Parent {
        path: PathBuf,
        #[source]
        source: Box<DirError>,
    },
}

impl DirError {
    /// This error, met on the way to `path`'s parent.
    fn under(self, path: &Path) -> DirError {
        DirError::Parent { path: path.to_owned(), source: Box::new(self) }
    }
}

/// Makes `path` a directory owned by `uid:gid` with `mode` (its parents are
/// created as needed, root's), refusing a symlink or someone else's
/// directory at `path`.
pub fn ensure(path: &Path, uid: u32, gid: u32, mode: u32) -> Result<(), DirError> {
    let create = |source| DirError::Create { path: path.to_owned(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(create)?;
    }
    match DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(create(e)),
    }
    let dir: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| DirError::Open { path: path.to_owned(), source })?;
    take(&dir, path, uid, gid, mode)
}

/// [`ensure`] for root's own directories: every directory above `path`
/// (absolute, plain names) is opened from `/` down without following a
/// symlink and must be root's and writable by nobody else unless sticky
/// ([`open_trusted`]'s rule; a missing one is made, root's, 0755); `path`
/// itself is made and opened under the last of them (`mkdirat`,
/// `openat` with `O_NOFOLLOW`), then given `uid:gid` and `mode` as
/// [`ensure`] does.
pub fn ensure_trusted(path: &Path, uid: u32, gid: u32, mode: u32) -> Result<(), DirError> {
    use std::os::fd::AsFd;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(DirError::NotPlain { path: path.to_owned() });
    };
    let parent = walk_trusted(parent, true).map_err(|e| e.under(path))?;
    crate::files::mkdir_at(parent.as_fd(), name, 0o700).map_err(|source| DirError::Create { path: path.to_owned(), source })?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let dir = File::from(
        crate::files::open_at(Some(parent.as_fd()), Path::new(name), flags)
            .map_err(|source| DirError::Open { path: path.to_owned(), source })?,
    );
    take(&dir, path, uid, gid, mode)
}

/// Gives the directory open at `dir` (at `path`, for messages) its owner
/// and mode, refusing someone else's.
fn take(dir: &File, path: &Path, uid: u32, gid: u32, mode: u32) -> Result<(), DirError> {
    let perm = |source| DirError::Permissions { path: path.to_owned(), source };
    let meta = dir.metadata().map_err(perm)?;
    let (mut owner, group) = (meta.uid(), meta.gid());
    if owner != 0 && owner != uid {
        return Err(DirError::Owner { path: path.to_owned(), owner, expected: uid });
    }
    // The mode is set while root owns the directory, and only what differs
    // is changed: root changing the mode of a directory it gave away would
    // need CAP_FOWNER, which a container (the DaemonSet) does not grant.
    if meta.mode() & 0o7777 != mode {
        if owner != 0 {
            std::os::unix::fs::fchown(dir, Some(0), None).map_err(perm)?;
            owner = 0;
        }
        dir.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(perm)?;
    }
    if (owner, group) != (uid, gid) {
        std::os::unix::fs::fchown(dir, Some(uid), Some(gid)).map_err(perm)?;
    }
    Ok(())
}

/// Opens the directory `path` (absolute, plain names) for root's own use:
/// every directory from `/` down to it is opened under the previous one
/// with `O_NOFOLLOW` (no symlink anywhere on the way is followed) and must
/// belong to root and be writable by nobody else, unless sticky (there
/// nobody else may remove or rename root's entries: `/tmp`, or a bpffs
/// mounted without `mode=`). What is reached below the descriptor returned
/// (and, as long as those directories stay so, below `path`) only root can
/// change.
pub fn open_trusted(path: &Path) -> Result<File, DirError> {
    walk_trusted(path, false)
}

/// [`open_trusted`], making missing directories (root's, 0755) when
/// `create`.
fn walk_trusted(path: &Path, create: bool) -> Result<File, DirError> {
    use std::os::fd::AsFd;
    use std::path::Component;
    let open_err = |at: &Path| {
        let at = at.to_owned();
        move |source| DirError::Open { path: at, source }
    };
    if !path.is_absolute() {
        return Err(DirError::NotPlain { path: path.to_owned() });
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let mut at = PathBuf::from("/");
    let mut dir = File::from(crate::files::open_at(None, &at, flags).map_err(open_err(&at))?);
    check_trusted(&dir, &at)?;
    for c in path.components() {
        match c {
            Component::RootDir => continue,
            Component::Normal(name) => {
                at.push(name);
                if create {
                    crate::files::mkdir_at(dir.as_fd(), name, 0o755).map_err(|source| DirError::Create { path: at.clone(), source })?;
                }
                dir = File::from(crate::files::open_at(Some(dir.as_fd()), Path::new(name), flags).map_err(open_err(&at))?);
                check_trusted(&dir, &at)?;
            }
            _ => return Err(DirError::NotPlain { path: path.to_owned() }),
        }
    }
    Ok(dir)
}

fn check_trusted(dir: &File, path: &Path) -> Result<(), DirError> {
    let meta = dir.metadata().map_err(|source| DirError::Open { path: path.to_owned(), source })?;
    if meta.uid() != 0 {
        return Err(DirError::NotRoot { path: path.to_owned(), owner: meta.uid() });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
        return Err(DirError::OpenToOthers { path: path.to_owned(), mode });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn euid() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    #[test]
    fn makes_a_private_directory_and_refuses_a_symlink() {
        let base = std::env::temp_dir().join(format!("rk-dirs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let me = euid();
        let gid = unsafe { libc::getegid() };
        let dir = base.join("run");
        ensure(&dir, me, gid, 0o750).unwrap();
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o777, 0o750);
        // Again on the existing directory: fine.
        ensure(&dir, me, gid, 0o755).unwrap();
        assert_eq!(std::fs::symlink_metadata(&dir).unwrap().mode() & 0o777, 0o755);
        // A symlink planted at the path is refused, its target untouched.
        let target = base.join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(ensure(&link, me, gid, 0o755), Err(DirError::Open { .. })));
        assert_eq!(std::fs::symlink_metadata(&target).unwrap().mode() & 0o777, 0o700);
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Clears `cap` from this thread's effective set (capabilities are per
    /// thread: the rest of the test process keeps it).
    fn drop_effective(cap: u32) {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut header = Header { version: 0x2008_0522, pid: 0 };
        let mut data = [Data::default(); 2];
        // SAFETY: capget/capset read and write a valid header and two data
        // structs (the _LINUX_CAPABILITY_VERSION_3 layout).
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()), 0, "capget");
            data[(cap / 32) as usize].effective &= !(1 << (cap % 32));
            assert_eq!(libc::syscall(libc::SYS_capset, &header, data.as_ptr()), 0, "capset");
        }
    }

    /// A container gives root CAP_CHOWN but not CAP_FOWNER: giving a
    /// directory away, and finding it given away on a restart (an emptyDir
    /// outlives the container), must not need CAP_FOWNER.
    #[test]
    fn giving_a_directory_away_needs_no_cap_fowner() {
        if euid() != 0 {
            eprintln!("SKIPPED: needs root (a directory given to another uid)");
            return;
        }
        const CAP_FOWNER: u32 = 3;
        let base = std::env::temp_dir().join(format!("rk-fowner-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("actors");
        std::thread::spawn({
            let dir = dir.clone();
            move || {
                drop_effective(CAP_FOWNER);
                ensure(&dir, 65534, 65534, 0o750).expect("give a new directory away without CAP_FOWNER");
                ensure(&dir, 65534, 65534, 0o750).expect("find it given away, without CAP_FOWNER");
                // The drop took: this thread cannot chmod another's directory.
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap_err();
            }
        })
        .join()
        .expect("the thread without CAP_FOWNER");
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (65534, 65534, 0o750));
        // Its owner opened it up: repaired without CAP_FOWNER too.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::thread::spawn({
            let dir = dir.clone();
            move || {
                drop_effective(CAP_FOWNER);
                ensure(&dir, 65534, 65534, 0o750).expect("repair a given-away directory's mode without CAP_FOWNER");
            }
        })
        .join()
        .expect("the thread without CAP_FOWNER");
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (65534, 65534, 0o750));
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Root's runtime directory under a directory another user owns (who
    /// could rename it away and put theirs there) is refused, saying
    /// which; under root's parents it is made, missing parents too.
    #[test]
    fn a_runtime_directory_under_another_user_s_directory_is_refused() {
        if euid() != 0 {
            eprintln!("SKIPPED: needs root (a directory of another uid)");
            return;
        }
        let base = std::env::temp_dir().join(format!("rk-rt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("home/user")).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(base.join("home"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(base.join("home/user"), Some(65534), Some(65534)).unwrap();
        let run = base.join("home/user/ringtail/run");
        let e = ensure_trusted(&run, 0, 0, 0o755).unwrap_err();
        let text = format!("{e}: {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default());
        assert!(matches!(&e, DirError::Parent { source, .. } if matches!(**source, DirError::NotRoot { owner: 65534, .. })), "{text}");
        assert!(text.contains(&format!("{}: every directory above it must be root's", run.display())), "{text}");
        assert!(text.contains(&format!("{} belongs to uid 65534, not root", base.join("home/user").display())), "{text}");
        assert!(!base.join("home/user/ringtail").exists(), "nothing made below the user's directory");
        // A parent open to all (not sticky), a symlink on the way: refused.
        std::fs::create_dir(base.join("open")).unwrap();
        std::fs::set_permissions(base.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ensure_trusted(&base.join("open/run"), 0, 0, 0o755).unwrap_err();
        assert!(matches!(&e, DirError::Parent { source, .. } if matches!(**source, DirError::OpenToOthers { mode: 0o777, .. })), "{e}");
        std::os::unix::fs::symlink(base.join("home/user"), base.join("link")).unwrap();
        let e = ensure_trusted(&base.join("link/run"), 0, 0, 0o755).unwrap_err();
        assert!(matches!(&e, DirError::Parent { source, .. } if matches!(**source, DirError::Open { .. })), "{e}");
        // Root's all the way: made, missing parents root's and 0755.
        let good = base.join("var/lib/rt/run");
        ensure_trusted(&good, 0, 0, 0o755).unwrap();
        ensure_trusted(&good.join("actors"), 65534, 65534, 0o750).unwrap();
        for (p, want) in [(base.join("var/lib"), (0, 0o755)), (good.clone(), (0, 0o755)), (good.join("actors"), (65534, 0o750))] {
            let m = std::fs::symlink_metadata(&p).unwrap();
            assert_eq!((m.uid(), m.mode() & 0o7777), want, "{}", p.display());
        }
        // The directory itself planted by another user: refused as ensure does.
        std::fs::create_dir(base.join("var/lib/planted")).unwrap();
        std::os::unix::fs::chown(base.join("var/lib/planted"), Some(65534), None).unwrap();
        assert!(matches!(ensure_trusted(&base.join("var/lib/planted"), 0, 0, 0o755), Err(DirError::Owner { owner: 65534, .. })));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_trusted_directory_is_root_s_all_the_way_down() {
        if euid() != 0 {
            eprintln!("SKIPPED: needs root (directories of root and of another uid)");
            return;
        }
        let base = std::env::temp_dir().join(format!("rk-trusted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(base.join("a"), std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::set_permissions(base.join("a/b"), std::fs::Permissions::from_mode(0o755)).unwrap();
        // /tmp and a are sticky: fine.
        assert!(open_trusted(&base.join("a/b")).is_ok());
        std::fs::set_permissions(base.join("a"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = open_trusted(&base.join("a/b")).unwrap_err();
        assert!(matches!(&e, DirError::OpenToOthers { path, mode: 0o777 } if path == &base.join("a")), "{e}");
        std::fs::set_permissions(base.join("a"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(base.join("a/b"), Some(65534), None).unwrap();
        let e = open_trusted(&base.join("a/b")).unwrap_err();
        assert!(matches!(&e, DirError::NotRoot { owner: 65534, .. }), "{e}");
        // A symlink on the way is not followed.
        std::fs::create_dir(base.join("c")).unwrap();
        std::os::unix::fs::symlink(base.join("c"), base.join("a/link")).unwrap();
        assert!(matches!(open_trusted(&base.join("a/link")), Err(DirError::Open { .. })));
        assert!(matches!(open_trusted(&base.join("a/../c")), Err(DirError::NotPlain { .. })));
        let _ = std::fs::remove_dir_all(&base);
    }
}
