//! The runtime directory and the actors' directory, made safely: created
//! private, then opened without following a symlink (`O_NOFOLLOW`), checked
//! to be a directory owned by root or by the user it is for, and only then
//! given its owner and mode through the open descriptor (`fchown`,
//! `fchmod`). A symlink or another user's directory planted at the path is a
//! start-up error, never followed.
//!
//! Layout: [`ensure`] and its [`DirError`].

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
    #[error("cannot set owner or mode of {path}")]
    Permissions {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
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
    let perm = |source| DirError::Permissions { path: path.to_owned(), source };
    let owner = dir.metadata().map_err(perm)?.uid();
    if owner != 0 && owner != uid {
        return Err(DirError::Owner { path: path.to_owned(), owner, expected: uid });
    }
    std::os::unix::fs::fchown(&dir, Some(uid), Some(gid)).map_err(perm)?;
    dir.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(perm)?;
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
}
