/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Which processes are traced: everything but ringtail itself, or only the
 * selected ones (sel_pids, and listeners on sel_ports).
 */
#ifndef RINGTAIL_PROCESS_H
#define RINGTAIL_PROCESS_H

#include "globals.h"
#include "maps.h"

/* ringtail never traces itself: every ringtail binary's name starts so. */
static __always_inline int is_self(void)
{
#ifdef RINGTAIL_PORTABLE
	/* (conn_store.h) no BTF task pointer: one probe read of the name */
	char c[8];
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct task_struct *leader = BPF_CORE_READ(t, group_leader);
	bpf_core_read(c, sizeof(c), &leader->comm);
#else
	struct task_struct *t = bpf_get_current_task_btf();
	/* direct BTF loads: cheaper than a helper call */
	const char *c = t->group_leader->comm;
#endif
	return c[0] == 'r' && c[1] == 'i' && c[2] == 'n' && c[3] == 'g' && c[4] == 't' &&
	       c[5] == 'a' && c[6] == 'i' && c[7] == 'l';
}

static __always_inline int pid_selected(__u32 tgid)
{
	if (select_all)
		return !is_self();
	return bpf_map_lookup_elem(&sel_pids, &tgid) != NULL && !is_self();
}

static __always_inline int server_selected(__u32 tgid, __u16 lport)
{
	if (!select_all && bpf_map_lookup_elem(&sel_ports, &lport) != NULL)
		return !is_self();
	return pid_selected(tgid);
}

#endif
