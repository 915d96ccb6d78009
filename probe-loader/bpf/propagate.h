/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Trace context propagation (probe.propagate, off by default): a
 * `traceparent` line written into the clear-text HTTP/1 requests that traced
 * processes send without one, so that the server, on this host or another,
 * continues the client's trace (ringtail there, or its own OpenTelemetry
 * SDK). Socket backend only: it needs socket-local storage from tp_btf and
 * sockops programs. Written only where a request verifiably begins; and a
 * socket is in the socket map, where the kernel gives it tcp_bpf's proto
 * (whose recvmsg, ioctl and sendmsg are not plain TCP's), only while that
 * may still happen.
 *
 *  - Claimed (prop_mark): a connection a traced thread begins
 *    (inet_sock_set_state to SYN_SENT runs in the connecting thread) on a
 *    non-blocking socket, while the thread serves no request. Not claimed:
 *    a blocking socket (a recv waiting in tcp_bpf_recvmsg returns EAGAIN
 *    when anything but data wakes it: a signal, the ack of its FIN, room
 *    for a writer; Linux 6.1 to 6.18 alike), and a call made while serving
 *    (never written: its trace is the request's, which the kernel does
 *    not know). The sockops program (propagate.bpf.c) puts a claimed one in
 *    `prop_socks` when it is established, and asks for its state and
 *    header-option callbacks: the latter run inside every send (TCP sizes
 *    its segments), which is where it takes the socket out of the map
 *    when the sk_msg program asks (`leave`); the state callback takes it
 *    out at the first state after ESTABLISHED (its FIN or the peer's).
 *  - The sk_msg program (prop_msg) sees each send before TCP does, with
 *    the socket's write_seq: the TCP sequence number of the send's first
 *    byte. The connection's first send must begin with an HTTP/1 request
 *    head that ends within PROP_HEAD_MAX bytes, else the connection is
 *    given up (`state` PROP_OUT) and leaves the map in that send. Each head
 *    it takes says where the next request can begin (`next_seq`: the head,
 *    the line written, the Content-Length body); a later send is a request
 *    start only if it begins exactly there and the previous request's
 *    final answer began a read since (`answered`, prop_on_recv). A body of
 *    unknown length (Transfer-Encoding, Expect, an invalid or repeated
 *    Content-Length), an Upgrade or CONNECT, a request begun inside a
 *    send or before the previous one's answer, a send the program did not
 *    see (the kernel skips the program once after a send it could not
 *    complete), a head not whole in reach: the connection is given up.
 *    Where the kernel's FIONREAD is wrong for sockets in a map
 *    (`prop_keep_alive` 0, the loader's probe), every connection leaves
 *    after its first request's send.
 *  - It writes "traceparent: 00-<trace>-<span>-01\r\n" after the request
 *    line of a head it takes when the head names no traceparent, the
 *    thread serves no request (`prop_threads`, conn_store.h: sk_msg
 *    programs may read task-local storage only from Linux 6.18), and the
 *    socket has nothing unacknowledged queued (a send cut short by a full
 *    buffer would keep part of the line); each refusal counted. The ids
 *    stay in `prop` until the capture of the same send (sock_send, which
 *    runs when the send is over) gives them to the request it begins
 *    (prop_claim) and its event (EVF_PROPAGATED): the client span takes
 *    them, the server span names it as its parent. A request the capture
 *    begins where the program took no head is counted by why
 *    (prop_claim); bytes the program placed inside a body begin no request
 *    (prop_in_body). Whatever the capture did not claim is counted when the
 *    send is over (prop_settle).
 */
#ifndef RINGTAIL_PROPAGATE_H
#define RINGTAIL_PROPAGATE_H

#include "maps.h"
#include "process.h"
#include "conn_store.h"
#include "http1.h"
#include "io.h"

/* The bytes of a send searched for the end of the request head. */
#define PROP_HEAD_MAX 1024
/* "traceparent: 00-" + 32 + "-" + 16 + "-01\r\n" */
#define TP_LINE_LEN 70
#define TCP_SYN_SENT 2
#define PROP_IPPROTO_TCP 6
#define PROP_O_NONBLOCK 04000

/* prop_state.state */
#define PROP_FIRST 0 /* no send yet: the first must begin with a request head */
#define PROP_HTTP 1  /* framed so far: the next request may begin at next_seq */
#define PROP_OUT 2   /* given up: never written again, out of the map */

/* A connection of a traced process, for propagation. */
struct prop_state {
	__u8 ids[24];	 /* trace id, span id (W3C order) of the pending write */
	__u32 tid;	 /* the thread whose send set pending, seen or in_body */
	__u32 next_seq;	 /* PROP_HTTP: where the next request may begin */
	__u8 armed;	 /* claimed at connect (prop_mark) */
	__u8 pending;	 /* written by a send whose capture has not run yet */
	__u8 seen;	 /* that send's head was taken (written, or counted) */
	__u8 in_body;	 /* that send is inside the current request's body */
	__u8 state;	 /* PROP_* */
	__u8 answered;	 /* a final answer began a read since the current head */
	__u8 leave;	 /* out of the map at the next sockops callback */
	__u8 why;	 /* CNT_PROP_*: how a request not taken is counted */
	__u8 flags_ours; /* sockops callback flags the claim turned on */
	__u8 _pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct prop_state);
} prop SEC(".maps") __weak; /* the sock object's and propagate.bpf.c's */

/* Whether the socket's file is non-blocking (a recv on it never waits in
 * the kernel: tcp_bpf_recvmsg's wait is never reached). `sk` is a BTF
 * pointer. */
static __always_inline int prop_nonblocking(struct sock *sk)
{
	struct socket *so = sk->sk_socket;
	if (!so)
		return 0;
	struct file *f = so->file;
	if (!f)
		return 0;
	return (f->f_flags & PROP_O_NONBLOCK) != 0;
}

/* inet_sock_set_state: a traced process's TCP socket begins to connect. */
static __always_inline void prop_mark(struct sock *sk, int newstate)
{
	if (!propagate || newstate != TCP_SYN_SENT || sk->sk_protocol != PROP_IPPROTO_TCP)
		return;
	if (!pid_selected(bpf_get_current_pid_tgid() >> 32))
		return;
	struct prop_state *ps = bpf_sk_storage_get(&prop, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!ps)
		return;
	/* (a socket may connect again after a failed attempt) */
	ps->armed = 0;
	ps->pending = 0;
	ps->seen = 0;
	ps->in_body = 0;
	ps->state = PROP_FIRST;
	ps->answered = 0;
	ps->leave = 0;
	ps->flags_ours = 0;
	ps->next_seq = 0;
	struct active_req *a = active_get(0);
	if (a && (a->conn_id || a->open)) {
		ps->why = CNT_PROP_SERVING;
		return;
	}
	if (!prop_nonblocking(sk)) {
		ps->why = CNT_PROP_BLOCKING;
		return;
	}
	ps->why = 0;
	ps->armed = 1;
}

/* A read on a framed connection: does a final answer begin it? (So the
 * current request's exchange may be over: prop_msg.) `ret` bytes read. */
static __always_inline void prop_on_recv(struct sock *sk, int ret)
{
	if (!propagate || !prop_keep_alive)
		return;
	struct prop_state *ps = bpf_sk_storage_get(&prop, sk, NULL, 0);
	if (!ps || ps->state != PROP_HTTP || ps->answered || ret < 12)
		return;
	struct segs sg = {};
	__s32 fd = -1;
	if (user_segs(ret, &fd, &sg) || !sg.n)
		return;
	__u64 len = sg.len[0];
	const __u8 *base = sg.base[0];
	__u8 p[16] = {};
	if (len < 12 || bpf_probe_read_user(p, 12, base))
		return;
	if (is_final(response_status(p, 12)))
		ps->answered = 1;
}

/* A client request begins at this send (http1_conn.h): its traceparent, if
 * the sk_msg program wrote one in this thread's send; a request it took no
 * head of is counted here. */
static __always_inline int prop_claim(struct conn_state *st, const struct conn_io *io)
{
	if (!propagate)
		return 0;
	struct prop_state *ps = bpf_sk_storage_get(&prop, io->sk, NULL, 0);
	if (!ps) {
		/* connected while its process was not traced (yet): the
		 * selection by executable name is made after exec, by the
		 * loader; or before ringtail started */
		count(CNT_PROP_NOT_CLAIMED);
		return 0;
	}
	if (!ps->armed) {
		/* not claimed at connect (blocking, made while serving, the
		 * map full), or not traced then */
		count(ps->why ? ps->why : CNT_PROP_NOT_CLAIMED);
		return 0;
	}
	if (!ps->seen || ps->tid != io->tid) {
		/* no head taken at this send: the connection was given up (or
		 * left after its first request), or these bytes are inside the
		 * current request's body (prop_in_body keeps them from
		 * beginning a request; one that begins anyway is counted) */
		count(ps->state == PROP_OUT && ps->why ? ps->why : CNT_PROP_IN_BODY);
		return 0;
	}
	ps->seen = 0;
	if (!ps->pending)
		return 0; /* taken and refused: counted by the sk_msg program */
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

/* Whether this send's bytes are inside the current request's body, as
 * the sk_msg program framed them: they begin no request (however much
 * they look like one). */
static __always_inline int prop_in_body(const struct conn_io *io)
{
	if (!propagate)
		return 0;
	struct prop_state *ps = bpf_sk_storage_get(&prop, io->sk, NULL, 0);
	return ps && ps->in_body && ps->tid == io->tid;
}

/* A send is over: a write its capture did not claim is counted. */
static __always_inline void prop_settle(struct sock *sk)
{
	if (!propagate)
		return;
	struct prop_state *ps = bpf_sk_storage_get(&prop, sk, NULL, 0);
	if (!ps)
		return;
	ps->seen = 0;
	ps->in_body = 0;
	if (ps->pending) {
		ps->pending = 0;
		count(CNT_PROP_UNCLAIMED);
	}
}

#endif
