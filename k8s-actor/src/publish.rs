//! Writing the k8s-actor's two files into its directory
//! (`endpoints::k8s_dir`: under the supervisor, made by it in root's
//! runtime directory, the k8s-actor's uid, the actors' group and 2750, so
//! that the actors read what it writes and write nothing there; run alone,
//! made here, this uid's and 0700): each a new file (0640: the directory's
//! group reads it), written whole, then renamed over the old one, so a
//! reader sees the previous version or the next, never half of one.
//!
//! The directory is opened once, without following a symlink, and checked
//! to be this uid's and writable by no one else; every later step is
//! relative to that descriptor (`openat`, `renameat`), never through the
//! path again. The temporary file is made with `O_CREAT | O_EXCL |
//! O_NOFOLLOW`: nothing planted in its place is written through.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::K8sError;

/// A directory the files are published into.
pub struct Publisher {
    dir: File,
    path: PathBuf,
}

fn cstr(name: &str) -> CString {
    // The names are this crate's constants, without NUL bytes.
    CString::new(name.as_bytes()).expect("file names have no NUL byte")
}

impl Publisher {
    /// Takes `path` (the supervisor made it this uid's), or makes it this
    /// uid's private directory, and opens it.
    pub fn open(path: &Path) -> Result<Publisher, K8sError> {
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let made = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.uid() != 0);
        if !made {
            runtime_kit::dirs::ensure(path, uid, gid, 0o700).map_err(|source| K8sError::Directory { source })?;
        }
        let fd = runtime_kit::files::open_at(None, path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .map_err(|source| K8sError::Publish { path: path.to_owned(), source })?;
        let dir = File::from(fd);
        let meta = dir.metadata().map_err(|source| K8sError::Publish { path: path.to_owned(), source })?;
        if meta.uid() != uid || meta.mode() & 0o022 != 0 {
            return Err(K8sError::Publish { path: path.to_owned(), source: std::io::ErrorKind::PermissionDenied.into() });
        }
        Ok(Publisher { dir, path: path.to_owned() })
    }

    /// The directory's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file `name` with `bytes`: `.<name>.tmp` written, then
    /// renamed over `name`.
    pub fn replace(&self, name: &str, bytes: &[u8]) -> Result<(), K8sError> {
        let err = |source| K8sError::Publish { path: self.path.join(name), source };
        let tmp = format!(".{name}.tmp");
        let (ctmp, cname) = (cstr(&tmp), cstr(name));
        let dirfd = self.dir.as_raw_fd();
        // A temporary file a previous start left: removed, whatever it is.
        // SAFETY: a valid C string, a live directory descriptor.
        unsafe { libc::unlinkat(dirfd, ctmp.as_ptr(), 0) };
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: as above; the mode is an integer.
        let fd = unsafe { libc::openat(dirfd, ctmp.as_ptr(), flags, 0o640 as libc::c_uint) };
        if fd < 0 {
            return Err(err(std::io::Error::last_os_error()));
        }
        // SAFETY: openat just returned this descriptor; nothing else owns it.
        let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let written = file.set_permissions(std::fs::Permissions::from_mode(0o640)).and_then(|()| file.write_all(bytes));
        if let Err(e) = written {
            // SAFETY: as above.
            unsafe { libc::unlinkat(dirfd, ctmp.as_ptr(), 0) };
            return Err(err(e));
        }
        drop(file);
        // SAFETY: valid C strings, a live directory descriptor for both.
        if unsafe { libc::renameat(dirfd, ctmp.as_ptr(), dirfd, cname.as_ptr()) } != 0 {
            return Err(err(std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Removes the file `name` (at an orderly stop: nothing stale is left
    /// for a reader to take as current).
    pub fn remove(&self, name: &str) {
        let c = cstr(name);
        // SAFETY: a valid C string, a live directory descriptor.
        unsafe { libc::unlinkat(self.dir.as_fd().as_raw_fd(), c.as_ptr(), 0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("k8s-publish-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn files_are_replaced_whole_and_private() {
        let d = base("whole");
        let p = Publisher::open(&d.join("k8s")).unwrap();
        assert_eq!(std::fs::metadata(d.join("k8s")).unwrap().mode() & 0o777, 0o700);
        p.replace("pods.msgpack", b"one").unwrap();
        p.replace("pods.msgpack", b"two").unwrap();
        assert_eq!(std::fs::read(d.join("k8s/pods.msgpack")).unwrap(), b"two");
        assert_eq!(std::fs::metadata(d.join("k8s/pods.msgpack")).unwrap().mode() & 0o777, 0o640);
        let names: Vec<_> = std::fs::read_dir(d.join("k8s")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["pods.msgpack"], "no temporary file left");
        p.remove("pods.msgpack");
        assert!(!d.join("k8s/pods.msgpack").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_symlink_in_place_of_the_directory_or_the_temporary_file_is_never_written_through() {
        let d = base("symlink");
        let target = d.join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, d.join("k8s")).unwrap();
        assert!(Publisher::open(&d.join("k8s")).is_err(), "a symlinked directory is refused");
        std::fs::remove_file(d.join("k8s")).unwrap();
        let p = Publisher::open(&d.join("k8s")).unwrap();
        std::os::unix::fs::symlink(target.join("victim"), d.join("k8s/.pods.msgpack.tmp")).unwrap();
        p.replace("pods.msgpack", b"data").unwrap();
        assert!(!target.join("victim").exists(), "the planted symlink was removed, not followed");
        assert_eq!(std::fs::read(d.join("k8s/pods.msgpack")).unwrap(), b"data");
        let _ = std::fs::remove_dir_all(&d);
    }
}
