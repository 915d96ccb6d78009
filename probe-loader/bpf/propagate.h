/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Trace context propagation (probe.propagate, off by default): a
 * `traceparent` line written into the clear-text HTTP/1 requests that traced
 * processes send without one, so that the server, on this host or another,
 * continues the client's trace (ringtail there, or its own OpenTelemetry
 * SDK). Socket backend only: it needs socket-local storage from tp_btf and
 * sockops programs and task-local storage from sk_msg programs.
 *
 *  - A connection of a traced process is marked when it connects
 *    (inet_sock_set_state to SYN_SENT runs in the connecting thread:
 *    prop_mark), and claimed when established by the sockops program
 *    (prop_sockops), which puts it in `prop_socks`: only the sockets of
 *    traced processes are in the map, so no other socket of the host (nor
 *    Cilium's or any other sockmap user's) meets the sk_msg program.
 *  - The sk_msg program (prop_msg) sees each send on those sockets before
 *    TCP does. It writes "traceparent: 00-<trace>-<span>-01\r\n" after the
 *    request line, with random ids, when the connection is idle (conn.h's
 *    record: no request pending, not HTTP/2, not TLS, not upgraded, no early
 *    answer), the bytes begin with a request line ending in "HTTP/1.x", the
 *    head ends within the send's first PROP_HEAD_MAX bytes and holds no
 *    traceparent, and the thread serves no request (a call made for a
 *    request belongs to that request's trace, which the kernel does not
 *    know: refused, counted; `prop_threads`, conn_store.h, says which
 *    threads serve: sk_msg programs may read task-local storage only from
 *    Linux 6.18, not on 6.12). The ids stay in the socket's `prop` record;
 *    the capture of the same send (sock_send, which runs when the send is
 *    over) gives them to the request (prop_claim) and its event
 *    (EVF_PROPAGATED): the client span takes them, the server span names it
 *    as its parent. Whatever the capture did not claim is counted when the
 *    send is over (prop_settle).
 */
#ifndef RINGTAIL_PROPAGATE_H
#define RINGTAIL_PROPAGATE_H

#include "maps.h"
#include "process.h"
#include "conn_store.h"
#include "http1.h"

/* The bytes of a send searched for the end of the request head. */
#define PROP_HEAD_MAX 1024
/* "traceparent: 00-" + 32 + "-" + 16 + "-01\r\n" */
#define TP_LINE_LEN 70
#define TCP_SYN_SENT 2
#define PROP_IPPROTO_TCP 6

/* A connection of a traced process, for propagation. */
struct prop_state {
	__u8 ids[24]; /* trace id, span id (W3C order) of the pending write */
	__u32 tid;    /* the thread whose send wrote them */
	__u8 armed;   /* marked at connect (prop_mark) */
	__u8 pending; /* written by a send whose capture has not run yet */
	__u8 _pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct prop_state);
} prop SEC(".maps") __weak; /* the sock object's and propagate.bpf.c's */

/* inet_sock_set_state: a traced process's TCP socket begins to connect. */
static __always_inline void prop_mark(struct sock *sk, int newstate)
{
	if (!propagate || newstate != TCP_SYN_SENT || sk->sk_protocol != PROP_IPPROTO_TCP)
		return;
	if (!pid_selected(bpf_get_current_pid_tgid() >> 32))
		return;
	struct prop_state *ps = bpf_sk_storage_get(&prop, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (ps)
		ps->armed = 1;
}

/* A client request begins at this send (http1_conn.h): its traceparent, if
 * the sk_msg program wrote one in this thread's send. */
static __always_inline int prop_claim(struct conn_state *st, const struct conn_io *io)
{
	if (!propagate)
		return 0;
	struct prop_state *ps = bpf_sk_storage_get(&prop, io->sk, NULL, 0);
	if (!ps || !ps->armed) {
		/* connected while its process was not traced (yet): the
		 * selection by executable name is made after exec, by the
		 * loader; or before ringtail started */
		count(CNT_PROP_NOT_CLAIMED);
		return 0;
	}
	if (!ps->pending || ps->tid != io->tid)
		return 0;
	ps->pending = 0;
	__builtin_memcpy(st->tp, ps->ids, sizeof(st->tp));
	st->flags |= EVF_PROPAGATED;
	/* written while the thread serves a request (its mirror entry was
	 * evicted): the call keeps the trace it was sent with, not linked */
	struct active_req *a = active_get(0);
	if (a && (a->conn_id || a->open))
		count(CNT_PROP_WHILE_SERVING);
	return 1;
}

/* A send is over: a write its capture did not claim is counted. */
static __always_inline void prop_settle(struct sock *sk)
{
	if (!propagate)
		return;
	struct prop_state *ps = bpf_sk_storage_get(&prop, sk, NULL, 0);
	if (ps && ps->pending) {
		ps->pending = 0;
		count(CNT_PROP_UNCLAIMED);
	}
}

#endif
