//! `[actors]`: how the unprivileged actors run.
//!
//! The actors hold every captured request and the exporter's credentials,
//! and their sockets admit their uid: whoever else runs as that user can read
//! them. Hence a user of ringtail's own (`ringtail`, made by `ringtail.sh` and
//! sysusers.d), never `nobody`, and one that no other process runs as
//! ([`ActorSettings::check_unshared`], which the supervisor calls at start
//! with what `/proc` shows) unless `allow_shared_user` says so.

use serde::{Deserialize, Serialize};

use crate::{invalid, ConfigError};

/// The user made for the actors (`useradd --system ringtail`, sysusers.d).
pub const DEFAULT_USER: &str = "ringtail";

/// The k8s-actor's own user (`useradd --system ringtail-k8s`): the only
/// one that may read the cluster credentials.
pub const DEFAULT_K8S_USER: &str = "ringtail-k8s";

/// How the unprivileged actors run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActorSettings {
    /// User the span-actor and exporter-actor run as: never root, and by
    /// default neither `nobody` nor a user other processes run as, since
    /// every process of that user can read the captured requests.
    pub user: String,
    /// Group they run as; empty = the user's primary group. Also the group
    /// that may read the loader's socket.
    pub group: String,
    /// Accept a user other processes run as (or `nobody`): those processes
    /// can then read every captured request and the exporter's headers.
    pub allow_shared_user: bool,
    /// User the k8s-actor runs as (with its primary group), when
    /// Kubernetes metadata is on: a user of its own, neither `user` nor
    /// in `user`'s group, since it alone may read the cluster credentials
    /// (the service account token, a kubeconfig) while the span-actor and
    /// exporter, which parse hostile bytes, may not.
    pub k8s_user: String,
}

impl Default for ActorSettings {
    fn default() -> Self {
        ActorSettings { user: DEFAULT_USER.into(), group: String::new(), allow_shared_user: false, k8s_user: DEFAULT_K8S_USER.into() }
    }
}

/// Example given with the rules on `actors.user`.
const EXAMPLE: &str = "\"ringtail\"";

/// Example given with the rules on `actors.k8s_user`.
const K8S_EXAMPLE: &str = "\"ringtail-k8s\"";

impl ActorSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.user.is_empty() || self.user == "root" || self.user == "0" {
            return Err(invalid("actors.user", "must name an unprivileged user", EXAMPLE, format!("{:?}", self.user)));
        }
        if self.k8s_user.is_empty()
            || self.k8s_user == "root"
            || self.k8s_user == "0"
            || self.k8s_user == "nobody"
            || self.k8s_user == "65534"
        {
            return Err(invalid(
                "actors.k8s_user",
                "must name an unprivileged user of the k8s-actor's own (not nobody)",
                K8S_EXAMPLE,
                format!("{:?}", self.k8s_user),
            ));
        }
        if self.k8s_user == self.user {
            return Err(invalid(
                "actors.k8s_user",
                "must differ from actors.user: the span-actor and exporter parse hostile bytes and must not read the cluster credentials",
                K8S_EXAMPLE,
                format!("{:?}", self.k8s_user),
            ));
        }
        if !self.allow_shared_user && (self.user == "nobody" || self.user == "65534") {
            return Err(invalid(
                "actors.user",
                "must be a user of ringtail's own: nobody is shared by other daemons, which could read every captured request \
                 (actors.allow_shared_user = true accepts it)",
                EXAMPLE,
                format!("{:?}", self.user),
            ));
        }
        Ok(())
    }

    /// The rules between the two users, once resolved (`(uid, gid)` each):
    /// the k8s-actor's uid and group are neither the actors' uid nor group
    /// (a file its group may read would be theirs to read).
    pub fn check_k8s_ids(&self, actors: (u32, u32), k8s: (u32, u32)) -> Result<(), ConfigError> {
        if k8s.0 == actors.0 || k8s.1 == actors.1 || k8s.0 == 0 || k8s.1 == 0 {
            return Err(invalid(
                "actors.k8s_user",
                "must be a user whose uid and primary group are neither actors.user's nor root's: \
                 the span-actor and exporter must not read the cluster credentials",
                K8S_EXAMPLE,
                format!("{:?}, uid {} gid {}, and actors.user uid {} gid {}", self.k8s_user, k8s.0, k8s.1, actors.0, actors.1),
            ));
        }
        Ok(())
    }

    /// The start-time rule for the k8s-actor's user, as for the actors'
    /// ([`ActorSettings::check_unshared`]), with no way around it: every
    /// process of that uid could read the cluster credentials.
    pub fn check_k8s_unshared(&self, uid: u32, others: &[(u32, String)]) -> Result<(), ConfigError> {
        if others.is_empty() {
            return Ok(());
        }
        let named: Vec<String> = others.iter().take(5).map(|(pid, name)| format!("{pid} ({name})")).collect();
        Err(invalid(
            "actors.k8s_user",
            "must be a user no other process runs as: those processes could read the cluster credentials",
            K8S_EXAMPLE,
            format!("{:?}, uid {uid}, which also runs pid {}", self.k8s_user, named.join(", ")),
        ))
    }

    /// The start-time rule: `others` are the processes (pid, name) that run
    /// as the actors' uid and are not ringtail's own; any is an error unless
    /// `allow_shared_user`. At most a few are named in the message.
    pub fn check_unshared(&self, uid: u32, others: &[(u32, String)]) -> Result<(), ConfigError> {
        if self.allow_shared_user || others.is_empty() {
            return Ok(());
        }
        let named: Vec<String> = others.iter().take(5).map(|(pid, name)| format!("{pid} ({name})")).collect();
        let more = if others.len() > named.len() { format!(" and {} more", others.len() - named.len()) } else { String::new() };
        Err(invalid(
            "actors.user",
            "must be a user no other process runs as: those processes could read every captured request \
             (actors.allow_shared_user = true accepts it)",
            EXAMPLE,
            format!("{:?}, uid {uid}, which also runs pid {}{more}", self.user, named.join(", ")),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ringtail_by_default_never_nobody_unless_allowed() {
        assert_eq!(ActorSettings::default().user, "ringtail");
        assert!(ActorSettings::default().validate().is_ok());
        for user in ["nobody", "65534"] {
            let s = ActorSettings { user: user.into(), ..ActorSettings::default() };
            let err = s.validate().unwrap_err().to_string();
            assert!(err.starts_with("actors.user: must be a user of ringtail's own"), "{err}");
            assert!(err.contains("actors.allow_shared_user = true") && err.contains(&format!("(got \"{user}\")")), "{err}");
            assert!(ActorSettings { allow_shared_user: true, ..s }.validate().is_ok());
        }
        let root = ActorSettings { user: "root".into(), allow_shared_user: true, ..ActorSettings::default() };
        assert!(root.validate().unwrap_err().to_string().contains("must name an unprivileged user"), "root is never allowed");
    }

    #[test]
    fn the_k8s_actor_has_a_user_of_its_own() {
        assert_eq!(ActorSettings::default().k8s_user, "ringtail-k8s");
        for k8s in ["", "root", "0", "nobody", "ringtail"] {
            let s = ActorSettings { k8s_user: k8s.into(), allow_shared_user: true, ..ActorSettings::default() };
            let err = s.validate().unwrap_err().to_string();
            assert!(err.starts_with("actors.k8s_user: must"), "{k8s}: {err}");
        }
        let s = ActorSettings::default();
        assert!(s.check_k8s_ids((7464, 7464), (7465, 7465)).is_ok());
        for k8s in [(7464, 7465), (7465, 7464), (0, 7465), (7465, 0)] {
            let err = s.check_k8s_ids((7464, 7464), k8s).unwrap_err().to_string();
            assert!(err.contains("neither actors.user's nor root's"), "{k8s:?}: {err}");
        }
        assert!(s.check_k8s_unshared(7465, &[]).is_ok());
        let err = s.check_k8s_unshared(7465, &[(9, "sleep".into())]).unwrap_err().to_string();
        assert!(err.contains("could read the cluster credentials") && err.contains("9 (sleep)"), "{err}");
    }

    #[test]
    fn a_user_other_processes_run_as_is_refused_unless_allowed() {
        let s = ActorSettings { user: "www-data".into(), ..ActorSettings::default() };
        assert!(s.check_unshared(33, &[]).is_ok());
        let others: Vec<(u32, String)> = (1..=7).map(|i| (100 + i, format!("nginx{i}"))).collect();
        let err = s.check_unshared(33, &others).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { .. }));
        assert_eq!(
            err.to_string(),
            "actors.user: must be a user no other process runs as: those processes could read every captured request \
             (actors.allow_shared_user = true accepts it), e.g. \"ringtail\" (got \"www-data\", uid 33, which also runs pid \
             101 (nginx1), 102 (nginx2), 103 (nginx3), 104 (nginx4), 105 (nginx5) and 2 more)"
        );
        assert!(ActorSettings { allow_shared_user: true, ..s }.check_unshared(33, &others).is_ok());
    }
}
