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
#include "carrier.h"

/* 1: atomic exchange (BPF_XCHG, Linux 5.12+). The syscall backend's object
 * is also built without (RINGTAIL_NO_XCHG, build.rs) for older kernels,
 * whose verifier refuses the instruction even in code a load-time constant
 * leaves dead; the loader picks by trying one (backend.rs). */
#ifdef RINGTAIL_NO_XCHG
#define HAVE_XCHG 0
#else
#define HAVE_XCHG 1
#endif

/* Marks a request begun whose bytes are already in st->buf; `phase`: what
 * st->phase becomes now (a client's request is published last, by
 * client_begun, PHASE_IDLE here). */
static __always_inline void request_started(struct conn_state *st, __u32 tid, __u64 now, __u8 phase)
{
	st->seq += 1;
	st->phase = phase;
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
					  const struct segs *sg, __u32 pend, __u8 phase)
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
	request_started(st, tid, now, phase);
}

/* A response (or interim response) went by, at the start of `sg`, in
 * direction `dir` (IO_SEND: the process is the server). */
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
	if (dir == IO_SEND)
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
	carrier_mirror(a, tid);
}

/* The send hooks fire when a send is over. A client that reads on another
 * thread than it writes (Go's HTTP/1 transport, gRPC) can read the answer
 * before that: a final response goes by while no request is pending. It is
 * kept (answer_early) for the request reported next, and whichever of the
 * two hooks comes second settles them (early_settle). The two run at once
 * on two CPUs: each publishes its half first (the reader the answer, through
 * the token early_ns, its time; the sender the request, through
 * st->phase), then looks for the other's, and the token is taken by an
 * exchange, so exactly one of them settles. Kernels before 5.12 have no
 * exchange (RINGTAIL_NO_XCHG): there a request published while its answer is
 * read can wait for the next send, which settles it then. */

/* Takes the early answer's token: its time, or 0 if none is kept. */
static __always_inline __u64 early_take(struct conn_state *st)
{
	if (HAVE_XCHG)
		return __atomic_exchange_n(&st->early_ns, 0, __ATOMIC_SEQ_CST);
	__u64 e = st->early_ns;
	st->early_ns = 0;
	return e;
}

/* The current client request (published) and its early answer, whose token
 * `e` (when it was read) the caller took: one of three. The request's bytes
 * end at write_seq now (a client writes one request at a time: nothing of
 * the next is written before this answer is seen) and began req_len
 * before.
 *  - The answer was read before any byte of this request was written
 *    (early_seq, write_seq at the read, is at or before its start): it
 *    answered a request not seen (sent before the process was traced);
 *    counted an orphan, and this request waits for its own.
 *  - It was read when everything the process wrote had been acked (RACK's
 *    newest delivered segment ended at write_seq, the end of this
 *    request): that segment, sent at rack.mstamp, was the request's last;
 *    the span is made from then (the time a reported send is stamped with,
 *    as every client request is) to the read.
 *  - Otherwise (a send still under way when the answer came, as a body
 *    larger than the socket buffers; TLS, whose write_seq says nothing) it
 *    is not traced, and counted: pairing it with the next response would
 *    make a wrong span. */
static __always_inline void early_settle(struct conn_state *st, const struct conn_io *io, __u64 e)
{
	if (st->early_seqs) {
		__u32 w = sk_u32_at(io->sk, tcp_write_seq_off);
		if ((__s32)(st->early_seq - (w - st->req_len)) <= 0) {
			count(CNT_ORPHAN);
			return;
		}
		if (st->early_start_ns && st->early_seq == w) {
			count(CNT_ANSWERED_PAIRED);
			st->start_ns = st->early_start_ns;
			emit(st, io->sk, st->early_status, 0, e);
			st->phase = PHASE_IDLE;
			if ((st->flags & STF_CONNECT) && st->early_status < 300) {
				count(CNT_UPGRADED);
				st->role = ROLE_OPAQUE;
			}
			return;
		}
	}
	count(CNT_ANSWERED_FIRST);
	st->phase = PHASE_IDLE;
}

/* A final response read on a client connection with no request pending:
 * kept with what the socket says of it (early_settle), then published. If
 * the request was published meanwhile and its sender has not taken the
 * answer, it is taken back and settled here. */
static __always_inline void answer_early(struct conn_state *st, const struct conn_io *io, __u16 status,
					 __u64 now)
{
	st->early_start_ns = 0;
	st->early_seqs = 0;
	st->early_status = status;
	if (tcp_write_seq_off && !io->tls) {
		__u32 w = sk_u32_at(io->sk, tcp_write_seq_off);
		st->early_seq = w;
		st->early_seqs = 1;
		__u64 sent = tcp_rack_mstamp_off ? sk_u64_at(io->sk, tcp_rack_mstamp_off) * 1000 : 0;
		if (status >= 200 && sk_u32_at(io->sk, tcp_rack_end_seq_off) == w && sent && sent <= now)
			st->early_start_ns = sent;
	}
	if (!HAVE_XCHG) {
		barrier();
		st->early_ns = now;
		return;
	}
	__atomic_exchange_n(&st->early_ns, now, __ATOMIC_SEQ_CST);
	if (*(volatile __u8 *)&st->phase != PHASE_REQUEST)
		return;
	__u64 e = early_take(st);
	if (e)
		early_settle(st, io, e);
}

/* Publishes a client request begun (its fields filled in), then settles its
 * answer if that was read first. Nothing is written to st after the token
 * is looked at, but by whoever took it. */
static __always_inline void client_begun(struct conn_state *st, const struct conn_io *io)
{
	barrier();
	st->phase = PHASE_REQUEST;
	/* (the exchange in early_take orders the store before its load) */
	__u64 e = early_take(st);
	if (e)
		early_settle(st, io, e);
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

/* A connection with no state on which the process sent a TLS handshake
 * record (a client's ClientHello, a server's ServerHello), outside any TLS
 * call (Go's crypto/tls; memory buffers, which tls_saw_send has just bound):
 * what moves on its socket is ciphertext from now on. It gets state marked
 * TLS, so that the socket hooks leave every later byte alone (conn_wanted;
 * not at a handshake record read: a server that runs TLS over memory
 * buffers binds at its first send, which the mark would hide). A read
 * may begin anywhere inside a record, and bytes that look random can look
 * like a request line too ("xt /…": about once in 3,000 connections of
 * Go's), which, before the plaintext gave the connection state (Go's lazy
 * path hands it on late, go_tls.h), made requests of ciphertext, or a held
 * prefix that the plaintext's request was appended to. Its role is the
 * plaintext's: a server's until its first request is sent (http1_on_send
 * makes it a client's). */
static __always_inline void tls_conn_mark(const struct conn_io *io, const __u8 *p, __u32 n)
{
	if (!tls_handshake_record(p, n))
		return;
	struct conn_state *st = conn_new(io, ROLE_SERVER);
	if (st)
		st->tls = 1;
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
			on_response(st, io, sg, IO_RECV, status, now);
		return st->h2 ? st : NULL;
	}

	__u32 start = join_recv_start(io, sg->total);
	if (st && st->role == ROLE_SERVER && st->seq && !st->pend_len) {
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
		request_started(st, io->tid, now, PHASE_REQUEST);
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
			h2_start(st, IO_RECV, pend);
			join_note(st, io, start, 0, pend);
			return st;
		}
		if (!st && !io->tls)
			tls_saw_read(io->tgid, p, n); /* a TLS connection before its uprobes */
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
	begin_request(st, io->tid, now, sg, pend, PHASE_REQUEST);
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
		carrier_server(st, io, a);
		carrier_mirror(a, io->tid);
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
			carrier_child(st, a);
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
		on_response(st, io, sg, IO_SEND, status, bpf_ktime_get_ns());
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
		/* A client request whose answer is kept unsettled (a kernel
		 * without exchange, answer_early) is settled first. */
		__u64 e = st->role == ROLE_CLIENT ? early_take(st) : 0;
		if (e)
			early_settle(st, io, e);
		if (st->phase == PHASE_REQUEST) {
			capture(st, sg); /* request body or the rest of the head */
			return NULL;
		}
	}

	/* An idle client connection, an unknown one, or one that only ever
	 * received the start of a request line: does a request begin? */
#ifndef RINGTAIL_CONN_TABLE
	/* Not inside a body, as propagation framed this send (a body sent
	 * after an early answer can look like a request) */
	if (st && st->role == ROLE_CLIENT && prop_in_body(io))
		return NULL;
#endif
	__u8 p[PREFIX_LEN * 2] = {};
	__u32 n = read_prefix(p, sg);
	__u32 skip = leading_newlines(p, n);
	if (!is_request(p, skip, n)) {
		if (!st && !io->tls) {
			tls_saw_send(io->sk, io->tgid, io->tid, io->fd, p, n); /* TLS over memory buffers */
			tls_conn_mark(io, p, n);
		}
		if ((!st || !st->seq) && h2_is_preface(p, n)) {
			/* prior-knowledge HTTP/2: the process is its client */
			if (!st)
				st = conn_new(io, ROLE_CLIENT);
			if (!st)
				return NULL;
			st->role = ROLE_CLIENT;
			h2_start(st, IO_SEND, 0);
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
	/* (a record made by a request-line prefix received on what turns out
	 * to be a client connection becomes the client's) */
	st->role = ROLE_CLIENT;
	st->pend_len = 0;
	begin_request(st, io->tid, bpf_ktime_get_ns(), sg, 0, PHASE_IDLE);
#ifndef RINGTAIL_CONN_TABLE
	/* Its traceparent, written by the kernel, names its trace: no join
	 * offer (the server reads the header), no parent (propagate.h writes
	 * none into a thread's calls while it serves). */
	if (!prop_claim(st, io))
#endif
		client_links(st, io, sg->total, skip);
	/* (the ids its first segment carried, over client_links') */
	carrier_claim(st, io, sg->total, skip);
	client_begun(st, io);
	return NULL;
}

#endif
