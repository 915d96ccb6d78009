/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Globals shared by every program object. Exactly one object (sock.bpf.c)
 * defines them (RINGTAIL_DEFINE_GLOBALS); the others declare them extern
 * and weak, and `bpftool gen object` resolves them to that one definition,
 * which is what the loader sets by name before load (aya override_global).
 */
#ifndef RINGTAIL_GLOBALS_H
#define RINGTAIL_GLOBALS_H

#include "ringtail.h"

#ifdef RINGTAIL_DEFINE_GLOBALS
#define RINGTAIL_GLOBAL(type, name, init) type name = init
char LICENSE[] SEC("license") = "GPL";
#else
#define RINGTAIL_GLOBAL(type, name, init) extern type name __weak
#endif

/* Set by the loader before load. */
/* Force a wakeup each time the ring's unread bytes cross a multiple of
 * this (probe.wakeup_len HTTP events' worth, at most an eighth of the ring:
 * probes.rs); 0 = kernel default. */
RINGTAIL_GLOBAL(const volatile __u64, wakeup_bytes, 0);
/* 1 = trace every process except ringtail's own. */
RINGTAIL_GLOBAL(const volatile __u8, select_all, 1);
/* 1 = report exec events (exe-name discovery is configured). */
RINGTAIL_GLOBAL(const volatile __u8, watch_exec, 0);
/* The literal ones of discovery.exe_names, matched at exec (ringtail.h);
 * unused entries have len 0. */
RINGTAIL_GLOBAL(const volatile struct exe_literal, exe_literals[EXE_LITERALS], {});
/* 1 = exec events carry the start of the environment (probe.read_process_env). */
RINGTAIL_GLOBAL(const volatile __u8, read_env, 0);
/* probe.stream_ports: a selected process's connections to these ports are
 * byte streams (stream.h); unused entries are 0. */
RINGTAIL_GLOBAL(const volatile __u16, stream_ports[STREAM_PORTS], {});
/* 1 = listeners on configured ports are selected (sel_ports is in use). */
RINGTAIL_GLOBAL(const volatile __u8, select_ports, 0);

/* 1 = the TLS uprobes are attached (tls.enabled): the socket hooks look for a TLS call in progress. */
RINGTAIL_GLOBAL(const volatile __u8, tls_on, 0);
/* 1 = the TLS attacher makes per-process links (uprobe_multi's pid filter,
 * a subset of processes selected): exec and map reports are per process,
 * and forks, exits and new selections of selected processes are reported. */
RINGTAIL_GLOBAL(const volatile __u8, tls_pid_links, 0);

/* 1 = probe.propagate: write a traceparent into traced clients' HTTP/1 requests (propagate.h). */
RINGTAIL_GLOBAL(const volatile __u8, propagate, 0);
/* 1 = a connection stays in the socket map after its first request, so
 * that its later requests are written too (probe.propagate_keep_alive,
 * decided by the loader: not where FIONREAD reads 0 in a socket map). */
RINGTAIL_GLOBAL(const volatile __u8, prop_keep_alive, 0);
/* 1 = probe.carrier: the kernel decides HTTP/1 requests' ids and carries
 * them to the next host in a TCP header option (carrier.h). */
RINGTAIL_GLOBAL(const volatile __u8, carrier, 0);

/* Byte offsets of struct tcp_sock's copied_seq and write_seq, from the
 * kernel's BTF (the loader's kernel_btf.rs; CO-RE cannot place them here);
 * 0: unknown, no same-host joins (join.h). */
RINGTAIL_GLOBAL(const volatile __u32, tcp_copied_seq_off, 0);
RINGTAIL_GLOBAL(const volatile __u32, tcp_write_seq_off, 0);
/* And of rack.mstamp (u64, microseconds of the monotonic clock) and
 * rack.end_seq: when the newest segment the peer acked was sent, and where
 * it ended (http1_conn.h, answer_early); 0: unknown. */
RINGTAIL_GLOBAL(const volatile __u32, tcp_rack_mstamp_off, 0);
RINGTAIL_GLOBAL(const volatile __u32, tcp_rack_end_seq_off, 0);
/* And of snd_nxt: where the next byte never sent goes (propagate.bpf.c);
 * 0: unknown, nothing is written but into a socket with nothing queued. */
RINGTAIL_GLOBAL(const volatile __u32, tcp_snd_nxt_off, 0);

/* A u32 field of the socket at byte `off` (one of those above). */
static __always_inline __u32 sk_u32_at(struct sock *sk, __u32 off)
{
	__u32 v = 0;
	bpf_probe_read_kernel(&v, sizeof(v), (const void *)((unsigned long)sk + off));
	return v;
}

/* A u64 field of the socket at byte `off`. */
static __always_inline __u64 sk_u64_at(struct sock *sk, __u32 off)
{
	__u64 v = 0;
	bpf_probe_read_kernel(&v, sizeof(v), (const void *)((unsigned long)sk + off));
	return v;
}

/* Connection numbers: unique per loaded program, never kernel addresses. */
RINGTAIL_GLOBAL(__u64, next_conn_id, 0);

#endif
