/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the hooks call, whatever their family: the bytes a process received
 * or sent on a connection (conn_on_recv, conn_on_send), and its close
 * (conn_close, conn_sock_state). A hook finds the connection (conn_get),
 * decides whether its bytes are wanted (conn_wanted), finds the user
 * segments of the bytes moved, and calls in here; the connection's protocol
 * machine (http1_conn.h, h2.h) takes them, or, on a database connection,
 * stream.h ships them.
 */
#ifndef RINGTAIL_CAPTURE_H
#define RINGTAIL_CAPTURE_H

#include "conn.h"
#include "http1_conn.h"
#include "h2.h"
#include "stream.h"
#include "tls_report.h"

/* Bytes the process received on a connection (`st` from conn_get, NULL for
 * an untracked one: it becomes a server connection if a request, or what
 * may be the start of one, begins). One place walks HTTP/2 bytes, so the
 * walk is verified once per program. */
static __always_inline void conn_on_recv(struct conn_state *st, const struct conn_io *io,
					 const struct segs *sg)
{
	if (st ? st->stream : stream_port(io->sk)) {
		stream_on_data(st, io, sg, IO_RECV);
		return;
	}
	if (!st || !st->h2)
		st = http1_on_recv(st, io, sg);
	if (st)
		h2_on_data(st, io, sg, IO_RECV);
}

/* Bytes the process sent on a connection (`st` from conn_get, NULL for an
 * untracked one: it becomes a client connection if a request begins). */
static __always_inline void conn_on_send(struct conn_state *st, const struct conn_io *io,
					 const struct segs *sg)
{
	if (st ? st->stream : stream_port(io->sk)) {
		stream_on_data(st, io, sg, IO_SEND);
		return;
	}
	if (!st || !st->h2)
		st = http1_on_send(st, io, sg);
	if (st)
		h2_on_data(st, io, sg, IO_SEND);
}

/* The connection closed: its state goes (a request in flight is counted). */
static __always_inline void conn_close(struct sock *sk)
{
	struct conn_state *st = conn_get(sk);
	if (!st)
		return;
	if (st->stream)
		stream_close(st, sk);
	else if (st->h2)
		h2_close(st, sk);
	else if (st->phase == PHASE_REQUEST) {
		count(CNT_ABORTED);
		if (st->role == ROLE_SERVER)
			active_answered(st, (__u32)bpf_get_current_pid_tgid());
	}
	conn_del(sk);
}

/* A TCP socket changed state (inet_sock_set_state): at close its state goes;
 * a listener on a configured port selects its process (port discovery). */
static __always_inline void conn_sock_state(struct sock *sk, int newstate)
{
	if (newstate == TCP_CLOSE) {
		conn_close(sk);
		return;
	}
	if (newstate == TCP_LISTEN && !select_all) {
		__u16 port = SK(sk, __sk_common.skc_num);
		if (bpf_map_lookup_elem(&sel_ports, &port)) {
			__u32 tgid = bpf_get_current_pid_tgid() >> 32;
			__u8 why = SEL_EXPLICIT;
			int was = bpf_map_lookup_elem(&sel_pids, &tgid) != NULL;
			bpf_map_update_elem(&sel_pids, &tgid, &why, BPF_ANY);
			/* a newly selected process: the TLS attacher looks at what it
			 * maps (per-process links for it, or file-wide ones for a
			 * libssl file it mapped before it was selected) */
			if (!was && tls_on) {
				struct task_struct *t = (struct task_struct *)bpf_get_current_task();
				tls_report_process(TLSR_SELECT, tgid, BPF_CORE_READ(t, group_leader, start_boottime), 0);
			}
		}
	}
}

#endif
