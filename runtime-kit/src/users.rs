//! User and group names to ids (the supervisor and the loader both need them).

use std::ffi::CString;

/// A user's uid and primary gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    pub uid: u32,
    pub gid: u32,
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
}
