//! Which processes to trace.
//!
//! The kernel keeps the selection current by itself once it is seeded:
//! servers are selected by their listening port (at listen and per
//! connection), children inherit their parent's selection, and exiting
//! processes leave the map. This module seeds it from /proc at start (while
//! the loader still has every privilege) and matches exec events against
//! `discovery.exe_names`; the literal ones (`^name$`, `^name`) the kernel
//! matches by itself at exec (`kernel_literals`), so that such a process is
//! traced from its start, not from when the loader has read its exec record.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use ringtail_config::DiscoverySettings;
use ringtail_config::ExeRegex;

use crate::kernel::contract::{SEL_EXE, SEL_EXPLICIT};
use crate::kernel::{ExeLiteral, EXE_LITERALS, EXE_LITERAL_LEN};

/// Why a process is selected (the `sel_pids` value, SEL_* in bpf/ringtail.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Selected {
    /// A configured pid, a listener on a configured port, or a child of one:
    /// kept across exec.
    Explicit = SEL_EXPLICIT,
    /// The executable name matched: re-decided at every exec.
    ByExe = SEL_EXE,
}

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

    /// The `exe_names` the kernel matches by itself at exec: the first
    /// EXE_LITERALS that are a literal name (`^name$`) or the literal start
    /// of one (`^name`). Unused entries have len 0.
    pub fn kernel_literals(&self) -> [ExeLiteral; EXE_LITERALS] {
        let mut out = [ExeLiteral::default(); EXE_LITERALS];
        let literals = self.exe_names.iter().filter_map(|re| literal_of(re.as_str()));
        for (slot, (name, exact)) in out.iter_mut().zip(literals) {
            slot.len = u8::try_from(name.len()).unwrap_or(0);
            slot.exact = u8::from(exact);
            slot.name[..name.len()].copy_from_slice(&name);
        }
        out
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

/// The literal a regular expression over executable names stands for, if it
/// is one the kernel can match: `^` then letters, digits, `_`, `-` and
/// escaped punctuation (`\.`), then `$` (the whole name: true) or nothing
/// (its start: false); 1 to EXE_LITERAL_LEN bytes. Anything else (`.`,
/// classes, alternation, flags, a name with `/`) is `None`: the loader
/// alone matches it.
fn literal_of(re: &str) -> Option<(Vec<u8>, bool)> {
    let mut rest = re.strip_prefix('^')?.chars().peekable();
    let mut name = Vec::new();
    let mut exact = false;
    while let Some(c) = rest.next() {
        match c {
            '\\' => match rest.next()? {
                e @ ('.' | '-' | '+' | '_') => name.push(e as u8),
                _ => return None,
            },
            '$' if rest.peek().is_none() => exact = true,
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => name.push(c as u8),
            _ => return None,
        }
    }
    (!name.is_empty() && name.len() <= EXE_LITERAL_LEN).then_some((name, exact))
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

    /// What the kernel does with a literal (bpf/process.bpf.c).
    fn kernel_match(l: &ExeLiteral, path: &str) -> bool {
        let base = path.rsplit('/').next().unwrap_or(path).as_bytes();
        let name = &l.name[..usize::from(l.len)];
        if l.exact == 1 {
            base == name
        } else {
            base.starts_with(name)
        }
    }

    #[test]
    fn literal_exe_names_match_in_the_kernel_as_their_regex_does() {
        let names = ["^client$", "^python3", "^nginx$", r"^node\.js$", "^a-b_c", "^py.hon", "^(a|b)$", "x$", "^", "^$", "^a$b"];
        let d = Discovery::new(&DiscoverySettings { exe_names: names.iter().map(|n| n.parse().unwrap()).collect(), ..Default::default() });
        let lits = d.kernel_literals();
        let got: Vec<(String, u8)> = lits
            .iter()
            .filter(|l| l.len > 0)
            .map(|l| (String::from_utf8_lossy(&l.name[..usize::from(l.len)]).into_owned(), l.exact))
            .collect();
        let want = [("client", 1), ("python3", 0), ("nginx", 1), ("node.js", 1), ("a-b_c", 0)].map(|(n, e)| (n.to_owned(), e));
        assert_eq!(got, want);
        for path in [
            "/usr/bin/client",
            "client",
            "/x/clients",
            "/usr/bin/python3.11",
            "python",
            "/usr/sbin/nginx",
            "nodexjs",
            "/a/node.js",
            "a-b_cd",
            "/c/client/x",
        ] {
            for (l, re) in lits.iter().filter(|l| l.len > 0).zip(["^client$", "^python3", "^nginx$", r"^node\.js$", "^a-b_c"]) {
                let one = Discovery::new(&DiscoverySettings { exe_names: vec![re.parse().unwrap()], ..Default::default() });
                assert_eq!(kernel_match(l, path), one.exe_matches(path), "{re} on {path}");
            }
        }
        let long = format!("^{}$", "a".repeat(EXE_LITERAL_LEN + 1));
        assert_eq!(literal_of(&long), None);
        let many = Discovery::new(&DiscoverySettings {
            exe_names: (0..20).map(|i| format!("^n{i}$").parse().unwrap()).collect(),
            ..Default::default()
        });
        assert!(many.kernel_literals().iter().all(|l| l.len > 0), "the first EXE_LITERALS are kept");
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
