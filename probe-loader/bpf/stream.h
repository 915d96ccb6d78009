/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Byte-stream connections, the client side, of every protocol that is not
 * HTTP (databases: PostgreSQL, MySQL/MariaDB, Redis, memcached; brokers):
 * a selected process's connection to a configured port (probe.stream_ports,
 * the one classifier here: which protocol it speaks is user space's to
 * tell, span-actor/src/stream_table.rs) goes to user space as a byte
 * stream, one record per send or receive (struct stream_event, its data
 * up to STREAM_DATA_LEN long): the syscall's first bytes, how many went
 * by unseen (PIECE_LOST), and its last STREAM_TAIL bytes. Messages,
 * pipelines and errors are user space's: it needs the byte counts to stay
 * in step, and a large answer's end, which is in its last bytes. A TLS
 * connection's plaintext comes from the TLS hooks the same way (its
 * socket's first bytes, PostgreSQL's SSLRequest or MySQL's greeting, come
 * in clear).
 *
 * HTTP pays one check of the peer port on a connection it has no state
 * for yet (its first bytes), nothing after.
 */
#ifndef RINGTAIL_STREAM_H
#define RINGTAIL_STREAM_H

#include "conn.h"

/* Room for the head's pieces: what is left leaves a PIECE_LOST piece, the
 * tail's PIECE_MORE piece and two PIECE_GAP pieces. */
#define STREAM_HEAD_ROOM (STREAM_DATA_LEN - STREAM_TAIL - 8 - 2 * GAP_PIECE_LEN)

/* Whether `sk`'s peer port is a configured stream port. */
static __always_inline int stream_port(struct sock *sk)
{
	__u16 port = bpf_ntohs(SK(sk, __sk_common.skc_dport));
#pragma unroll
	for (int i = 0; i < STREAM_PORTS; i++) {
		if (!stream_ports[i])
			return 0;
		if (stream_ports[i] == port)
			return 1;
	}
	return 0;
}

/* Appends an PIECE_LOST piece at `off` (<= STREAM_DATA_LEN - 5). */
static __always_inline __u32 stream_lost(__u8 *data, __u32 off, __u64 bytes)
{
	__u32 n = bytes > 0xffffffff ? 0xffffffff : bytes;
	data[off] = PIECE_LOST;
	data[off + 1] = n;
	data[off + 2] = n >> 8;
	data[off + 3] = n >> 16;
	data[off + 4] = n >> 24;
	return off + 5;
}

/* Writes an PIECE_MORE piece's header at `off` for the `n` bytes after it. */
static __always_inline __u32 stream_more_head(__u8 *data, __u32 off, __u64 n)
{
	data[off] = PIECE_MORE;
	data[off + 1] = n;
	data[off + 2] = n >> 8;
	return off + 3 + n;
}

/* Takes the bytes of direction `dir` lost since the connection's last
 * record (the hooks of its reader and writer may run at once on two CPUs:
 * an exchange, where the kernel has one; before 5.12 two records racing
 * for the same gap can tell it twice or drop part of its count). */
static __always_inline __u64 stream_gap_take(struct conn_state *st, int dir)
{
#ifdef RINGTAIL_NO_XCHG
	__u64 g = st->gap[dir & 1];
	st->gap[dir & 1] = 0;
	return g;
#else
	return __atomic_exchange_n(&st->gap[dir & 1], 0, __ATOMIC_SEQ_CST);
#endif
}

/* Appends an PIECE_GAP piece at `off` (<= STREAM_DATA_LEN - GAP_PIECE_LEN). */
static __always_inline __u32 stream_gap_piece(__u8 *data, __u32 off, __u8 dir, __u64 bytes)
{
	__u32 n = bytes > 0xffffffff ? 0xffffffff : bytes;
	data[off] = PIECE_GAP;
	data[off + 1] = dir;
	data[off + 2] = n;
	data[off + 3] = n >> 8;
	data[off + 4] = n >> 16;
	data[off + 5] = n >> 24;
	return off + GAP_PIECE_LEN;
}

/* The bytes of one send or receive on a database connection (`st` NULL:
 * its first, on a connection to a database port): its record. */
static __always_inline void stream_on_data(struct conn_state *st, const struct conn_io *io, const struct segs *sg,
				       __u8 dir)
{
	if (!st) {
		st = conn_new(io, ROLE_CLIENT);
		if (!st)
			return;
		st->stream = 1;
		st->first = IOF_START;
		count(CNT_STREAM_CONNS);
	}
	__u32 zero = 0;
	struct stream_event *s = bpf_map_lookup_elem(&stream_scratch, &zero);
	if (!s)
		return;
	__u8 *data = s->data;
	/* The head from the first segment alone, the tail only from a single
	 * one (database clients send and receive one buffer a call; a
	 * vectored call's later segments are counted as unseen): two reads
	 * of user memory at most, few paths for the verifier. */
	__u64 total = sg->total;
	__u64 first = sg->n ? sg->len[0] : 0;
	if (first > total)
		first = total;
	/* Every write is bounded by a clamp the verifier follows (the
	 * per-CPU value has no room for a spill): the head at offset 0, at
	 * most STREAM_HEAD_ROOM - 3 bytes after its header; then an PIECE_LOST
	 * piece; then the tail, at most STREAM_TAIL bytes. */
	__u64 c = first < STREAM_HEAD_ROOM - 3 ? first : STREAM_HEAD_ROOM - 3;
	barrier_var(c);
	if (c > STREAM_HEAD_ROOM - 3)
		c = STREAM_HEAD_ROOM - 3;
	__u32 off = 0;
	if (c) {
		if (bpf_probe_read_user(data + 3, c, sg->base[0]))
			off = stream_lost(data, 0, c);
		else
			off = stream_more_head(data, 0, c);
	}
	if (c < total) {
		count(CNT_STREAM_PARTIAL);
		__u64 t = 0;
		if (sg->n == 1) {
			t = total - c;
			if (t > STREAM_TAIL)
				t = STREAM_TAIL;
		}
		barrier_var(off);
		if (off > STREAM_HEAD_ROOM)
			off = STREAM_HEAD_ROOM;
		off = stream_lost(data, off, total - c - t);
		barrier_var(t);
		if (t > STREAM_TAIL)
			t = STREAM_TAIL;
		if (t && !bpf_probe_read_user(data + off + 3, t, sg->base[0] + (total - t)))
			off = stream_more_head(data, off, t);
	}
	/* Records of this connection the ring had no room for since its last
	 * one: user space must know before it reads this one (a call whose
	 * request or answer went by unseen is not paired with another's). */
	__u64 gap_recv = stream_gap_take(st, IO_RECV);
	__u64 gap_send = stream_gap_take(st, IO_SEND);
	if (gap_recv | gap_send) {
		barrier_var(off);
		if (off > STREAM_DATA_LEN - 2 * GAP_PIECE_LEN)
			off = STREAM_DATA_LEN - 2 * GAP_PIECE_LEN;
		off = stream_gap_piece(data, off, IO_RECV, gap_recv);
		off = stream_gap_piece(data, off, IO_SEND, gap_send);
	}
	__u8 flags = st->first;
	st->first = 0;
	__u64 caller = 0;
	__u32 parent_seq = 0;
	if (dir == IO_SEND) {
		/* The server request this thread serves, by the rules of a
		 * client HTTP request's link (http1_conn.h, client_links). */
		struct active_req *a = active_get(0);
		if (a && (a->conn_id || a->open)) {
			if (!current_alt_stack() && a->conn_id && a->open <= 1) {
				caller = a->conn_id;
				parent_seq = a->seq;
				flags |= SF_PARENT;
			} else {
				flags |= SF_UNLINKED;
			}
		}
	}
	if (io_submit(&s->io, EV_STREAM, flags, st, io->sk, io->tid, io->fd, dir, off, caller, parent_seq, STREAM_DATA_LEN)) {
		/* The ring is full: the next record that fits tells the gap, its
		 * bytes and those it was to tell. A send carried a call (a
		 * client writes one a syscall), counted here where it is lost. */
		__sync_fetch_and_add(&st->gap[dir & 1], total + (dir == IO_RECV ? gap_recv : gap_send));
		__sync_fetch_and_add(&st->gap[(dir ^ 1) & 1], dir == IO_RECV ? gap_send : gap_recv);
		count(CNT_STREAM_LOST);
		if (dir == IO_SEND)
			count(CNT_STREAM_CALLS_LOST);
	} else {
		count(CNT_STREAM_EVENTS);
	}
}

/* The connection closed: user space forgets it (a record built in the
 * ring: io_close). */
static __always_inline void stream_close(struct conn_state *st, struct sock *sk)
{
	if (io_close(EV_STREAM, st, sk))
		count(CNT_STREAM_LOST);
}

#endif
