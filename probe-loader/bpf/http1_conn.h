/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The HTTP/1 state machine of a connection. A server request starts when
 * received bytes begin with a request line and ends when the process sends
 * a status line; a client request is the mirror image. The event is
 * submitted when the response begins (1xx interim responses are skipped),
 * carrying the first CAPTURE_LEN request bytes. A connection leaves it for
 * HTTP/2 (h2.h) at a client preface or a 101 to `Upgrade: h2c`.
 */
#ifndef RINGTAIL_HTTP1_CONN_H
#define RINGTAIL_HTTP1_CONN_H

#include "conn.h"
#include "http1.h"
#include "h2.h"
#include "tls.h"
#include "join.h"
#ifndef RINGTAIL_CONN_TABLE
#include "propagate.h" /* socket backend only */
#endif

/* Marks a request begun whose bytes are already in st->buf. */
static __always_inline void request_started(struct conn_state *st, __u32 tid, __u64 now)
{
	st->seq += 1;
	st->phase = PHASE_REQUEST;
	st->start_ns = now;
	st->tid = tid;
	st->parent_conn = 0;
	st->parent_seq = 0;
	st->pend_len = 0;
	st->join_ok = 0;
	const __u8 *p = st->buf;
	if (p[0] == 'C' && p[1] == 'O' && p[2] == 'N' && p[3] == 'N')
		st->flags |= STF_CONNECT;
}

static __always_inline void begin_request(struct conn_state *st, __u32 tid, __u64 now,
					  const struct segs *sg, __u32 pend)
{
	st->cap_len = 0;
	st->req_len = 0;
	st->flags = 0;
	if (pend) {
		/* the bytes of the request line that came in an earlier read */
		__builtin_memcpy(st->buf, st->pend, PREFIX_LEN);
		st->cap_len = pend & (PREFIX_LEN - 1);
		st->req_len = st->cap_len;
	}
	capture(st, sg);
	request_started(st, tid, now);
}

/* A response (or interim response) went by, at the start of `sg`, in
 * direction `dir` (H2_SEND: the process is the server). */
static __always_inline void on_response(struct conn_state *st, const struct conn_io *io,
					const struct segs *sg, __u8 dir, __u16 status, __u64 now)
{
	if (status >= 100 && status < 200 && status != 101)
		return; /* interim: the final response is still to come */
	if (st->phase != PHASE_REQUEST) {
		count(CNT_ORPHAN);
		emit(st, io->sk, status, EVF_ORPHAN, now);
		return;
	}
	__u32 h2c = status == 101 ? h2c_head_len(sg) : 0;
	if (dir == H2_SEND)
		join_take(st, io->sk);
	emit(st, io->sk, status, h2c ? EVF_H2C : 0, now);
	st->phase = PHASE_IDLE;
	if (status == 101 || ((st->flags & STF_CONNECT) && status < 300)) {
		count(CNT_UPGRADED);
		if (h2c)
			h2_upgrade(st, dir, h2c);
		else
			st->role = ROLE_OPAQUE;
	}
}

/* A server request of `st` was answered (or given up) on thread `tid`: it
 * is no longer open on the thread that began it, if that is this one (an
 * answer on another thread leaves the count high: links refused, never
 * wrong). */
static __always_inline void active_answered(const struct conn_state *st, __u32 tid)
{
	struct active_req *a = active_get(0);
	if (!a)
		return;
	if (st->tid == tid && a->open)
		a->open -= 1;
	if (a->conn_id == st->conn_id)
		a->conn_id = 0;
	active_mirror(a, tid);
}

/* The send hooks fire when a send is over. A client that reads on another
 * thread than it writes (Go's HTTP/1 transport, gRPC) can read the answer
 * before that: a final response goes by while no request is pending, and
 * the request reported next is the one it answered (however long its send
 * took: a large body). Kept here: when (early_ns), its status, and when
 * its request left, where the socket says so for certain: everything the
 * process wrote has been acked (RACK's newest delivered segment ends at
 * write_seq), so that segment, sent at rack.mstamp, was the request's last
 * (the time a reported send is stamped with, as every client request is).
 * A send still under way (a body larger than the socket buffers) leaves it
 * unknown. */
static __always_inline void answer_early(struct conn_state *st, const struct conn_io *io, __u16 status,
					 __u64 now)
{
	st->early_ns = now;
	st->early_start_ns = 0;
	if (!tcp_rack_mstamp_off || !tcp_write_seq_off || io->tls || status < 200)
		return;
	__u32 w = sk_u32_at(io->sk, tcp_write_seq_off);
	if (sk_u32_at(io->sk, tcp_rack_end_seq_off) != w)
		return;
	__u64 sent = sk_u64_at(io->sk, tcp_rack_mstamp_off) * 1000;
	if (!sent || sent > now)
		return;
	st->early_start_ns = sent;
	st->early_seq = w;
	st->early_status = status;
}

/* A client request reported after its answer was read (answer_early):
 * returns that answer's status when the request is certainly the one
 * answered (the send reported ends where the process's writes ended when
 * the answer was read), with when it left in *start and when it was
 * answered in *end; the caller pairs them. Otherwise the request is not
 * traced, and counted (-1): pairing it with the next response would make a
 * wrong span. (A response to a request sent before tracing began is taken
 * for an early one too: the next request is then given up, counted.) */
static __always_inline int answered_first(struct conn_state *st, const struct conn_io *io, __u64 *start,
					  __u64 *end)
{
	if (!st->early_ns || st->role != ROLE_CLIENT)
		return 0;
	*end = st->early_ns;
	st->early_ns = 0;
	if (st->early_start_ns && sk_u32_at(io->sk, tcp_write_seq_off) == st->early_seq) {
		*start = st->early_start_ns;
		count(CNT_ANSWERED_PAIRED);
		return st->early_status;
	}
	count(CNT_ANSWERED_FIRST);
	return -1;
}

/* Remembers the first bytes of a read that may begin a request line
 * (p, PREFIX_LEN of them, n valid), or forgets what was remembered. */
static __always_inline void keep_prefix(struct conn_state *st, const __u8 *p, __u32 n)
{
	__u32 skip = leading_newlines(p, n);
	st->pend_len = request_prefix(p, skip, n) ? n : 0;
	if (st->pend_len)
		__builtin_memcpy(st->pend, p, PREFIX_LEN);
}

/* Notes the socket's write_seq as seen by the hooks (st->sent_seq): at the
 * start of a server request and at each send reported on it. Not under
 * TLS: its hooks see a send when SSL_write is entered, before it is sent. */
static __always_inline void sent_note(struct conn_state *st, const struct conn_io *io)
{
	if (tcp_write_seq_off && !io->tls)
		st->sent_seq = sk_u32_at(io->sk, tcp_write_seq_off);
}

/* Bytes read on a server connection whose request the hooks have not seen
 * answered, after the process sent bytes on it that no hook has reported
 * yet (write_seq moved): the send hooks fire when a send is over, and the
 * client may have read the answer and sent its next request before that
 * (Go's net/http reads one byte ahead while a handler runs, then answers).
 * A short read (less than PREFIX_LEN bytes, one segment: where a request
 * line can start alone) is held in pend until the answer is reported: it
 * then begins what the next read continues, as between keep-alive requests
 * (http1_on_send); an interim answer (100 Continue) makes it the current
 * request's body. Returns 1 if the bytes are held. (Cheap to verify: no
 * scan here, the next read looks at them.) */
static __always_inline int late_request_start(struct conn_state *st, const struct conn_io *io,
					      const struct segs *sg)
{
	__u32 n = sg->total;
	if (!tcp_write_seq_off || io->tls || st->pend_len || sg->n != 1 || !n || n >= PREFIX_LEN)
		return 0;
	if (sk_u32_at(io->sk, tcp_write_seq_off) == st->sent_seq)
		return 0;
	if (bpf_probe_read_user(st->pend, n & (PREFIX_LEN - 1), sg->base[0]))
		return 0;
	st->pend_len = n;
	st->late_seq = join_recv_start(io, n);
	return 1;
}

/* Bytes received on a connection that is not HTTP/2 (yet): HTTP/1. Returns
 * the connection if it is HTTP/2 from these bytes on (a client preface, a
 * 101 to `Upgrade: h2c`): the caller walks them. */
static __always_inline struct conn_state *http1_on_recv(struct conn_state *st, const struct conn_io *io,
							const struct segs *sg)
{
	__u64 now = bpf_ktime_get_ns();

	if (st && (st->role == ROLE_CLIENT || st->phase == PHASE_REQUEST)) {
		if (st->role == ROLE_SERVER) {
			if (!late_request_start(st, io, sg))
				capture(st, sg); /* more of the request */
			return NULL;
		}
		__u8 p[PREFIX_LEN * 2] = {};
		__u32 n = read_prefix(p, sg);
		__u16 status = response_status(p, n);
		if (st->phase != PHASE_REQUEST) {
			/* A response while no request is pending: that request's
			 * send is not reported yet (answer_early). */
			if (is_final(status))
				answer_early(st, io, status, now);
			return NULL;
		}
		if (status)
			on_response(st, io, sg, H2_RECV, status, now);
		return st->h2 ? st : NULL;
	}

	__u32 start = join_recv_start(io, sg->total);
	if (st && st->role == ROLE_SERVER && !st->pend_len) {
		/* Idle keep-alive connection: capture straight into its buffer and
		 * look there (one copy from user memory instead of two). */
		st->cap_len = 0;
		st->req_len = 0;
		st->flags = 0;
		capture(st, sg);
		__u32 n = st->cap_len < PREFIX_LEN ? st->cap_len : PREFIX_LEN;
		if (!is_request(st->buf, leading_newlines(st->buf, n), n)) {
			keep_prefix(st, st->buf, n);
			join_mark(st, start);
			st->cap_len = 0;
			return NULL;
		}
		request_started(st, io->tid, now);
		join_note(st, io, start, leading_newlines(st->buf, n), 0);
		sent_note(st, io);
		goto active;
	}

	/* An unknown connection, or one holding the start of a request line:
	 * does a request begin? */
	__u8 p[PREFIX_LEN * 2] = {};
	__u32 pend = 0;
	if (st && st->pend_len) {
		__builtin_memcpy(p, st->pend, PREFIX_LEN);
		pend = st->pend_len & (PREFIX_LEN - 1);
	}
	__u32 n = read_prefix_at(p, pend, sg);
	__u32 skip = leading_newlines(p, n);
	if (!is_request(p, skip, n)) {
		if (!skip && h2_is_preface(p, n)) {
			/* prior-knowledge HTTP/2: the process is its server */
			if (!st)
				st = conn_new(io, ROLE_SERVER);
			if (!st || st->seq)
				return NULL;
			h2_start(st, H2_RECV, pend);
			join_note(st, io, start, 0, pend);
			return st;
		}
		if (!st && !io->tls)
			tls_saw_read(io->tgid, p, n); /* tls.attach_later */
		/* A new connection whose first read may be the start of a request
		 * line ("G", then the rest later) gets state now, or that request
		 * would go unseen. */
		__u16 status = 0;
		if (!st && request_prefix(p, skip, n)) {
			st = conn_new(io, ROLE_SERVER);
		} else if (!pend && is_final(status = response_status(p, n))) {
			/* A response on a connection with no request: its
			 * request's send is not reported yet (answer_early). */
			if (!st)
				st = conn_new(io, ROLE_CLIENT);
			if (st && st->role == ROLE_CLIENT)
				answer_early(st, io, status, now);
			return NULL;
		}
		if (st) {
			keep_prefix(st, p, n);
			if (!pend)
				join_mark(st, start);
		}
		return NULL;
	}
	if (!st)
		st = conn_new(io, ROLE_SERVER);
	if (!st)
		return NULL;
	begin_request(st, io->tid, now, sg, pend);
	join_note(st, io, start, skip, pend);
	sent_note(st, io);
active:;
	struct active_req *a = active_get(1);
	if (a) {
		a->conn_id = st->conn_id;
		a->seq = st->seq;
		if (a->open < 0xffffffff)
			a->open += 1;
		active_mirror(a, io->tid);
	}
	return NULL;
}

/* A client request begun on `st`: offered for a same-host join, and made
 * the child of the server request the thread is serving, when that is
 * the only one it began and has not answered: an event loop serving
 * several at once could be working for any of them (refused, counted,
 * also when the one it began last is answered and others are not). A
 * thread with an alternate signal stack is never trusted: Go's runtime
 * gives every thread one, and runs goroutines (a handler, a client's
 * writer) on whichever thread is free; so does Rust's std, under runtimes
 * that move tasks between threads. */
static __always_inline void client_links(struct conn_state *st, const struct conn_io *io, __u32 total, __u32 skip)
{
	join_offer(st, io, total, skip);
	struct active_req *a = active_get(0);
	if (a && (a->conn_id || a->open)) {
		if (current_alt_stack()) {
			count(CNT_LINK_ALT_STACK);
			st->flags |= EVF_UNLINKED;
		} else if (a->conn_id && a->open <= 1) {
			st->parent_conn = a->conn_id;
			st->parent_seq = a->seq;
			st->flags |= EVF_PARENT;
		} else {
			count(CNT_LINK_AMBIGUOUS);
			st->flags |= EVF_UNLINKED;
		}
	}
}

/* Bytes sent on a connection that is not HTTP/2 (yet): HTTP/1. Returns the
 * connection if it is HTTP/2 from these bytes on (a client preface, a 101
 * to `Upgrade: h2c`): the caller walks them. */
static __always_inline struct conn_state *http1_on_send(struct conn_state *st, const struct conn_io *io,
							const struct segs *sg)
{
	/* A server connection that has seen a request: is this its response? */
	if (st && st->role == ROLE_SERVER && st->seq) {
		__u8 p[PREFIX_LEN * 2] = {};
		__u32 n = read_prefix(p, sg);
		__u16 status = response_status(p, n);
		sent_note(st, io);
		if (!status)
			return NULL;
		__u8 was = st->phase;
		on_response(st, io, sg, H2_SEND, status, bpf_ktime_get_ns());
		if (st->phase == PHASE_IDLE) {
			active_answered(st, io->tid);
			if (st->pend_len && was == PHASE_REQUEST)
				join_mark(st, st->late_seq); /* the next request began early */
		} else if (st->pend_len) {
			/* interim: what was held is the request's body */
			st->req_len += st->pend_len;
			st->pend_len = 0;
		}
		return st->h2 ? st : NULL;
	}
	if (st && st->phase == PHASE_REQUEST) {
		capture(st, sg); /* request body or the rest of the head */
		return NULL;
	}

	/* An idle client connection, an unknown one, or one that only ever
	 * received the start of a request line: does a request begin? */
	__u8 p[PREFIX_LEN * 2] = {};
	__u32 n = read_prefix(p, sg);
	__u32 skip = leading_newlines(p, n);
	if (!is_request(p, skip, n)) {
		if (!st && !io->tls)
			tls_saw_send(io->sk, io->tgid, io->tid, io->fd, p, n); /* TLS over memory buffers */
		if ((!st || !st->seq) && h2_is_preface(p, n)) {
			/* prior-knowledge HTTP/2: the process is its client */
			if (!st)
				st = conn_new(io, ROLE_CLIENT);
			if (!st)
				return NULL;
			st->role = ROLE_CLIENT;
			h2_start(st, H2_SEND, 0);
			join_offer(st, io, sg->total, 0);
			return st;
		}
		/* A response where no request was recognised (a shape not
		 * followed, a request read before ringtail started, bytes read
		 * where no buffer could be found): counted, never silent. */
		if (!st || st->role == ROLE_SERVER) {
			if (is_final(response_status(p, n)))
				count(CNT_UNRECOGNIZED);
			if (st)
				st->pend_len = 0;
		}
		return NULL;
	}
	if (!st)
		st = conn_new(io, ROLE_CLIENT);
	if (!st)
		return NULL;
	__u64 now = bpf_ktime_get_ns();
	__u64 end = 0;
	int early = answered_first(st, io, &now, &end);
	if (early < 0)
		return NULL;
	/* (a record made by a request-line prefix received on what turns out
	 * to be a client connection becomes the client's) */
	st->role = ROLE_CLIENT;
	st->pend_len = 0;
	begin_request(st, io->tid, now, sg, 0);
#ifndef RINGTAIL_CONN_TABLE
	/* Its traceparent, written by the kernel, names its trace: no join
	 * offer (the server reads the header), no parent (propagate.h writes
	 * none into a thread's calls while it serves). */
	if (!prop_claim(st, io))
#endif
		client_links(st, io, sg->total, skip);
	if (early) {
		/* answered already (answered_first) */
		emit(st, io->sk, early, 0, end);
		st->phase = PHASE_IDLE;
		if ((st->flags & STF_CONNECT) && early < 300) {
			count(CNT_UPGRADED);
			st->role = ROLE_OPAQUE;
		}
	}
	return NULL;
}

#endif
