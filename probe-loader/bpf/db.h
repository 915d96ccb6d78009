/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Database connections (PostgreSQL, MySQL/MariaDB, Redis, memcached), the
 * client side: a selected process's connection to a configured port
 * (probe.db_ports) goes to user space as a byte stream, one record per send
 * or receive (struct h2_event with H2F_DB, its data up to DB_DATA_LEN
 * long): the syscall's first bytes, how
 * many went by unseen (H2P_LOST), and its last DB_TAIL bytes. Messages,
 * prepared statements, pipelines and errors are user space's
 * (span-actor/src/db): it needs the byte counts to stay in step, and a
 * large result's end, which is in its last bytes. A TLS connection's
 * plaintext comes from the TLS hooks the same way (its socket's first
 * bytes, PostgreSQL's SSLRequest or MySQL's greeting, come in clear).
 *
 * HTTP pays one check of the peer port on a connection it has no state
 * for yet (its first bytes), nothing after.
 */
#ifndef RINGTAIL_DB_H
#define RINGTAIL_DB_H

#include "conn.h"
#include "h2.h"

/* Room for the head's pieces: what is left leaves an H2P_LOST piece, the
 * tail's H2P_MORE piece and two H2P_GAP pieces. */
#define DB_HEAD_ROOM (DB_DATA_LEN - DB_TAIL - 8 - 2 * DB_GAP_PIECE)

/* Whether `sk`'s peer port is a configured database port. */
static __always_inline int db_port(struct sock *sk)
{
	__u16 port = bpf_ntohs(SK(sk, __sk_common.skc_dport));
#pragma unroll
	for (int i = 0; i < DB_PORTS; i++) {
		if (!db_ports[i])
			return 0;
		if (db_ports[i] == port)
			return 1;
	}
	return 0;
}

/* Appends an H2P_LOST piece at `off` (<= DB_DATA_LEN - 5). */
static __always_inline __u32 db_lost(__u8 *data, __u32 off, __u64 bytes)
{
	__u32 n = bytes > 0xffffffff ? 0xffffffff : bytes;
	data[off] = H2P_LOST;
	data[off + 1] = n;
	data[off + 2] = n >> 8;
	data[off + 3] = n >> 16;
	data[off + 4] = n >> 24;
	return off + 5;
}

/* Writes an H2P_MORE piece's header at `off` for the `n` bytes after it. */
static __always_inline __u32 db_more_head(__u8 *data, __u32 off, __u64 n)
{
	data[off] = H2P_MORE;
	data[off + 1] = n;
	data[off + 2] = n >> 8;
	return off + 3 + n;
}

/* Takes the bytes of direction `dir` lost since the connection's last
 * record (the hooks of its reader and writer may run at once on two CPUs:
 * an exchange, where the kernel has one; before 5.12 two records racing
 * for the same gap can tell it twice or drop part of its count). */
static __always_inline __u64 db_gap_take(struct conn_state *st, int dir)
{
#ifdef RINGTAIL_NO_XCHG
	__u64 g = st->db_gap[dir & 1];
	st->db_gap[dir & 1] = 0;
	return g;
#else
	return __atomic_exchange_n(&st->db_gap[dir & 1], 0, __ATOMIC_SEQ_CST);
#endif
}

/* Appends an H2P_GAP piece at `off` (<= DB_DATA_LEN - DB_GAP_PIECE). */
static __always_inline __u32 db_gap_piece(__u8 *data, __u32 off, __u8 dir, __u64 bytes)
{
	__u32 n = bytes > 0xffffffff ? 0xffffffff : bytes;
	data[off] = H2P_GAP;
	data[off + 1] = dir;
	data[off + 2] = n;
	data[off + 3] = n >> 8;
	data[off + 4] = n >> 16;
	data[off + 5] = n >> 24;
	return off + DB_GAP_PIECE;
}

/* The bytes of one send or receive on a database connection (`st` NULL:
 * its first, on a connection to a database port): its record. */
static __always_inline void db_on_data(struct conn_state *st, const struct conn_io *io, const struct segs *sg,
				       __u8 dir)
{
	if (!st) {
		st = conn_new(io, ROLE_CLIENT);
		if (!st)
			return;
		st->db = 1;
		st->h2_first = H2F_START;
		count(CNT_DB_CONNS);
	}
	__u32 zero = 0;
	struct db_scratch *s = bpf_map_lookup_elem(&db_scratch, &zero);
	if (!s)
		return;
	__u8 *data = s->ev.data;
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
	 * most DB_HEAD_ROOM - 3 bytes after its header; then an H2P_LOST
	 * piece; then the tail, at most DB_TAIL bytes. */
	__u64 c = first < DB_HEAD_ROOM - 3 ? first : DB_HEAD_ROOM - 3;
	barrier_var(c);
	if (c > DB_HEAD_ROOM - 3)
		c = DB_HEAD_ROOM - 3;
	__u32 off = 0;
	if (c) {
		if (bpf_probe_read_user(data + 3, c, sg->base[0]))
			off = db_lost(data, 0, c);
		else
			off = db_more_head(data, 0, c);
	}
	if (c < total) {
		count(CNT_DB_PARTIAL);
		__u64 t = 0;
		if (sg->n == 1) {
			t = total - c;
			if (t > DB_TAIL)
				t = DB_TAIL;
		}
		barrier_var(off);
		if (off > DB_HEAD_ROOM)
			off = DB_HEAD_ROOM;
		off = db_lost(data, off, total - c - t);
		barrier_var(t);
		if (t > DB_TAIL)
			t = DB_TAIL;
		if (t && !bpf_probe_read_user(data + off + 3, t, sg->base[0] + (total - t)))
			off = db_more_head(data, off, t);
	}
	/* Records of this connection the ring had no room for since its last
	 * one: user space must know before it reads this one (a call whose
	 * request or answer went by unseen is not paired with another's). */
	__u64 gap_recv = db_gap_take(st, H2_RECV);
	__u64 gap_send = db_gap_take(st, H2_SEND);
	if (gap_recv | gap_send) {
		barrier_var(off);
		if (off > DB_DATA_LEN - 2 * DB_GAP_PIECE)
			off = DB_DATA_LEN - 2 * DB_GAP_PIECE;
		off = db_gap_piece(data, off, H2_RECV, gap_recv);
		off = db_gap_piece(data, off, H2_SEND, gap_send);
	}
	__u8 flags = H2F_DB | st->h2_first;
	st->h2_first = 0;
	__u64 caller = 0;
	__u32 parent_seq = 0;
	if (dir == H2_SEND) {
		/* The server request this thread serves, by the rules of a
		 * client HTTP request's link (http1_conn.h, client_links). */
		struct active_req *a = active_get(0);
		if (a && (a->conn_id || a->open)) {
			if (!current_alt_stack() && a->conn_id && a->open <= 1) {
				caller = a->conn_id;
				parent_seq = a->seq;
				flags |= H2F_PARENT;
			} else {
				flags |= H2F_UNLINKED;
			}
		}
	}
	if (h2_submit(&s->ev, st, io->sk, io->tid, io->fd, dir, flags, off, caller, parent_seq, DB_DATA_LEN)) {
		/* The ring is full: the next record that fits tells the gap, its
		 * bytes and those it was to tell. A send carried a call (a
		 * client writes one a syscall), counted here where it is lost. */
		__sync_fetch_and_add(&st->db_gap[dir & 1], total + (dir == H2_RECV ? gap_recv : gap_send));
		__sync_fetch_and_add(&st->db_gap[(dir ^ 1) & 1], dir == H2_RECV ? gap_send : gap_recv);
		count(CNT_DB_LOST);
		if (dir == H2_SEND)
			count(CNT_DB_CALLS_LOST);
	} else {
		count(CNT_DB_EVENTS);
	}
}

/* The connection closed: user space forgets it. */
static __always_inline void db_close(struct conn_state *st, struct sock *sk)
{
	__u32 zero = 0;
	struct h2_scratch *s = bpf_map_lookup_elem(&h2_scratch, &zero);
	if (s)
		h2_submit(&s->ev, st, sk, st->tid, st->fd, H2_RECV, H2F_DB | H2F_CLOSE, 0, 0, 0, H2_DATA_LEN);
}

#endif
