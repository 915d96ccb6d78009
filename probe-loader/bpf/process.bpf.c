// SPDX-License-Identifier: GPL-2.0-only
/*
 * Process hooks (tp_btf/sched_process_{fork,exit,exec}): selected processes
 * pass their selection to children, leave the map when they exit, and the
 * loader hears of every new process (`execs` ring, struct proc_head):
 *
 *  - exec: the path given to exec (exe-name discovery), the executable's
 *    file name, and with probe.read_process_env the first ENV_LEN bytes of
 *    the new environment (mm->env_start..env_end, just written by exec, so
 *    present in memory), flagged when cut or unreadable. This is how the
 *    loader names processes that start after it dropped CAP_SYS_PTRACE:
 *    it never opens /proc/PID/{exe,environ} of another process then.
 *  - fork (processes, not threads): the child runs its parent's executable
 *    with its parent's environment until it execs; the loader copies what
 *    it knows of the parent. Not worth a wakeup: the loader reads the ring
 *    before it names the processes of a batch, and on its flush timer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "globals.h"
#include "maps.h"
#include "tls_report.h"

SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
	if (child->pid != child->tgid)
		return 0; /* a thread */
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;
	if (!select_all) {
		__u8 *why = bpf_map_lookup_elem(&sel_pids, &ptgid);
		if (why) {
			__u8 inherited = *why;
			bpf_map_update_elem(&sel_pids, &ctgid, &inherited, BPF_ANY);
			/* per-process TLS links: the child needs its own (nginx's
			 * workers, gunicorn's: pre-forked servers never exec) */
			if (tls_on && tls_pid_links)
				tls_report_process(TLSR_FORK, ctgid, child->start_boottime, ptgid);
		}
	}
	struct fork_event *ev = bpf_ringbuf_reserve(&execs, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_FORK_LOST);
		return 0;
	}
	ev->h.tgid = ctgid;
	ev->h.kind = PROC_FORK;
	ev->h.flags = 0;
	ev->h._pad = 0;
	ev->h.proc_start_ns = child->start_boottime;
	ev->parent_tgid = ptgid;
	ev->_pad = 0;
	ev->parent_start_ns = parent->group_leader->start_boottime;
	count(CNT_FORK);
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
	return 0;
}

/* The tracepoint's one argument on every kernel is the task (6.16 added
 * `group_dead`, which older kernels refuse to let a program read). do_exit
 * has already counted this thread out of signal->live when the tracepoint
 * fires, so 0 there means the whole process is gone, which is what
 * group_dead says where it exists. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *p)
{
	if (select_all || p->signal->live.counter != 0)
		return 0;
	__u32 tgid = p->tgid;
	if (tls_on && tls_pid_links && bpf_map_lookup_elem(&sel_pids, &tgid))
		tls_report_process(TLSR_EXIT, tgid, p->group_leader->start_boottime, 0);
	bpf_map_delete_elem(&sel_pids, &tgid);
	return 0;
}

/* kernfs_node before Linux 6.15, which renamed `parent` to `__parent`. */
struct kernfs_node___pre615 {
	struct kernfs_node___pre615 *parent;
} __attribute__((preserve_access_index));

static __always_inline struct kernfs_node *kn_parent(struct kernfs_node *kn)
{
	if (bpf_core_field_exists(struct kernfs_node___pre615, parent))
		return (struct kernfs_node *)BPF_CORE_READ((struct kernfs_node___pre615 *)kn, parent);
	return BPF_CORE_READ(kn, __parent);
}

/* The names on cgroup `cg`'s path into names[0..CGROUP_PATH_NAMES) (see
 * CGROUP_TOP) and its depth into *level, walking up at most CGROUP_WALK
 * levels (a deeper path's outer names stay "": the loader knows them
 * missing by its depth). */
static __always_inline void cgroup_path(struct cgroup *cg, char (*names)[CGROUP_NAME_LEN], __u16 *level)
{
	struct kernfs_node *kn = BPF_CORE_READ(cg, kn);
	int depth = BPF_CORE_READ(cg, level);
	if (!kn || depth <= 0)
		return;
	*level = depth > 0xffff ? 0xffff : depth;
	for (int i = 0; i < CGROUP_WALK && kn; i++) {
		int at = depth - i; /* kn's level */
		if (at < 1)
			break;
		const char *name = BPF_CORE_READ(kn, name);
		if (i == 0)
			bpf_probe_read_kernel_str(names[CGROUP_TOP + 1], CGROUP_NAME_LEN, name);
		else if (i == 1)
			bpf_probe_read_kernel_str(names[CGROUP_TOP], CGROUP_NAME_LEN, name);
		__u32 slot = at - 1;
		if (slot < CGROUP_TOP)
			bpf_probe_read_kernel_str(names[slot], CGROUP_NAME_LEN, name);
		kn = kn_parent(kn);
	}
}

/* The process's cgroup paths into ev->cgroups: the unified hierarchy's,
 * then the memory controller's (cgroup v1 hosts put containers there).
 * Read at exec (the runtime has put the container's first process in
 * place by then), so even a process that is gone before the loader reads
 * the record is named with its container. */
static __always_inline void read_cgroups(struct exec_event *ev, struct task_struct *p)
{
	/* names are read up to their NUL: "" is one byte (all 2 KiB would be
	 * more than clang sets inline) */
	for (int i = 0; i < CGROUP_NAMES; i++)
		ev->cgroups[i][0] = 0;
	ev->cgroup_levels[0] = 0;
	ev->cgroup_levels[1] = 0;
	struct css_set *cs = BPF_CORE_READ(p, cgroups);
	if (!cs)
		return;
	cgroup_path(BPF_CORE_READ(cs, dfl_cgrp), &ev->cgroups[0], &ev->cgroup_levels[0]);
	if (!bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id))
		return;
	__u32 id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	struct cgroup_subsys_state *css = NULL;
	bpf_core_read(&css, sizeof(css), &cs->subsys[id & 31]);
	if (css)
		cgroup_path(BPF_CORE_READ(css, cgroup), &ev->cgroups[CGROUP_PATH_NAMES], &ev->cgroup_levels[1]);
}

/* Copies the start of the current process's environment into ev. */
static __always_inline void read_environment(struct exec_event *ev, struct task_struct *p)
{
	struct mm_struct *mm = p->mm;
	if (!mm) {
		ev->h.flags |= EXECF_ENV_FAULT;
		return;
	}
	unsigned long start = mm->env_start, end = mm->env_end;
	__u64 total = end > start ? end - start : 0;
	ev->env_total = total;
	long err;
	if (total >= ENV_LEN) {
		err = bpf_probe_read_user(ev->env, ENV_LEN, (const void *)start);
		ev->env_len = ENV_LEN;
	} else {
		__u32 n = total & (ENV_LEN - 1);
		err = bpf_probe_read_user(ev->env, n, (const void *)start);
		ev->env_len = n;
	}
	if (err) {
		ev->env_len = 0;
		ev->h.flags |= EXECF_ENV_FAULT;
		return;
	}
	ev->h.flags |= EXECF_ENV;
	if (total > ENV_LEN)
		ev->h.flags |= EXECF_ENV_TRUNCATED;
}

/* 1 if the basename of the path given to exec (ev->path, NUL-terminated)
 * is one of exe_literals (ringtail.h). A path that filled its buffer may
 * be cut: its name is matched whole only when its end was seen. */
static __always_inline int exe_literal_match(struct exec_event *ev)
{
	const char *path = ev->path;
	__u32 base = 0;
	for (__u32 i = 0; i < EXEC_PATH_LEN; i++) {
		char c = path[i];
		if (!c)
			break;
		if (c == '/')
			base = i + 1;
	}
	/* Passed through the record's memory, `base` is a value the verifier
	 * does not track: otherwise it follows each value it can take through
	 * the loop above (a state per '/' position: past its budget). */
	ev->env_len = base;
	base = *(volatile __u32 *)&ev->env_len;
	ev->env_len = 0;
	if (base >= EXEC_PATH_LEN)
		return 0;
	for (__u32 k = 0; k < EXE_LITERALS; k++) {
		__u32 len = exe_literals[k].len;
		if (!len || len > EXE_LITERAL_LEN)
			break;
		int same = 1;
		for (__u32 j = 0; j < EXE_LITERAL_LEN && j < len; j++) {
			__u32 at = base + j;
			if (at >= EXEC_PATH_LEN || path[at] != exe_literals[k].name[j]) {
				same = 0;
				break;
			}
		}
		if (!same)
			continue;
		if (!exe_literals[k].exact)
			return 1;
		__u32 end = base + len;
		if (end < EXEC_PATH_LEN - 1 && !path[end])
			return 1;
	}
	return 0;
}

/* Tells the TLS attacher of an exec whose executable it may attach to: a
 * selected process's, or with exe-name discovery any (the attacher
 * matches the names it has no literal for); each file once (per process
 * with per-process links). */
static __always_inline void tls_report_exec(struct exec_event *ev, struct task_struct *p, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	int selected = select_all ? 1 : bpf_map_lookup_elem(&sel_pids, &tgid) != NULL;
	if (!selected && !watch_exec)
		return;
	struct inode *inode = bprm->file->f_inode;
	dev_t dev = inode->i_sb->s_dev;
	__u64 ino = inode->i_ino;
	if (tls_reported_before(dev, ino, tgid))
		return;
	struct tls_report *r = tls_report_begin(TLSR_EXEC, tgid, ev->h.proc_start_ns);
	if (!r)
		return;
	r->flags = selected ? TLSRF_SELECTED : 0;
	r->dev_major = dev >> 20;
	r->dev_minor = dev & ((1U << 20) - 1);
	r->ino = ino;
	__builtin_memcpy(r->path, ev->path, EXEC_PATH_LEN);
	tls_report_send(r);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	if (watch_exec) {
		__u8 *why = bpf_map_lookup_elem(&sel_pids, &tgid);
		if (why && *why == SEL_EXE)
			bpf_map_delete_elem(&sel_pids, &tgid); /* the loader decides again */
	}
	struct exec_event *ev = bpf_ringbuf_reserve(&execs, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_EXEC_LOST);
		return 0;
	}
	ev->h.tgid = tgid;
	ev->h.kind = PROC_EXEC;
	ev->h.flags = 0;
	ev->h._pad = 0;
	ev->h.proc_start_ns = p->group_leader->start_boottime;
	ev->env_len = 0;
	ev->env_total = 0;
	bpf_probe_read_kernel_str(ev->path, sizeof(ev->path), bprm->filename);
	/* A literal exe name is selected here, before the process runs: the
	 * loader, which reads this record a moment later, would miss its
	 * first connections (it selects again, idempotently, or drops it). */
	if (watch_exec && !select_all && exe_literal_match(ev)) {
		__u8 why = SEL_EXE;
		bpf_map_update_elem(&sel_pids, &tgid, &why, BPF_NOEXIST);
	}
	/* the file exec runs (an interpreter for a script), as /proc/PID/exe names it */
	bpf_probe_read_kernel_str(ev->exe, sizeof(ev->exe), bprm->file->f_path.dentry->d_name.name);
	read_cgroups(ev, p);
	if (read_env)
		read_environment(ev, p);
	count(CNT_EXEC);
	if (tls_on)
		tls_report_exec(ev, p, bprm);
	/* With exe-name discovery, urgent: the process may listen any moment
	 * now, and is traced only once the loader has selected it. Otherwise
	 * the loader reads the ring before it names a batch's processes: the
	 * kernel's own policy (a wakeup when the loader has caught up, not one
	 * per record) keeps it from overflowing. A wakeup costs the exec'ing
	 * process ~20 µs here (BENCHMARKS.md). */
	bpf_ringbuf_submit(ev, watch_exec ? BPF_RB_FORCE_WAKEUP : 0);
	return 0;
}
