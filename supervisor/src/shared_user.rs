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

/// True if `/proc/PID/exe` is one of the actors' binaries.
fn is_ringtail_actor(proc_dir: &Path) -> bool {
    let Ok(exe) = std::fs::read_link(proc_dir.join("exe")) else {
        return false;
    };
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // A rebuilt binary shows as "NAME (deleted)".
    let name = name.strip_suffix(" (deleted)").unwrap_or(&name);
    Component::supervised().any(|c| !c.privileged && c.binary == name)
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
        if !uids(&status).any(|u| u == uid) || is_ringtail_actor(&dir) {
            continue;
        }
        let name = status.lines().find_map(|l| l.strip_prefix("Name:")).map(str::trim).unwrap_or("?");
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
    fn finds_this_process_by_its_uid() {
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        let found = super::processes_of(me).unwrap();
        assert!(found.iter().any(|(pid, _)| *pid == std::process::id()), "{found:?}");
    }
}
