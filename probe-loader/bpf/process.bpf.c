// SPDX-License-Identifier: GPL-2.0-only
/*
 * Process hooks (tp_btf/sched_process_{fork,exit,exec}): selected processes
 * pass their selection to children, leave the map when they exit, and new
 * executables are offered to the loader for exe-name matching.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "globals.h"
#include "maps.h"

SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
	if (select_all || child->pid != child->tgid)
		return 0;
	__u32 ptgid = parent->tgid;
	__u8 *why = bpf_map_lookup_elem(&sel_pids, &ptgid);
	if (!why)
		return 0;
	__u32 ctgid = child->tgid;
	__u8 inherited = *why;
	bpf_map_update_elem(&sel_pids, &ctgid, &inherited, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *p, bool group_dead)
{
	if (select_all || !group_dead)
		return 0;
	__u32 tgid = p->tgid;
	bpf_map_delete_elem(&sel_pids, &tgid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (!watch_exec)
		return 0;
	__u32 tgid = p->tgid;
	__u8 *why = bpf_map_lookup_elem(&sel_pids, &tgid);
	if (why && *why == SEL_EXE)
		bpf_map_delete_elem(&sel_pids, &tgid); /* the loader decides again */
	struct exec_event *ev = bpf_ringbuf_reserve(&execs, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_EXEC_LOST);
		return 0;
	}
	ev->tgid = p->tgid;
	ev->_pad = 0;
	ev->proc_start_ns = p->group_leader->start_boottime;
	bpf_probe_read_kernel_str(ev->path, sizeof(ev->path), bprm->filename);
	count(CNT_EXEC);
	/* Rare and urgent: the process may listen any moment now. */
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
	return 0;
}
