/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the kernel tells the TLS attacher (src/attacher.rs, the one small
 * privileged process that attaches the TLS uprobes after start): facts
 * about processes and files, on a ring of its own (`tls_reports`, struct
 * tls_report), never a request's bytes. The attacher acts on these alone:
 * an exec (TLSR_EXEC: its executable may be Go's crypto/tls or export
 * OpenSSL's functions), an executable mapping of a libssl* file
 * (TLSR_MAP, tls_files.bpf.c), a process newly selected (TLSR_SELECT:
 * a libssl file it mapped before was not attached for it), and with
 * per-process links (tls_pid_links) a selected process's fork and exit.
 * Each file is reported once (per process with per-process
 * links: `tls_reported`). A report wakes the attacher at once: it attaches
 * before the process's first TLS call where it can.
 */
#ifndef RINGTAIL_TLS_REPORT_H
#define RINGTAIL_TLS_REPORT_H

#include "globals.h"
#include "maps.h"

/* A new report of `kind` about process `tgid` (started at `start`), zeroed
 * but for those; NULL (counted) if the ring is full. Submit it with
 * tls_report_send. */
static __always_inline struct tls_report *tls_report_begin(__u32 kind, __u32 tgid, __u64 start)
{
	struct tls_report *r = bpf_ringbuf_reserve(&tls_reports, sizeof(*r), 0);
	if (!r) {
		count(CNT_TLS_REPORT_LOST);
		return NULL;
	}
	r->kind = kind;
	r->tgid = tgid;
	r->proc_start_ns = start;
	r->parent_tgid = 0;
	r->flags = 0;
	r->dev_major = 0;
	r->dev_minor = 0;
	r->ino = 0;
	r->path[0] = 0;
	return r;
}

/* Sends a report, waking the attacher. */
static __always_inline void tls_report_send(struct tls_report *r)
{
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
}

/* A report of `kind` with nothing but the process. */
static __always_inline void tls_report_process(__u32 kind, __u32 tgid, __u64 start, __u32 parent)
{
	struct tls_report *r = tls_report_begin(kind, tgid, start);
	if (!r)
		return;
	r->parent_tgid = parent;
	tls_report_send(r);
}

/* Whether file `dev`/`ino` was reported before for process `tgid` (for
 * any, with file-wide links); marks it reported. */
static __always_inline int tls_reported_before(dev_t dev, __u64 ino, __u32 tgid)
{
	struct tls_file_key k = {
		/* the kernel's dev_t: 12 bits of major above 20 of minor */
		.dev_major = dev >> 20,
		.dev_minor = dev & ((1U << 20) - 1),
		.ino = ino,
		.tgid = tls_pid_links ? tgid : 0,
	};
	__u8 one = 1;
	return bpf_map_update_elem(&tls_reported, &k, &one, BPF_NOEXIST) != 0;
}

#endif
