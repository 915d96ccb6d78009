/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Connection records and the events they make, for every protocol: a hook
 * finds the connection (conn_get), decides whether its bytes are wanted
 * (conn_wanted), and a protocol machine (http1_conn.h, h2.h) creates its
 * record (conn_new), captures request bytes (capture) and submits the
 * event (emit). Where records live is conn_store.h's business; what the
 * hooks call is capture.h.
 */
#ifndef RINGTAIL_CONN_H
#define RINGTAIL_CONN_H

#include "globals.h"
#include "maps.h"
#include "segs.h"
#include "process.h"
#include "conn_store.h"

#define PHASE_IDLE 0
#define PHASE_REQUEST 1
#define RINGBUF_HDR 8
/* conn_state.flags bit that never reaches an event */
#define STF_CONNECT 0x80

/* One send or receive on a connection, as a hook saw it. */
struct conn_io {
	struct sock *sk; /* the connection; addresses and ports for the event */
	__u32 tgid;
	__u32 tid;
	__s32 fd; /* -1 when unknown */
	__u8 tls; /* the bytes are a TLS connection's plaintext (tls.h) */
	__u8 tls_seq_ok; /* a TLS read: tls_seq is known */
	__u32 tls_seq; /* a TLS read: the TCP sequence number of the first
			* ciphertext byte the call read (tls_call.rec_seq) */
};

/* Append request bytes to the capture buffer; remember what did not fit. */
static __always_inline void capture_one(struct conn_state *st, const __u8 *src, __u64 avail)
{
	__u64 off = st->cap_len;
	if (off >= CAPTURE_LEN) {
		st->flags |= EVF_TRUNCATED;
		return;
	}
	__u64 n = CAPTURE_LEN - off;
	if (n > avail)
		n = avail;
	else if (n < avail)
		st->flags |= EVF_TRUNCATED;
	int err;
	if (n == CAPTURE_LEN) {
		/* only when off == 0: a constant size the verifier needs no proof for */
		err = bpf_probe_read_user(st->buf, CAPTURE_LEN, src);
	} else {
		/* off < CAPTURE_LEN and n < CAPTURE_LEN: the masks make both
		 * provable, and the barriers keep clang from dropping them */
		barrier_var(n);
		barrier_var(off);
		err = bpf_probe_read_user(&st->buf[off & (CAPTURE_LEN - 1)],
					  n & (CAPTURE_LEN - 1), src);
	}
	if (!err)
		st->cap_len = off + n;
}

static __always_inline void capture(struct conn_state *st, const struct segs *sg)
{
	/* saturating: a body of 4 GiB or more must not wrap to a small size */
	__u32 sum = st->req_len + sg->total;
	st->req_len = sum < st->req_len ? 0xffffffff : sum;
#pragma unroll
	for (int i = 0; i < MAX_SEGS; i++) {
		if (i >= sg->n)
			break;
		capture_one(st, sg->base[i], sg->len[i]);
	}
}

/* The connection's state, or NULL when it is not tracked. */
static __always_inline struct conn_state *conn_get(struct sock *sk)
{
	return conn_lookup(sk);
}

/* New state for a connection of `role` (zeroed but for these fields), or
 * NULL when none can be had (counted). */
static __always_inline struct conn_state *conn_new(const struct conn_io *io, __u8 role)
{
	struct sock *sk = io->sk;
	/* A closed socket gets none: TCP_CLOSE, which deletes state, has passed
	 * (bytes can still be read after a reset), and nothing can be answered. */
	if (SK(sk, __sk_common.skc_state) == TCP_CLOSE)
		return NULL;
	int made = 0;
	struct conn_state *st = conn_create(sk, &made);
	if (!st) {
		/* socket storage: the socket's option memory (net.core.optmem_max)
		 * is used up; the table: probe.max_connections are tracked; either:
		 * the kernel is out of memory */
		count(CNT_STATE_FAILED);
		return NULL;
	}
	/* Whoever made the record fills it in and counts it. */
	if (!made)
		return st;
	st->conn_id = conn_next_id();
	st->role = role;
	st->tgid = io->tgid;
	st->tid = io->tid;
	st->fd = io->fd;
	st->tls = io->tls;
	count(CNT_CONNS);
	return st;
}

/* Forgets a connection's state. */
static __always_inline void conn_del(struct sock *sk)
{
	if (conn_remove(sk) == 0)
		count_add(CNT_CONNS, -1);
}

/* Whether bytes a hook saw on `sk` go to the state machine (`st` from
 * conn_get): a tracked connection's do unless it left HTTP/1 or is TLS (its
 * socket carries ciphertext: the plaintext comes from tls.h); an untracked
 * one's when its process is selected, or (`recv`: a server's) when it
 * arrived on a selected listening port. */
static __always_inline int conn_wanted(struct conn_state *st, struct sock *sk, __u32 tgid, int recv)
{
	if (st)
		return st->role != ROLE_OPAQUE && !st->tls && st->h2 != H2_DEAD;
	return recv ? server_selected(tgid, SK(sk, __sk_common.skc_num)) : pid_selected(tgid);
}

/* The ring-buffer flags for a record of `size` bytes of data (its header
 * and padding added here), submitted when the ring's unread bytes are
 * `avail` without it (bpf_ringbuf_output: queried before) or with it
 * (bpf_ringbuf_reserve: its space is taken when queried; `included`). The
 * loader is woken when the unread bytes cross a multiple of wakeup_bytes,
 * whatever the records' sizes: a database record of 16 KiB counts for what
 * it takes, so records that big cannot fill the ring between wake-ups.
 * "At least the threshold" would wake it on every record while it lags;
 * the loader's flush timer drains what stays below the threshold. */
static __always_inline __u64 wakeup_flags(__u64 size, int included)
{
	if (wakeup_bytes == 0)
		return 0;
	__u64 rec = (size + RINGBUF_HDR + 7) & ~7ULL;
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 before = avail, after = avail + rec;
	if (included) {
		before = avail >= rec ? avail - rec : 0;
		after = avail;
	}
	if (before / wakeup_bytes != after / wakeup_bytes) {
		count(CNT_WAKEUPS);
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

/* Fills the header every record of a connection starts with (`tid`, `fd`:
 * the syscall's, where the record is of one). */
static __always_inline void conn_head_fill(struct conn_head *h, __u8 kind, __u8 flags, const struct conn_state *st,
					   struct sock *sk, __u32 tid, __s32 fd)
{
	h->kind = kind;
	h->role = st->role;
	h->flags = flags;
	__u16 family = SK(sk, __sk_common.skc_family);
	h->family = family;
	h->tgid = st->tgid;
	h->tid = tid;
	h->fd = fd;
	h->conn_id = st->conn_id;
	task_ids(&h->proc_start_ns, (char *)h->comm);
	h->lport = SK(sk, __sk_common.skc_num);
	h->rport = bpf_ntohs(SK(sk, __sk_common.skc_dport));
	h->tls = st->tls;
	__builtin_memset(h->_pad, 0, sizeof(h->_pad));
	__builtin_memset(h->laddr, 0, sizeof(h->laddr));
	__builtin_memset(h->raddr, 0, sizeof(h->raddr));
	sk_addrs(sk, family, h->laddr, h->raddr);
}

/* Fills a syscall record's header (h2_event, stream_event) and submits it
 * with data_len bytes of pieces, at most `cap`, a constant of each caller:
 * the room after `ev` in the scratch value it lives in (H2_DATA_LEN in
 * h2_scratch, h2.h; STREAM_DATA_LEN in stream_scratch, stream.h). (Not
 * derived from the kind at run time: a verifier that loses data_len's
 * bound in a spill, Linux 6.1, must still see the copy fit its value.)
 * Returns non-zero when the ring had no room. */
static __always_inline int io_submit(struct io_head *ev, __u8 kind, __u8 flags, struct conn_state *st,
				     struct sock *sk, __u32 tid, __s32 fd, __u8 dir, __u32 data_len, __u64 link_conn,
				     __u32 link_seq, const __u32 cap)
{
	conn_head_fill(&ev->h, kind, flags, st, sk, tid, fd);
	ev->dir = dir;
	ev->_pad0 = 0;
	ev->link_seq = link_seq;
	ev->ts_ns = bpf_ktime_get_ns();
	ev->link_conn = link_conn;
	if (data_len > cap)
		data_len = cap;
	ev->data_len = data_len;
	__u64 size = sizeof(struct io_head) + data_len;
	barrier_var(size);
	if (size > sizeof(struct io_head) + cap)
		return 1;
	return bpf_ringbuf_output(&events, ev, size, wakeup_flags(size, 0)) ? 1 : 0;
}

/* A connection's close record (IOF_CLOSE, no pieces) of `kind`, built in
 * the ring itself, not in a per-CPU scratch value: a close is reported by
 * sock_state, which may run in a softirq that interrupted a send or
 * receive on this CPU while it was filling that value (its record would
 * then go out with this close's header, and the close with its bytes).
 * Non-zero when the ring had no room. */
static __always_inline int io_close(__u8 kind, struct conn_state *st, struct sock *sk)
{
	struct io_head *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev)
		return 1;
	conn_head_fill(&ev->h, kind, IOF_CLOSE, st, sk, st->tid, st->fd);
	ev->dir = IO_RECV;
	ev->_pad0 = 0;
	ev->data_len = 0;
	ev->link_seq = 0;
	ev->ts_ns = bpf_ktime_get_ns();
	ev->link_conn = 0;
	bpf_ringbuf_submit(ev, wakeup_flags(sizeof(*ev), 1));
	return 0;
}

static __always_inline void emit(struct conn_state *st, struct sock *sk, __u16 status,
				 __u8 extra_flags, __u64 now)
{
	struct http_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_RING_FULL);
		return;
	}
	__u8 flags = (st->flags & ~STF_CONNECT) | extra_flags;
	conn_head_fill(&ev->h, EV_HTTP, flags, st, sk, st->tid, st->fd);
	ev->status = status;
	ev->req_len = st->req_len;
	ev->start_ns = st->start_ns;
	ev->end_ns = now;
	ev->parent_conn = st->parent_conn;
	ev->parent_seq = st->parent_seq;
	ev->seq = st->seq;
	if (flags & EVF_KIDS) {
		__builtin_memcpy(ev->tp, st->kids, sizeof(ev->tp));
		__builtin_memcpy(ev->kparent, st->kids + sizeof(ev->tp), sizeof(ev->kparent));
	} else {
		if (flags & EVF_PROPAGATED)
			__builtin_memcpy(ev->tp, st->tp, sizeof(ev->tp));
		else
			__builtin_memset(ev->tp, 0, sizeof(ev->tp));
		__builtin_memset(ev->kparent, 0, sizeof(ev->kparent));
	}
	__u32 n = extra_flags & EVF_ORPHAN ? 0 : st->cap_len;
	if (n > CAPTURE_LEN)
		n = CAPTURE_LEN;
	ev->cap_len = n;
	/* map value to ring record: a fixed-size copy is cheaper here than a
	 * helper call of the exact size */
	if (n)
		__builtin_memcpy(ev->buf, st->buf, CAPTURE_LEN);
	count(CNT_EVENTS);
	if (flags & EVF_TRUNCATED)
		count(CNT_TRUNCATED);
	bpf_ringbuf_submit(ev, wakeup_flags(sizeof(*ev), 1));
}

#endif
