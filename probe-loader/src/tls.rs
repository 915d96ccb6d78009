//! Where the TLS uprobes go (`bpf/tls_hooks.h`): the OpenSSL files to attach
//! to, each once.
//!
//! A uprobe belongs to a file (its inode), not to a process: attached once to
//! a `libssl`, it fires in every process that maps that file, including
//! processes started later. The files are found at start, while the loader
//! is privileged:
//! - every `libssl.so*` in the dynamic loader's directories (`/etc/ld.so.conf`
//!   and the files it includes, and the standard ones);
//! - every `libssl` mapped by a selected process running at start, read
//!   through `/proc/PID/root` (a container's own copy);
//! - the executable of a selected process running at start, when it exports
//!   OpenSSL's functions (Node's `node` links OpenSSL statically and exports
//!   them: every later process of that file is covered too);
//! - `tls.libraries` (a private copy, or an executable that exports the
//!   OpenSSL symbols).
//!
//! Files are told apart by device and inode, so a library reached by several
//! paths (symlinks, bind mounts, `/proc/PID/root`) is attached once. A file
//! that lacks `SSL_read` is not OpenSSL (NSS also ships a `libssl3.so`) and
//! is skipped, unless the configuration named it. Files that appear after
//! start are not attached (the loader keeps no privilege to do it).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One uprobe: a program of `bpf/tls_hooks.h` on a library function.
#[derive(Debug, Clone, Copy)]
pub struct Uprobe {
    pub program: &'static str,
    pub symbol: &'static str,
    /// OpenSSL 1.1.0 has no `_ex` functions: those may be missing.
    pub required: bool,
}

/// Every uprobe, in attach order: the returns before the entries (a return
/// never finds an entry's record missing, and the socket hooks are attached
/// already), the writes and SSL_free last.
pub const PROGRAMS: &[Uprobe] = &[
    Uprobe { program: "tls_call_exit", symbol: "SSL_read", required: true },
    Uprobe { program: "tls_call_exit", symbol: "SSL_read_ex", required: false },
    Uprobe { program: "tls_call_exit", symbol: "SSL_do_handshake", required: true },
    Uprobe { program: "tls_read_enter", symbol: "SSL_read", required: true },
    Uprobe { program: "tls_read_ex_enter", symbol: "SSL_read_ex", required: false },
    Uprobe { program: "tls_handshake_enter", symbol: "SSL_do_handshake", required: true },
    Uprobe { program: "tls_write_enter", symbol: "SSL_write", required: true },
    Uprobe { program: "tls_write_ex_enter", symbol: "SSL_write_ex", required: false },
    Uprobe { program: "tls_free", symbol: "SSL_free", required: true },
];

/// The distinct programs of [`PROGRAMS`].
pub fn program_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for p in PROGRAMS {
        if !names.contains(&p.program) {
            names.push(p.program);
        }
    }
    names
}

/// Directories searched for `libssl` besides those of `/etc/ld.so.conf`.
const STANDARD_DIRS: &[&str] = &[
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/local/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
];

/// Most `include` levels followed in ld.so.conf.
const MAX_INCLUDE_DEPTH: u32 = 4;

/// One file to attach to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The path the kernel opens (maybe through `/proc/PID/root`).
    pub path: PathBuf,
    /// Named by `tls.libraries`: a file without the symbols is an error.
    pub configured: bool,
}

/// The files, each once (by device and inode), configured ones first.
#[derive(Debug, Default)]
pub struct Targets {
    seen: BTreeSet<(u64, u64)>,
    pub files: Vec<Target>,
}

impl Targets {
    /// Adds `path` unless its file is already there (or it does not exist:
    /// false then).
    pub fn add(&mut self, path: PathBuf, configured: bool) -> bool {
        let Ok(meta) = std::fs::metadata(&path) else { return false };
        if !meta.is_file() {
            return false;
        }
        if self.seen.insert((meta.dev(), meta.ino())) {
            self.files.push(Target { path, configured });
        }
        true
    }
}

/// Whether a file name is a `libssl` shared object (`libssl.so`,
/// `libssl.so.3`, `libssl.so.1.1`, ...; NSS's `libssl3.so` too: it is told
/// apart later, by its symbols).
pub fn is_libssl(name: &str) -> bool {
    name.starts_with("libssl") && name.contains(".so")
}

/// The directories the dynamic loader searches: ld.so.conf's (with its
/// includes) and the standard ones.
pub fn loader_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    conf_dirs(root, &root.join("etc/ld.so.conf"), 0, &mut dirs);
    dirs.extend(STANDARD_DIRS.iter().map(|d| root.join(d.trim_start_matches('/'))));
    dirs
}

fn conf_dirs(root: &Path, file: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(text) = std::fs::read_to_string(file) else { return };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if let Some(pattern) = line.strip_prefix("include").map(str::trim) {
            if depth < MAX_INCLUDE_DEPTH {
                for conf in glob_conf(root, pattern) {
                    conf_dirs(root, &conf, depth + 1, out);
                }
            }
        } else if line.starts_with('/') {
            out.push(root.join(line.trim_start_matches('/')));
        }
    }
}

/// The files an `include` line names: a path, or `dir/*.conf`-like (one `*`
/// in the file name; what ld.so.conf files use).
fn glob_conf(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let path = root.join(pattern.trim_start_matches('/'));
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else { return Vec::new() };
    let Some((prefix, suffix)) = name.split_once('*') else { return vec![path.clone()] };
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix)))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

/// The `libssl` files in `dirs`.
pub fn libssl_in(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut found: Vec<PathBuf> =
            entries.flatten().filter(|e| e.file_name().to_str().is_some_and(is_libssl)).map(|e| e.path()).collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// The `libssl` files process `pid` maps, as paths through its root (its
/// mount namespace), from `/proc/PID/maps`.
pub fn libssl_mapped(proc: &Path, pid: u32) -> Vec<PathBuf> {
    let Ok(maps) = std::fs::read_to_string(proc.join(pid.to_string()).join("maps")) else { return Vec::new() };
    let mut out: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path: the path is the 6th field
        let Some(path) = line.split_whitespace().nth(5) else { continue };
        if !path.starts_with('/') || line.ends_with("(deleted)") {
            continue;
        }
        let is_ssl = Path::new(path).file_name().and_then(|n| n.to_str()).is_some_and(is_libssl);
        let through_root = proc.join(pid.to_string()).join("root").join(path.trim_start_matches('/'));
        if is_ssl && !out.contains(&through_root) {
            out.push(through_root);
        }
    }
    out
}

/// The executable of process `pid`, through its root, from `/proc/PID/exe`.
pub fn exe_of(proc: &Path, pid: u32) -> Option<PathBuf> {
    let dir = proc.join(pid.to_string());
    let target = std::fs::read_link(dir.join("exe")).ok()?;
    let text = target.to_str()?;
    if !text.starts_with('/') || text.ends_with(" (deleted)") {
        return None;
    }
    Some(dir.join("root").join(text.trim_start_matches('/')))
}

/// Most bytes of a dynamic symbol or string table read to look for a
/// symbol (Node's are 1.8 and 5.3 MB).
const MAX_TABLE: u64 = 64 << 20;

/// Whether the ELF file at `path` defines the dynamic symbol `name`: only
/// its header, section headers, `.dynsym` and `.dynstr` are read (an
/// executable can be hundreds of megabytes), each bounded; anything that is
/// not a well-formed 64-bit little-endian ELF says no.
pub fn exports(path: &Path, name: &str) -> bool {
    exports_io(path, name).unwrap_or(false)
}

fn exports_io(path: &Path, name: &str) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let read = |offset: u64, len: u64| -> std::io::Result<Vec<u8>> {
        if len > MAX_TABLE {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        let mut buf = vec![0; len as usize];
        file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    };
    let u16_at = |b: &[u8], o: usize| b.get(o..o + 2).map_or(0, |s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |b: &[u8], o: usize| b.get(o..o + 4).map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap_or_default()));
    let u64_at = |b: &[u8], o: usize| b.get(o..o + 8).map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or_default()));
    let head = read(0, 64)?;
    // ELFCLASS64, ELFDATA2LSB
    if head[..4] != *b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Ok(false);
    }
    let (shoff, shentsize, shnum) = (u64_at(&head, 0x28), u64::from(u16_at(&head, 0x3a)), u64::from(u16_at(&head, 0x3c)));
    if shentsize < 64 {
        return Ok(false);
    }
    let Some(len) = shentsize.checked_mul(shnum) else { return Ok(false) };
    let sections = read(shoff, len)?;
    let section = |i: u64| -> Option<&[u8]> {
        let at = usize::try_from(i.checked_mul(shentsize)?).ok()?;
        sections.get(at..at.checked_add(64)?)
    };
    const SHT_DYNSYM: u32 = 11;
    let Some(dynsym) = (0..shnum).filter_map(section).find(|h| u32_at(h, 4) == SHT_DYNSYM) else { return Ok(false) };
    let Some(strtab) = section(u64::from(u32_at(dynsym, 0x28))) else { return Ok(false) };
    let symbols = read(u64_at(dynsym, 0x18), u64_at(dynsym, 0x20))?;
    let strings = read(u64_at(strtab, 0x18), u64_at(strtab, 0x20))?;
    let want = name.as_bytes();
    // Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, ...
    Ok(symbols.chunks_exact(24).any(|sym| {
        let at = u32_at(sym, 0) as usize;
        u16_at(sym, 6) != 0 && strings.get(at..).is_some_and(|s| s.starts_with(want) && s.get(want.len()) == Some(&0))
    }))
}

/// The files of process `pid` to attach to: the `libssl` files it maps and
/// its executable when that exports `SSL_read` (each executable file,
/// by device and inode in `looked`, is looked into once).
pub fn of_process(proc: &Path, pid: u32, looked: &mut BTreeSet<(u64, u64)>) -> Vec<PathBuf> {
    let mut out = libssl_mapped(proc, pid);
    if let Some(exe) = exe_of(proc, pid) {
        let fresh = std::fs::metadata(&exe).is_ok_and(|m| looked.insert((m.dev(), m.ino())));
        if fresh && exports(&exe, "SSL_read") {
            out.push(exe);
        }
    }
    out
}

/// Every file to attach to: `configured` (tls.libraries) first, then the
/// loader's directories under `root`, then what the processes `pids` map,
/// then their executables that export OpenSSL's functions.
pub fn find(configured: &[PathBuf], root: &Path, proc: &Path, pids: impl IntoIterator<Item = u32>) -> (Targets, Vec<PathBuf>) {
    let mut t = Targets::default();
    let mut missing = Vec::new();
    for path in configured {
        if !t.add(path.clone(), true) {
            missing.push(path.clone());
        }
    }
    for path in libssl_in(&loader_dirs(root)) {
        t.add(path, false);
    }
    let mut looked = BTreeSet::new();
    for pid in pids {
        for path in of_process(proc, pid, &mut looked) {
            t.add(path, false);
        }
    }
    (t, missing)
}

/// Every process id in `proc`.
pub fn all_pids(proc: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(proc) else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ringtail-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn libssl_names() {
        for name in ["libssl.so", "libssl.so.3", "libssl.so.1.1", "libssl3.so"] {
            assert!(is_libssl(name), "{name}");
        }
        for name in ["libcrypto.so.3", "libssl.a", "libsslx", "ssl.so"] {
            assert!(!is_libssl(name), "{name}");
        }
    }

    #[test]
    fn ld_so_conf_includes_are_followed_and_files_deduplicated_by_inode() {
        let root = temp("conf");
        std::fs::create_dir_all(root.join("etc/ld.so.conf.d")).expect("mkdir");
        std::fs::create_dir_all(root.join("opt/ssl/lib")).expect("mkdir");
        std::fs::write(root.join("etc/ld.so.conf"), "# comment\ninclude /etc/ld.so.conf.d/*.conf\n").expect("write");
        std::fs::write(root.join("etc/ld.so.conf.d/a.conf"), "/opt/ssl/lib\n").expect("write");
        std::fs::write(root.join("etc/ld.so.conf.d/ignored.txt"), "/nowhere\n").expect("write");
        let lib = root.join("opt/ssl/lib/libssl.so.3");
        std::fs::write(&lib, b"not really").expect("write");
        std::os::unix::fs::symlink(&lib, root.join("opt/ssl/lib/libssl.so")).expect("symlink");
        let dirs = loader_dirs(&root);
        assert_eq!(dirs[0], root.join("opt/ssl/lib"));
        assert!(!dirs.contains(&root.join("nowhere")));
        let (targets, missing) = find(&[root.join("absent.so")], &root, &root.join("proc"), []);
        assert_eq!(missing, vec![root.join("absent.so")]);
        // libssl.so and libssl.so.3 are one file: attached once
        assert_eq!(targets.files, vec![Target { path: root.join("opt/ssl/lib/libssl.so"), configured: false }]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn exported_symbols_are_found_in_the_dynamic_table() {
        let libssl = libssl_in(&loader_dirs(Path::new("/"))).into_iter().next().expect("the host has a libssl");
        assert!(exports(&libssl, "SSL_read"));
        assert!(exports(&libssl, "SSL_write_ex"));
        // a prefix of a name, or an imported symbol, is no export
        assert!(!exports(&libssl, "SSL_rea"));
        assert!(!exports(&libssl, "malloc"));
        let exe = std::env::current_exe().expect("current exe");
        assert!(!exports(&exe, "SSL_read"));
        let dir = temp("elf");
        for (name, bytes) in [("empty", &b""[..]), ("short", &b"\x7fELF\x02\x01"[..]), ("text", &b"#!/bin/sh\necho\n"[..])] {
            std::fs::write(dir.join(name), bytes).expect("write");
            assert!(!exports(&dir.join(name), "SSL_read"), "{name}");
        }
        // a header whose section table points far past the end
        let mut bad = std::fs::read(&libssl).expect("read libssl")[..64].to_vec();
        bad[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(dir.join("bad"), &bad).expect("write");
        assert!(!exports(&dir.join("bad"), "SSL_read"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_process_executable_is_read_through_its_root() {
        let me = std::process::id();
        let exe = exe_of(Path::new("/proc"), me).expect("our exe");
        assert!(exe.starts_with(format!("/proc/{me}/root/")), "{}", exe.display());
        assert_eq!(
            std::fs::metadata(&exe).expect("stat").ino(),
            std::fs::metadata(std::env::current_exe().expect("exe")).expect("stat").ino()
        );
    }

    #[test]
    fn mapped_libraries_are_read_through_the_process_root() {
        let proc = temp("proc");
        std::fs::create_dir_all(proc.join("7")).expect("mkdir");
        std::fs::write(
            proc.join("7/maps"),
            "7f00-7f10 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libssl.so.3\n\
             7f10-7f20 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libssl.so.3\n\
             7f20-7f30 r-xp 00000000 08:01 124 /usr/lib/libcrypto.so.3\n\
             7f30-7f40 r-xp 00000000 08:01 125 /old/libssl.so.1.1 (deleted)\n\
             7f40-7f50 rw-p 00000000 00:00 0 [heap]\n",
        )
        .expect("write");
        assert_eq!(libssl_mapped(&proc, 7), vec![proc.join("7/root/usr/lib/x86_64-linux-gnu/libssl.so.3")]);
        assert!(libssl_mapped(&proc, 8).is_empty());
        let _ = std::fs::remove_dir_all(&proc);
    }
}
