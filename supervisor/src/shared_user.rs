//! Who else runs as the actors' user: every process `/proc` shows with that
//! uid as its real, effective, saved or filesystem uid, other than
//! ringtail's own actors (ours, or another ringtail's on this host, e.g. the
//! systemd units'). `actors.user`'s rule decides what to make of them
//! ([`ringtail_config::ActorSettings::check_unshared`]).

use std::path::Path;

use ipc_schema::Component;

/// The `Uid:` line of a `/proc/PID/status`: real, effective, saved, fs.
fn uids(status: &str) -> impl Iterator<Item = u32> + '_ {
    status.lines().find_map(|l| l.strip_prefix("Uid:")).into_iter().flat_map(|v| v.split_whitespace().filter_map(|u| u.parse().ok()))
}

/// A field of a `/proc/PID/status`.
fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim)
}

/// True if the process is one of the actors' binaries: by `/proc/PID/exe`,
/// or, once it is exiting and has no executable any more, by its name (the
/// kernel keeps the first 15 bytes).
fn is_ringtail_actor(proc_dir: &Path, status: &str) -> bool {
    let actors = || Component::supervised().filter(|c| !c.privileged).map(|c| c.binary);
    match std::fs::read_link(proc_dir.join("exe")) {
        Ok(exe) => {
            let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            // A rebuilt binary shows as "NAME (deleted)".
            let name = name.strip_suffix(" (deleted)").unwrap_or(&name);
            actors().any(|b| b == name)
        }
        Err(_) => field(status, "Name:").is_some_and(|n| n.len() == 15 && actors().any(|b| b.starts_with(n))),
    }
}

/// (pid, name) of the processes running as `uid`, ringtail's actors left out.
/// Processes that end while being read are skipped.
pub fn processes_of(uid: u32) -> std::io::Result<Vec<(u32, String)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let dir = entry.path();
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue; // gone
        };
        // A zombie holds nothing any more.
        let dead = field(&status, "State:").is_some_and(|s| s.starts_with('Z') || s.starts_with('X'));
        if dead || !uids(&status).any(|u| u == uid) || is_ringtail_actor(&dir, &status) {
            continue;
        }
        let name = field(&status, "Name:").unwrap_or("?");
        found.push((pid, name.to_owned()));
    }
    found.sort_unstable();
    Ok(found)
}

#[cfg(test)]
mod tests {
    #[test]
    fn uid_line_parses() {
        let status = "Name:\tsleep\nUid:\t1000\t1001\t1002\t1003\nGid:\t5\t5\t5\t5\n";
        assert_eq!(super::uids(status).collect::<Vec<_>>(), [1000, 1001, 1002, 1003]);
    }

    #[test]
    fn an_exiting_actor_is_known_by_its_name() {
        let dir = std::path::Path::new("/proc/no-such-process");
        assert!(super::is_ringtail_actor(dir, "Name:\tringtail-span-a\nState:\tR (running)\n"));
        assert!(super::is_ringtail_actor(dir, "Name:\tringtail-export\n"));
        assert!(!super::is_ringtail_actor(dir, "Name:\tringtail-probe\n"), "not an actor");
        assert!(!super::is_ringtail_actor(dir, "Name:\tringtail\n"), "a short name is the whole name");
    }

    #[test]
    fn finds_this_process_by_its_uid() {
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        let found = super::processes_of(me).unwrap();
        assert!(found.iter().any(|(pid, _)| *pid == std::process::id()), "{found:?}");
    }
}
