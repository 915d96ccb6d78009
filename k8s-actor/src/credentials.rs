//! The cluster credentials are the k8s-actor's alone: it reads the service
//! account token, or a kubeconfig, only from a file no unprivileged user
//! but itself may read.
//!
//! In a pod, the chart mounts the token as a projected volume with
//! `fsGroup` the k8s-actor's group (root's file, that group, 0640:
//! `automountServiceAccountToken: false`, the automounted one being
//! readable by every process of the container, the span-actor and exporter
//! included, which parse hostile bytes). Out of a cluster, the kubeconfig
//! belongs to the k8s-actor's user (0600). A file whose mode lets anyone
//! else read it is refused at start, saying why: the k8s-actor does not
//! talk to the API server with credentials another user of the node may
//! already hold.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::K8sError;

/// Where a pod's service account token is (kube reads it there).
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Why a credentials file is not the reader's alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Every user may read it.
    World,
    /// Its group, which is neither the reader's nor root's, may read it.
    Group(u32),
    /// It belongs to another unprivileged user.
    Owner(u32),
}

/// Whether a file of `owner`, `group` and `mode` is readable by no
/// unprivileged user but `me` (`(uid, gid)`). Root reads every file
/// anyway: a reader running as root (the k8s-actor run alone, in tests)
/// only refuses a file every user may read.
pub fn exposure(owner: u32, group: u32, mode: u32, me: (u32, u32)) -> Option<Exposure> {
    if mode & 0o004 != 0 {
        return Some(Exposure::World);
    }
    if me.0 == 0 {
        return None;
    }
    if mode & 0o040 != 0 && group != me.1 && group != 0 {
        return Some(Exposure::Group(group));
    }
    if mode & 0o400 != 0 && owner != me.0 && owner != 0 {
        return Some(Exposure::Owner(owner));
    }
    None
}

/// Checks `path` (followed: the projected volume's files are symlinks
/// into its current data) before the client reads it.
pub fn check(path: &Path) -> Result<(), K8sError> {
    let meta = std::fs::metadata(path).map_err(|source| K8sError::Credentials { path: path.to_owned(), source })?;
    // SAFETY: geteuid and getegid have no preconditions.
    let me = unsafe { (libc::geteuid(), libc::getegid()) };
    match exposure(meta.uid(), meta.gid(), meta.mode(), me) {
        None => Ok(()),
        Some(why) => Err(K8sError::CredentialsExposed {
            path: path.to_owned(),
            why: match why {
                Exposure::World => "every user may read it".to_owned(),
                Exposure::Group(g) => format!("its group {g}, not the k8s-actor's ({}), may read it", me.1),
                Exposure::Owner(u) => format!("it belongs to uid {u}, not the k8s-actor's ({})", me.0),
            },
            mode: meta.mode() & 0o7777,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const ME: (u32, u32) = (7465, 7465);

    #[test]
    fn only_the_k8s_actor_may_read_them() {
        // The chart's projected token (fsGroup): root's, its group, 0640.
        assert_eq!(exposure(0, 7465, 0o640, ME), None);
        // A kubeconfig of its own.
        assert_eq!(exposure(7465, 7465, 0o600, ME), None);
        assert_eq!(exposure(7465, 0, 0o400, ME), None);
        // The automounted token (world-readable) and the actors' group.
        assert_eq!(exposure(0, 0, 0o644, ME), Some(Exposure::World));
        assert_eq!(exposure(0, 7464, 0o640, ME), Some(Exposure::Group(7464)));
        assert_eq!(exposure(7464, 7465, 0o640, ME), Some(Exposure::Owner(7464)));
        // Root-only files cannot be read by it at all (the open says so);
        // root reading alone refuses what all may read.
        assert_eq!(exposure(0, 0, 0o600, ME), None);
        assert_eq!(exposure(7464, 7464, 0o600, (0, 0)), None);
        assert_eq!(exposure(7464, 7464, 0o644, (0, 0)), Some(Exposure::World));
    }

    #[test]
    fn a_world_readable_file_is_refused_saying_why() {
        let dir = std::env::temp_dir().join(format!("k8s-cred-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "secret-token").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = check(&token).unwrap_err().to_string();
        assert!(err.contains("every user may read it") && err.contains("0644"), "{err}");
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        check(&token).unwrap();
        // Through a symlink, as a projected volume's `..data/token`.
        std::os::unix::fs::symlink(&token, dir.join("link")).unwrap();
        check(&dir.join("link")).unwrap();
        assert!(check(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
