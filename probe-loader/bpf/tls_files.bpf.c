// SPDX-License-Identifier: GPL-2.0-only
/*
 * Which libssl files processes map (tls_report.h, TLSR_MAP): the attacher
 * attaches to a new OpenSSL file as soon as a selected process maps it,
 * whatever its path or mount namespace (a container's own copy), before
 * the process can call it. No BTF tracepoint reports a file mapping
 * (LSM and fentry hooks are not used), so this is the syscall tracepoint
 * `syscalls/sys_enter_mmap` (tracefs), where the file is the process's
 * descriptor: resolved through its file table (CO-RE reads), kept if it is
 * a regular file named libssl* mapped executable (the dynamic loader maps
 * a library's code so, and dlopen too). Any process's mmap enters the
 * program; one not selected, a mapping that is not executable or of no
 * file, leaves at once.
 */
/* a tracefs tracepoint on every kernel: the task pointer is read, not typed (process.h) */
#define RINGTAIL_PORTABLE
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "fdsock.h"
#include "globals.h"
#include "maps.h"
#include "process.h"
#include "tls_report.h"

#define TLS_PROT_EXEC 0x4
#define TLS_S_IFMT 00170000
#define TLS_S_IFREG 0100000

/* void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) */
SEC("tracepoint/syscalls/sys_enter_mmap")
int tls_mmap(struct trace_event_raw_sys_enter *ctx)
{
	if (!tls_on || !(ctx->args[2] & TLS_PROT_EXEC) || (__s32)ctx->args[4] < 0)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!pid_selected(tgid))
		return 0;
	struct file *f = fd_file((__s32)ctx->args[4]);
	if (!f)
		return 0;
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	if ((BPF_CORE_READ(inode, i_mode) & TLS_S_IFMT) != TLS_S_IFREG)
		return 0;
	char name[8] = {};
	bpf_probe_read_kernel_str(name, sizeof(name), BPF_CORE_READ(f, f_path.dentry, d_name.name));
	if (name[0] != 'l' || name[1] != 'i' || name[2] != 'b' || name[3] != 's' || name[4] != 's' || name[5] != 'l')
		return 0;
	dev_t dev = BPF_CORE_READ(inode, i_sb, s_dev);
	__u64 ino = BPF_CORE_READ(inode, i_ino);
	if (tls_reported_before(dev, ino, tgid))
		return 0;
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct tls_report *r = tls_report_begin(TLSR_MAP, tgid, BPF_CORE_READ(t, group_leader, start_boottime));
	if (!r)
		return 0;
	r->flags = TLSRF_SELECTED;
	r->dev_major = dev >> 20;
	r->dev_minor = dev & ((1U << 20) - 1);
	r->ino = ino;
	tls_report_send(r);
	return 0;
}
