// SPDX-License-Identifier: GPL-2.0-only
/* The floor of each way to hook syscalls (bench/syscall-hooks/README.md):
 * programs that only filter by syscall number, what any capture costs at
 * least. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";
volatile __u64 hits;

/* raw (BTF) tracepoints: every syscall of every task, filtered by number */
SEC("tp_btf/sys_enter")
int BPF_PROG(raw_enter, struct pt_regs *regs, long id)
{
	if (id > 47 || !((1ULL << id) & 0xf0000300003ULL)) /* 0,1,19,20,44-47 */
		return 0;
	__sync_fetch_and_add(&hits, 1);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(raw_exit, struct pt_regs *regs, long ret)
{
	long id = regs->orig_ax;
	if (id > 47 || !((1ULL << id) & 0xf0000300003ULL))
		return 0;
	__sync_fetch_and_add(&hits, 1);
	return 0;
}

/* per-syscall tracepoints (tracefs): only the hooked calls */
SEC("tracepoint/syscalls/sys_enter_read")
int tp_enter_read(void *ctx) { __sync_fetch_and_add(&hits, 1); return 0; }
SEC("tracepoint/syscalls/sys_exit_read")
int tp_exit_read(void *ctx) { __sync_fetch_and_add(&hits, 1); return 0; }
SEC("tracepoint/syscalls/sys_enter_write")
int tp_enter_write(void *ctx) { __sync_fetch_and_add(&hits, 1); return 0; }
SEC("tracepoint/syscalls/sys_exit_write")
int tp_exit_write(void *ctx) { __sync_fetch_and_add(&hits, 1); return 0; }
