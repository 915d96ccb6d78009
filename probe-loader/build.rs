//! Builds the eBPF object and the Rust side of the kernel contract.
//!
//! - Each `bpf/*.bpf.c` (one per hook family) is compiled separately
//!   (clang, CO-RE against this machine's BTF) and linked with `bpftool gen
//!   object` (weak maps merge, see bpf/maps.h) into one object per capture
//!   backend (`BACKENDS`: its hook family plus the shared ones).
//! - `bpf/ringtail.h` is the one place the contract is written: every
//!   `#define NAME <integer expression>` there becomes a typed `pub const`
//!   in `contract.rs` (the C compiler evaluates the expressions), and the
//!   sizes and offsets of its structs go to `layout.rs`, so the Rust
//!   mirrors in `src/kernel.rs` are checked against what the kernel writes.
//! - Each linked object's FNV-1a digest goes to `objects.rs`, for the pins'
//!   stamp: the loader then never reads the embedded objects (megabytes it
//!   would keep resident) unless it loads them itself.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "src/fnv.rs"]
mod fnv;

/// The Rust type of a contract constant, by its name.
fn rust_type(name: &str) -> &'static str {
    const BY_PREFIX: &[(&str, &str)] = &[
        ("CNT_", "usize"),
        ("CGROUP_", "usize"),
        ("SEL_", "u8"),
        ("ROLE_", "u8"),
        ("EVF_", "u8"),
        ("IOF_", "u8"),
        ("H2F_", "u8"),
        ("SF_", "u8"),
        ("PIECE_", "u8"),
        ("IO_RECV", "u8"),
        ("IO_SEND", "u8"),
        ("EV_", "u8"),
        ("FAMILY_", "u8"),
        ("PROC_", "u8"),
        ("TLSR", "u32"),
        ("EXECF_", "u8"),
        ("EXE_LITERAL", "usize"),
        ("STREAM_PORTS", "usize"),
        ("STREAM_TAIL", "usize"),
    ];
    if let Some((_, t)) = BY_PREFIX.iter().find(|(p, _)| name.starts_with(p)) {
        return t;
    }
    if name.ends_with("_LEN") {
        return "usize";
    }
    "u64"
}

/// The object-like macros of a header: (name, doc comment) in order.
fn defines(header: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in header.lines() {
        let Some(rest) = line.trim_start().strip_prefix("#define") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let Some(name) = words.next() else { continue };
        // Function-like macros and the include guard (no value) are not constants.
        if name.contains('(') || words.next().is_none() || !name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            continue;
        }
        let doc = line.split_once("/*").map(|(_, c)| c.trim_end().trim_end_matches("*/").trim().to_owned()).unwrap_or_default();
        out.push((name.to_owned(), doc));
    }
    out
}

/// The capture backends: `bpf/<name>.bpf.c` each, with its companions
/// `bpf/<name>_*.bpf.c` (the same hook family for that object, e.g. the TLS
/// hooks compiled with that backend's state home), linked with every other
/// (shared) source into `ringtail-<name>.bpf.o`.
const BACKENDS: [&str; 2] = ["sock", "syscalls"];

/// Sources linked into no backend's object of their own: each into its
/// backend's as a variant, `ringtail-<backend>-<stem>.bpf.o` (propagation's
/// programs: their socket map takes CAP_NET_ADMIN to create, so they are
/// in the object only when they are wanted).
const OPTIONAL: [(&str, &str); 1] = [("propagate", "sock")];

/// Backends whose object is also built without atomic exchange,
/// `ringtail-<backend>-noxchg.bpf.o`: their own sources compiled again with
/// RINGTAIL_NO_XCHG (bpf/http1_conn.h), for kernels before 5.12, whose
/// verifier refuses the instruction anywhere in a program, even where a
/// load-time constant leaves it dead. (The socket backend needs 6.3+.)
const NO_XCHG: [&str; 1] = ["syscalls"];

/// Backends whose object is also built with bpf_loop,
/// `ringtail-<backend>-loop.bpf.o`: their own sources compiled again with
/// RINGTAIL_BPF_LOOP (bpf/h2.h), for kernels 5.17+, where an HTTP/2 walk
/// may take many steps and records (a call moving hundreds of frames).
/// (The socket backend, 6.3+, always has it.)
const LOOP: [&str; 1] = ["syscalls"];

/// Compiles one source into `obj`, with `defines` (-D) added.
fn compile(out: &Path, bpf: &Path, src: &Path, obj: &Path, defines: &[&str]) {
    let status = Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", "-Wall", "-Werror", "-Wno-unused-function"])
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg("-I")
        .arg(out)
        .arg("-I")
        .arg(bpf)
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(obj)
        .status()
        .unwrap_or_else(|e| panic!("clang not found ({e}): apt-get install clang libbpf-dev"));
    assert!(status.success(), "clang failed to build {}", src.display());
}

/// Links `parts` into one object at `linked`.
fn link(bpftool: &str, linked: &Path, parts: &[&PathBuf]) {
    let link = Command::new(bpftool)
        .args(["gen", "object"])
        .arg(linked)
        .args(parts)
        .output()
        .unwrap_or_else(|e| panic!("running bpftool gen object: {e}"));
    assert!(link.status.success(), "bpftool gen object failed: {}", String::from_utf8_lossy(&link.stderr));
}

/// The backend a source (by stem) belongs to, None for a shared one.
fn backend_of(stem: &str) -> Option<&'static str> {
    BACKENDS.into_iter().find(|b| stem == *b || stem.strip_prefix(b).is_some_and(|rest| rest.starts_with('_')))
}

fn run_c(out: &Path, bpf: &Path, name: &str, program: &str) -> Vec<u8> {
    let src = out.join(format!("{name}.c"));
    std::fs::write(&src, program).unwrap_or_else(|e| panic!("write {name}.c: {e}"));
    let exe = out.join(name);
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc).arg("-I").arg(bpf).arg(&src).arg("-o").arg(&exe).status().expect("run the C compiler");
    assert!(status.success(), "compiling {name}.c failed");
    let run = Command::new(&exe).output().unwrap_or_else(|e| panic!("run {name}: {e}"));
    assert!(run.status.success(), "{name} failed");
    run.stdout
}

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bpf = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("bpf");
    println!("cargo:rerun-if-changed=bpf");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(&bpf).expect("read bpf/") {
        let path = entry.expect("read bpf/").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        println!("cargo:rerun-if-changed=bpf/{name}");
        if name.ends_with(".bpf.c") {
            sources.push(path);
        }
    }
    sources.sort();
    println!("cargo:rerun-if-env-changed=RINGTAIL_VMLINUX_BTF");

    let btf = env::var("RINGTAIL_VMLINUX_BTF").unwrap_or_else(|_| "/sys/kernel/btf/vmlinux".into());
    if !Path::new(&btf).exists() {
        panic!("{btf} not found: building the probes needs a kernel with BTF (CONFIG_DEBUG_INFO_BTF=y), or RINGTAIL_VMLINUX_BTF pointing at a vmlinux BTF file");
    }
    let bpftool = ["bpftool", "/usr/sbin/bpftool", "/sbin/bpftool"]
        .into_iter()
        .find(|b| Command::new(b).arg("version").output().is_ok_and(|o| o.status.success()))
        .unwrap_or_else(|| panic!("bpftool not found: apt-get install bpftool"));
    let dump = Command::new(bpftool)
        .args(["btf", "dump", "file", &btf, "format", "c"])
        .output()
        .unwrap_or_else(|e| panic!("running bpftool: {e}"));
    assert!(dump.status.success(), "bpftool btf dump failed: {}", String::from_utf8_lossy(&dump.stderr));
    std::fs::write(out.join("vmlinux.h"), &dump.stdout).expect("write vmlinux.h");

    // One object per source, then one linked object per capture backend:
    // the backend's hook family plus every shared one (the process hooks).
    let mut objects = Vec::new();
    for src in &sources {
        let stem = src.file_name().and_then(|n| n.to_str()).unwrap_or_default().trim_end_matches(".c");
        let obj = out.join(format!("{stem}.o"));
        compile(&out, &bpf, src, &obj, &[]);
        objects.push((stem.trim_end_matches(".bpf").to_owned(), obj));
    }
    let optional = |s: &str| OPTIONAL.iter().any(|(o, _)| *o == s);
    let variants = BACKENDS.into_iter().map(|b| (b, None)).chain(OPTIONAL.into_iter().map(|(o, b)| (b, Some(o))));
    let mut linked = Vec::new();
    for (backend, with) in variants {
        assert!(objects.iter().any(|(s, _)| s == backend), "bpf/{backend}.bpf.c is missing");
        let parts = objects
            .iter()
            .filter(|(s, _)| if optional(s) { Some(s.as_str()) == with } else { backend_of(s).is_none_or(|b| b == backend) })
            .map(|(_, o)| o);
        let out_file = match with {
            Some(part) => out.join(format!("ringtail-{backend}-{part}.bpf.o")),
            None => out.join(format!("ringtail-{backend}.bpf.o")),
        };
        link(bpftool, &out_file, &parts.collect::<Vec<_>>());
        linked.push(out_file);
    }
    let variants = NO_XCHG.iter().map(|b| (*b, "noxchg", "RINGTAIL_NO_XCHG")).chain(LOOP.iter().map(|b| (*b, "loop", "RINGTAIL_BPF_LOOP")));
    for (backend, suffix, define) in variants {
        let mut parts = Vec::new();
        for (stem, obj) in &objects {
            match backend_of(stem) {
                Some(b) if b == backend => {
                    let again = out.join(format!("{stem}.{suffix}.bpf.o"));
                    compile(&out, &bpf, &bpf.join(format!("{stem}.bpf.c")), &again, &[define]);
                    parts.push(again);
                }
                None if !optional(stem) => parts.push(obj.clone()),
                _ => {}
            }
        }
        let out_file = out.join(format!("ringtail-{backend}-{suffix}.bpf.o"));
        link(bpftool, &out_file, &parts.iter().collect::<Vec<_>>());
        linked.push(out_file);
    }

    // The linked objects' digests, by file name.
    let mut digests =
        String::from("/// FNV-1a of each linked eBPF object, by file name (build.rs).\npub const OBJECT_DIGESTS: &[(&str, u64)] = &[\n");
    for path in &linked {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let name = path.file_name().and_then(|n| n.to_str()).expect("an object's name is UTF-8");
        digests.push_str(&format!("    ({name:?}, {:#018x}),\n", fnv::fnv1a(fnv::FNV_OFFSET, &bytes)));
    }
    digests.push_str("];\n");
    std::fs::write(out.join("objects.rs"), digests).expect("write objects.rs");

    // The contract's constants, evaluated by the C compiler.
    let header = std::fs::read_to_string(bpf.join("ringtail.h")).expect("read bpf/ringtail.h");
    let mut program = String::from("#include <stdio.h>\n#include <linux/types.h>\n#include \"ringtail.h\"\nint main(void) {\n");
    for (name, doc) in defines(&header) {
        let doc = if doc.is_empty() { format!("`{name}` in bpf/ringtail.h.") } else { format!("{doc} (`{name}`).") };
        let ty = rust_type(&name);
        program.push_str(&format!(
            "    printf(\"/// %s\\npub const {name}: {ty} = %lld;\\n\", \"{}\", (long long)({name}));\n",
            doc.replace('\\', "\\\\").replace('"', "\\\"").replace('%', "%%")
        ));
    }
    program.push_str("    return 0;\n}\n");
    std::fs::write(out.join("contract.rs"), run_c(&out, &bpf, "contract", &program)).expect("write contract.rs");

    // Sizes and offsets of the shared structs, as the C compiler lays them out.
    let table = run_c(
        &out,
        &bpf,
        "layout",
        r#"#include <stdio.h>
#include <stddef.h>
#include <linux/types.h>
#include "ringtail.h"
#define OFF(s, f) printf("pub const %s_%s: usize = %zu;\n", #s, #f, offsetof(struct s, f))
int main(void) {
    printf("pub const HTTP_EVENT_SIZE: usize = %zu;\n", sizeof(struct http_event));
    printf("pub const EXEC_EVENT_SIZE: usize = %zu;\n", sizeof(struct exec_event));
    printf("pub const FORK_EVENT_SIZE: usize = %zu;\n", sizeof(struct fork_event));
    printf("pub const PROC_HEAD_SIZE: usize = %zu;\n", sizeof(struct proc_head));
    printf("pub const TLS_REPORT_SIZE: usize = %zu;\n", sizeof(struct tls_report));
    printf("pub const EXE_LITERAL_SIZE: usize = %zu;\n", sizeof(struct exe_literal));
    printf("pub const CONN_HEAD_SIZE: usize = %zu;\n", sizeof(struct conn_head));
    printf("pub const IO_HEAD_SIZE: usize = %zu;\n", sizeof(struct io_head));
    printf("pub const H2_DATA_OFFSET: usize = %zu;\n", offsetof(struct h2_event, data));
    printf("pub const STREAM_DATA_OFFSET: usize = %zu;\n", offsetof(struct stream_event, data));
    OFF(conn_head, flags); OFF(conn_head, tgid); OFF(conn_head, fd); OFF(conn_head, conn_id); OFF(conn_head, proc_start_ns);
    OFF(conn_head, lport); OFF(conn_head, tls); OFF(conn_head, laddr); OFF(conn_head, raddr); OFF(conn_head, comm);
    OFF(io_head, dir); OFF(io_head, data_len); OFF(io_head, link_seq); OFF(io_head, ts_ns); OFF(io_head, link_conn);
    OFF(http_event, status); OFF(http_event, cap_len); OFF(http_event, req_len); OFF(http_event, start_ns);
    OFF(http_event, parent_conn); OFF(http_event, seq); OFF(http_event, tp); OFF(http_event, kparent); OFF(http_event, buf);
    OFF(proc_head, kind); OFF(proc_head, proc_start_ns);
    OFF(exec_event, env_len); OFF(exec_event, cgroup_levels); OFF(exec_event, env_total); OFF(exec_event, path);
    OFF(exec_event, exe); OFF(exec_event, cgroups); OFF(exec_event, env);
    OFF(fork_event, parent_tgid); OFF(fork_event, parent_start_ns);
    OFF(tls_report, parent_tgid); OFF(tls_report, dev_major); OFF(tls_report, ino); OFF(tls_report, path);
    return 0;
}
"#,
    );
    std::fs::write(out.join("layout.rs"), table).expect("write layout.rs");
}
