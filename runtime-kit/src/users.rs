//! User and group names to ids (the supervisor and the loader both need
//! them), and becoming the actors' user ([`become_user`]).

use std::ffi::CString;
use std::fmt;
use std::str::FromStr;

/// A user's uid and primary gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    pub uid: u32,
    pub gid: u32,
}

/// `UID:GID`, as the supervisor passes `--run-as`.
impl fmt::Display for UserIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

impl FromStr for UserIds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected UID:GID (numbers), got {s:?}");
        let (uid, gid) = s.split_once(':').ok_or_else(bad)?;
        Ok(UserIds { uid: uid.parse().map_err(|_| bad())?, gid: gid.parse().map_err(|_| bad())? })
    }
}

/// Why a process could not become the actors' user.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error("--run-as {ids}: only root can switch users (running as uid {euid})")]
    NotRoot { ids: UserIds, euid: u32 },
    #[error("--run-as {ids}: uid 0 is not a user to switch to")]
    ToRoot { ids: UserIds },
    #[error("cannot drop capability {cap} from the bounding set (prctl PR_CAPBSET_DROP)")]
    Bounding {
        cap: i32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot switch to {ids} ({call})")]
    Switch {
        ids: UserIds,
        call: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("still privileged after switching to {ids}: {what}")]
    StillPrivileged { ids: UserIds, what: &'static str },
    #[error("the parent (pid {parent}) died while this process switched users")]
    Orphaned { parent: i32 },
}

/// `CAP_SETUID` (linux/capability.h; not in the libc crate).
const CAP_SETUID: libc::c_int = 7;

/// Becomes `ids` for good, first thing in `main`, from root: the bounding
/// set emptied (while CAP_SETPCAP is still there), the actors' group as the
/// only supplementary group, then gid and uid (real, effective, saved,
/// filesystem). Checked after: no way back to uid 0 and no capability left.
///
/// Why here and not in the parent between fork and exec: a process exec'd
/// as the actors' uid is dumpable, so readable by every process of that uid
/// (`/proc/PID/environ`, `/proc/PID/fd`, ptrace, `pidfd_getfd`), until its
/// `main` makes it non-dumpable; a tracer attached in that window stays
/// attached. Exec'd as root, nothing of the actors' uid can touch it, and
/// the kernel makes it non-dumpable in the same step that changes its uid
/// (`commit_creds` sets `fs.suid_dumpable`, 0 by default). The parent-death
/// signal, which the uid change clears, is set again, and a parent that
/// died in between ends this process.
pub fn become_user(ids: UserIds) -> Result<(), SwitchError> {
    // SAFETY: geteuid and getppid have no preconditions.
    let (euid, parent) = unsafe { (libc::geteuid(), libc::getppid()) };
    if euid != 0 {
        return Err(SwitchError::NotRoot { ids, euid });
    }
    if ids.uid == 0 {
        return Err(SwitchError::ToRoot { ids });
    }
    let io = std::io::Error::last_os_error;
    // The bounding set first: dropping from it needs CAP_SETPCAP, which the
    // uid change takes away. EINVAL: past the kernel's last capability.
    for cap in 0.. {
        // SAFETY: prctl(PR_CAPBSET_DROP) takes integers only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let source = io();
            if source.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(SwitchError::Bounding { cap, source });
        }
    }
    let switch = |call, r: libc::c_int| if r == 0 { Ok(()) } else { Err(SwitchError::Switch { ids, call, source: io() }) };
    // SAFETY: setgroups reads one gid from a valid pointer; the others take integers.
    unsafe {
        switch("setgroups", libc::setgroups(1, &ids.gid))?;
        switch("setresgid", libc::setresgid(ids.gid, ids.gid, ids.gid))?;
        switch("setresuid", libc::setresuid(ids.uid, ids.uid, ids.uid))?;
    }
    // A uid change from 0 clears every capability set; make sure.
    // SAFETY: as above: integers only.
    let regained = unsafe { libc::setuid(0) == 0 || libc::setgid(0) == 0 };
    if regained {
        return Err(SwitchError::StillPrivileged { ids, what: "setuid(0) or setgid(0) succeeded" });
    }
    // SAFETY: PR_CAPBSET_READ takes integers only.
    if unsafe { libc::prctl(libc::PR_CAPBSET_READ, CAP_SETUID, 0, 0, 0) } != 0 {
        return Err(SwitchError::StillPrivileged { ids, what: "CAP_SETUID in the bounding set" });
    }
    // SAFETY: prctl with integer arguments.
    unsafe {
        switch("prctl PR_SET_NO_NEW_PRIVS", libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        // The uid change cleared it: die with the parent again.
        switch("prctl PR_SET_PDEATHSIG", libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0))?;
        if libc::getppid() != parent {
            return Err(SwitchError::Orphaned { parent });
        }
    }
    Ok(())
}

/// Looks a user up by name, or by number.
pub fn user(name: &str) -> Option<UserIds> {
    let c = CString::new(name).ok()?;
    // SAFETY: getpwnam returns a pointer to static storage or null; we copy
    // the two integers out before any other call could overwrite it.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if !pw.is_null() {
        // SAFETY: pw is non-null and points to a valid passwd record.
        let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
        return Some(UserIds { uid, gid });
    }
    let uid: u32 = name.parse().ok()?;
    Some(UserIds { uid, gid: uid })
}

/// Looks a group up by name, or by number.
pub fn group(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: as for getpwnam: static storage, copied out at once.
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    if !gr.is_null() {
        // SAFETY: gr is non-null and points to a valid group record.
        return Some(unsafe { (*gr).gr_gid });
    }
    name.parse().ok()
}

/// The ids the actors run as, from `actors.user` and `actors.group`.
pub fn actor_ids(settings: &ringtail_config::ActorSettings) -> Option<UserIds> {
    let mut ids = user(&settings.user)?;
    if !settings.group.is_empty() {
        ids.gid = group(&settings.group)?;
    }
    Some(ids)
}

#[cfg(test)]
mod tests {
    #[test]
    fn root_and_numbers() {
        assert_eq!(super::user("root"), Some(super::UserIds { uid: 0, gid: 0 }));
        assert_eq!(super::user("4242").unwrap().uid, 4242);
        assert_eq!(super::group("root"), Some(0));
        assert!(super::user("no-such-user-ringtail").is_none());
    }

    #[test]
    fn run_as_reads_and_writes_uid_colon_gid() {
        let ids: super::UserIds = "999:995".parse().unwrap();
        assert_eq!(ids, super::UserIds { uid: 999, gid: 995 });
        assert_eq!(ids.to_string(), "999:995");
        for bad in ["999", "ringtail:995", "999:", ":1", "1:2:3", "-1:2"] {
            assert!(bad.parse::<super::UserIds>().is_err(), "{bad}");
        }
    }
}
