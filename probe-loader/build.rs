//! Builds the eBPF object (clang, CO-RE against this machine's BTF) and a
//! table of the C structs' sizes and offsets, so the Rust mirrors in
//! `src/kernel.rs` are checked against what the kernel writes.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bpf = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("bpf");
    for f in ["ringtail.bpf.c", "ringtail.h"] {
        println!("cargo:rerun-if-changed=bpf/{f}");
    }
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

    let obj = out.join("ringtail.bpf.o");
    let status = Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", "-Wall", "-Werror", "-Wno-unused-function"])
        .arg("-I").arg(&out)
        .arg("-I").arg(&bpf)
        .arg("-c").arg(bpf.join("ringtail.bpf.c"))
        .arg("-o").arg(&obj)
        .status()
        .unwrap_or_else(|e| panic!("clang not found ({e}): apt-get install clang libbpf-dev"));
    assert!(status.success(), "clang failed to build the eBPF object");

    // Sizes and offsets of the shared structs, as the C compiler lays them out.
    let probe_c = out.join("layout.c");
    std::fs::write(
        &probe_c,
        r#"#include <stdio.h>
#include <stddef.h>
#include <linux/types.h>
#include "ringtail.h"
#define OFF(s, f) printf("pub const %s_%s: usize = %zu;\n", #s, #f, offsetof(struct s, f))
int main(void) {
    printf("pub const HTTP_EVENT_SIZE: usize = %zu;\n", sizeof(struct http_event));
    printf("pub const EXEC_EVENT_SIZE: usize = %zu;\n", sizeof(struct exec_event));
    OFF(http_event, status); OFF(http_event, tgid); OFF(http_event, conn_id);
    OFF(http_event, start_ns); OFF(http_event, parent_conn); OFF(http_event, lport);
    OFF(http_event, laddr); OFF(http_event, raddr); OFF(http_event, comm); OFF(http_event, buf);
    OFF(exec_event, proc_start_ns); OFF(exec_event, path);
    return 0;
}
"#,
    )
    .expect("write layout.c");
    let exe = out.join("layout");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc).arg("-I").arg(&bpf).arg(&probe_c).arg("-o").arg(&exe).status().expect("run the C compiler");
    assert!(status.success(), "compiling layout.c failed");
    let table = Command::new(&exe).output().expect("run layout");
    std::fs::write(out.join("layout.rs"), table.stdout).expect("write layout.rs");
}
