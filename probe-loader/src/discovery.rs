//! Which processes to trace.
//!
//! The kernel keeps the selection current by itself once it is seeded:
//! servers are selected by their listening port (at listen and per
//! connection), children inherit their parent's selection, and exiting
//! processes leave the map. This module seeds it from /proc at start (while
//! the loader still has every privilege) and matches exec events against
//! `discovery.exe_names`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use ringtail_config::DiscoverySettings;
use ringtail_config::ExeRegex;

use crate::probes::Selected;

/// Compiled discovery settings.
pub struct Discovery {
    ports: HashSet<u16>,
    exe_names: Vec<ExeRegex>,
    pids: Vec<u32>,
}

impl Discovery {
    /// Discovery by the (already compiled) settings.
    pub fn new(settings: &DiscoverySettings) -> Discovery {
        Discovery {
            ports: settings.open_ports.iter().map(|p| p.get()).collect(),
            exe_names: settings.exe_names.clone(),
            pids: settings.pids.clone(),
        }
    }

    /// True if processes are selected by their executable's name.
    pub fn by_exe(&self) -> bool {
        !self.exe_names.is_empty()
    }

    /// True if an executable (path or bare name) matches `exe_names`.
    pub fn exe_matches(&self, exe: &str) -> bool {
        let name = exe.rsplit('/').next().unwrap_or(exe);
        self.exe_names.iter().any(|re| re.is_match(name))
    }

    /// Processes to select now: listeners on the ports, matching
    /// executables, the configured pids, and the descendants of all three;
    /// each with why.
    pub fn scan(&self, proc_root: &Path) -> Vec<(u32, Selected)> {
        let procs = list_processes(proc_root);
        let mut selected: HashMap<u32, Selected> = HashMap::new();
        if !self.exe_names.is_empty() {
            for p in &procs {
                let exe = std::fs::read_link(proc_root.join(p.pid.to_string()).join("exe"))
                    .map(|l| l.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| p.comm.clone());
                if self.exe_matches(&exe) {
                    selected.insert(p.pid, Selected::ByExe);
                }
            }
        }
        if !self.ports.is_empty() {
            let inodes = listening_inodes(proc_root, &self.ports);
            for p in &procs {
                if socket_inodes(proc_root, p.pid).iter().any(|i| inodes.contains(i)) {
                    selected.insert(p.pid, Selected::Explicit);
                }
            }
        }
        let alive: HashSet<u32> = procs.iter().map(|p| p.pid).collect();
        for p in self.pids.iter().filter(|p| alive.contains(p)) {
            selected.insert(*p, Selected::Explicit);
        }
        // Children started before us inherit like the kernel's fork hook would.
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for p in &procs {
            children.entry(p.ppid).or_default().push(p.pid);
        }
        let mut stack: Vec<(u32, Selected)> = selected.iter().map(|(p, w)| (*p, *w)).collect();
        while let Some((pid, why)) = stack.pop() {
            for c in children.get(&pid).into_iter().flatten() {
                if !selected.contains_key(c) {
                    selected.insert(*c, why);
                    stack.push((*c, why));
                }
            }
        }
        let mut out: Vec<(u32, Selected)> = selected.into_iter().collect();
        out.sort_unstable_by_key(|(p, _)| *p);
        out
    }
}

struct Proc {
    pid: u32,
    ppid: u32,
    comm: String,
}

fn list_processes(proc_root: &Path) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir(proc_root) else { return Vec::new() };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
        let (comm, rest) = parse_stat(&stat)?;
        let ppid = rest.get(1)?.parse().ok()?;
        Some(Proc { pid, ppid, comm: comm.to_owned() })
    })
    .collect()
}

/// Splits /proc/PID/stat into the command name and the fields after it
/// (state is index 0, ppid 1, starttime 19). The name may hold spaces and
/// parentheses, so it ends at the last ')'.
pub fn parse_stat(stat: &str) -> Option<(&str, Vec<&str>)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let rest = stat.get(close + 1..)?.split_whitespace().collect();
    Some((comm, rest))
}

/// Inodes of TCP sockets listening on one of `ports`.
fn listening_inodes(proc_root: &Path, ports: &HashSet<u16>) -> HashSet<u64> {
    let mut out = HashSet::new();
    for file in ["net/tcp", "net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(proc_root.join(file)) else {
            continue;
        };
        out.extend(parse_listeners(&text, ports));
    }
    out
}

/// Parses /proc/net/tcp{,6}: `sl local rem st ... inode`, state 0A = LISTEN.
pub fn parse_listeners(text: &str, ports: &HashSet<u16>) -> Vec<u64> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            (f.get(3)? == &"0A" && ports.contains(&port)).then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

fn socket_inodes(proc_root: &Path, pid: u32) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let link = std::fs::read_link(e.ok()?.path()).ok()?;
        let s = link.to_str()?;
        s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_names() {
        let (comm, rest) = parse_stat("42 (my (weird) prog) S 1 42 42 0 -1").unwrap();
        assert_eq!(comm, "my (weird) prog");
        assert_eq!(rest[1], "1");
    }

    #[test]
    fn listeners_by_port_and_state() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0 100 0 0 10 0\n\
   1: 0100007F:1F40 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0 100 0 0 10 0\n\
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3333 1 0 100 0 0 10 0\n";
        let ports: HashSet<u16> = [8000].into_iter().collect();
        assert_eq!(parse_listeners(text, &ports), vec![1111]);
    }

    #[test]
    fn exe_regex_matches_basename() {
        let d = Discovery::new(&DiscoverySettings { exe_names: vec!["^python3".parse().unwrap()], ..Default::default() });
        assert!(d.exe_matches("/usr/bin/python3.11"));
        assert!(!d.exe_matches("/opt/python3/bin/node"));
    }

    #[test]
    fn scan_finds_this_process_by_pid_and_exe() {
        let me = std::process::id();
        let d = Discovery::new(&DiscoverySettings { pids: vec![me], ..Default::default() });
        assert!(d.scan(Path::new("/proc")).contains(&(me, Selected::Explicit)));
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap();
        let d = Discovery::new(&DiscoverySettings {
            exe_names: vec![format!("^{}$", regex::escape(name)).parse().unwrap()],
            ..Default::default()
        });
        assert!(d.scan(Path::new("/proc")).contains(&(me, Selected::ByExe)));
    }

    #[test]
    fn scan_finds_a_listener_by_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let d = Discovery::new(&DiscoverySettings { open_ports: vec![port.try_into().unwrap()], ..Default::default() });
        assert!(d.scan(Path::new("/proc")).contains(&(std::process::id(), Selected::Explicit)));
    }
}
