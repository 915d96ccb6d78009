/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Same-host joins: the client request and the server request of one
 * exchange, when both ends are traced on this host. The TCP sequence number
 * of a request's first byte is the same at both ends of its connection;
 * with the connection's addresses and ports it names the request. The
 * client records its request under that name when its send is reported
 * (join_offer); the server looks it up when it answers (join_take), and its
 * event names the client's request (EVF_PARENT). By then the client's send
 * hook has run unless the client's thread was preempted between handing the
 * bytes to TCP and the hook for longer than the server took to read and
 * answer: then no join, never a wrong one (the name is exact); on loopback
 * the server leaves a mark (join_marks) by which the late client counts
 * itself (CNT_JOIN_LATE). The two ends run on two CPUs at once, so each
 * acts before it looks: the server marks, then looks for the offer; the
 * client offers, then looks for the mark; and whichever deletes the offer
 * decides (the server: joined; the client: late, counted). So every
 * loopback request is joined or counted, once, whatever the interleaving
 * (before, a client's look between the server's look and its mark left
 * neither: seen once in 400 requests, 8 clients at once, the suite's
 * traces::*_front_calls tests).
 *
 * TLS plaintext has no sequence number of its own; a request that begins
 * a TLS write and a read is named by the TCP sequence number of the record
 * that carries its first byte. The client's is the socket's write_seq when
 * SSL_write is entered (its record is the next byte the socket sends: the
 * earlier writes' records were handed to it; if one was not, this names
 * bytes no request of the server begins at, so no join, and the offer is
 * never put over another's); the server's is the socket's copied_seq when
 * the SSL_read that returns the request was entered, if that call read
 * ciphertext (copied_seq moved): its first read began there (tls.h;
 * OpenSSL reads a record's header, then its body, never further by
 * default, so what it returns is that record's). The
 * offer is made before the bytes leave, so it is never late. Not joined:
 * a request that does not begin its TLS write or read, and servers that
 * read the ciphertext themselves (TLS over memory buffers: Node, asyncio).
 */
#ifndef RINGTAIL_JOIN_H
#define RINGTAIL_JOIN_H

#include "conn.h"

/* An IPv4-mapped IPv6 address (a dual-stack listener's view of an IPv4
 * peer) in its IPv4 form, as the IPv4 end stores it. */
static __always_inline void join_unmap(__u8 *a)
{
	__u32 *w = (__u32 *)a;
	if (w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0xffff)) {
		w[0] = w[3];
		w[2] = 0;
		w[3] = 0;
	}
}

/* A loopback address (127/8, ::1) as join_key_of stores it. */
static __always_inline int join_loopback(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;
	if (w[1] || w[2])
		return 0;
	return (!w[3] && a[0] == 127) || (!w[0] && w[3] == bpf_htonl(1));
}

/* Whether two keys are the same. */
static __always_inline int join_same(const struct join_key *a, const struct join_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;
	__u32 d = 0;
#pragma unroll
	for (int i = 0; i < sizeof(*a) / 4; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

/* The join_marks slot of a key. */
static __always_inline __u32 join_slot(const struct join_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u32 h = 0x9e3779b9;
#pragma unroll
	for (int i = 0; i < sizeof(*k) / 4; i++)
		h = (h ^ w[i]) * 0x85ebca6b;
	return (h ^ (h >> 16)) & (JOIN_MARKS - 1);
}

/* The name of the request whose first byte is `tcp_seq` on `sk`, seen from
 * the client's end (`client`) or the server's. */
static __always_inline void join_key_of(struct join_key *k, struct sock *sk, int client, __u32 tcp_seq)
{
	__u16 family = SK(sk, __sk_common.skc_family);
	__u16 lport = SK(sk, __sk_common.skc_num);
	__u16 rport = bpf_ntohs(SK(sk, __sk_common.skc_dport));
	__builtin_memset(k, 0, sizeof(*k));
	if (client) {
		sk_addrs(sk, family, k->caddr, k->saddr);
		k->cport = lport;
		k->sport = rport;
	} else {
		sk_addrs(sk, family, k->saddr, k->caddr);
		k->cport = rport;
		k->sport = lport;
	}
	if (family == FAMILY_INET6) {
		join_unmap(k->caddr);
		join_unmap(k->saddr);
	}
	k->tcp_seq = tcp_seq;
}

/* A client request began with the send just reported (`total` bytes, the
 * request from byte `skip` on): recorded for a server on this host. */
static __always_inline void join_offer(const struct conn_state *st, const struct conn_io *io, __u32 total, __u32 skip)
{
	if (!tcp_write_seq_off)
		return;
	__u32 at = sk_u32_at(io->sk, tcp_write_seq_off);
	if (io->tls) {
		/* SSL_write is entered: write_seq is where its record will be */
		if (skip)
			return;
	} else {
		/* the send is over: write_seq is just past its bytes */
		at = at - total + skip;
	}
	struct join_val v = { .conn_id = st->conn_id, .seq = st->seq };
	struct join_key k;
	join_key_of(&k, io->sk, 1, at);
	if (io->tls) {
		bpf_map_update_elem(&joins, &k, &v, BPF_NOEXIST);
		return;
	}
	bpf_map_update_elem(&joins, &k, &v, BPF_ANY);
	if (join_loopback(k.caddr)) {
		__u32 slot = join_slot(&k);
		struct join_key *m = bpf_map_lookup_elem(&join_marks, &slot);
		/* the server answered before this send was reported (join_take):
		 * late, if the offer is still ours to take back */
		if (m && join_same(m, &k) && bpf_map_delete_elem(&joins, &k) == 0) {
			m->tcp_seq ^= 1; /* spent: never counted twice */
			count(CNT_JOIN_LATE);
		}
	}
}

/* Where the receive just reported (`total` bytes) began in the TCP stream
 * (TLS: where the record of its first byte did, if known), for join_mark
 * and join_note; 0 when not known (no offsets): read once where a server
 * request may begin, so that the verifier walks one read, not one per
 * branch. */
static __always_inline __u32 join_recv_start(const struct conn_io *io, __u32 total)
{
	if (io->tls)
		return io->tls_seq;
	if (!tcp_copied_seq_off)
		return 0;
	/* the receive is over: copied_seq is just past its bytes */
	return sk_u32_at(io->sk, tcp_copied_seq_off) - total;
}

/* The receive that began at `start` (join_recv_start) is kept as the start
 * of a request line or preface (http1_conn.h, keep_prefix). */
static __always_inline void join_mark(struct conn_state *st, __u32 start)
{
	st->join_seq = start;
}

/* A server request (or HTTP/2 connection) begins at byte `skip` of the
 * receive that began at `start`, or (`pend`) of an earlier one join_mark
 * noted: where, for join_take. */
static __always_inline void join_note(struct conn_state *st, const struct conn_io *io, __u32 start, __u32 skip,
				      __u32 pend)
{
	/* TLS: the record's start is the request's only when the request
	 * begins the plaintext of the read */
	st->join_ok = io->tls ? io->tls_seq_ok && !skip && !pend : tcp_copied_seq_off != 0;
	st->join_tries = 0;
	st->join_seq = (pend ? st->join_seq : start) + skip;
}

/* Was the server request (or HTTP/2 connection) `st` names (`k`, by
 * join_key_of) sent by a client on this host? Then its record names the
 * client's (the offer is spent, counted). */
static __always_inline int join_claim(struct conn_state *st, const struct join_key *k)
{
	struct join_val *v = bpf_map_lookup_elem(&joins, k);
	if (!v)
		return 0;
	__u64 conn_id = v->conn_id;
	__u32 seq = v->seq;
	/* taken back by a late client (join_offer) in between: not joined */
	if (bpf_map_delete_elem(&joins, k) != 0)
		return 0;
	st->parent_conn = conn_id;
	st->parent_seq = seq;
	st->join_ok = 0;
	count(CNT_JOINS);
	return 1;
}

/* The server answers its request: was it sent by a client request on this
 * host? Then the event names it. */
static __always_inline void join_take(struct conn_state *st, struct sock *sk)
{
	if (!st->join_ok)
		return;
	st->join_ok = 0;
	struct join_key k;
	join_key_of(&k, sk, 0, st->join_seq);
	/* Marked first: a client on this host whose send is not reported yet
	 * (its thread preempted in between) finds this and counts itself
	 * (join_offer); only loopback peers, which are on this host, and not
	 * TLS, whose offers come before the bytes. */
	struct join_key *m = 0;
	if (!st->tls && join_loopback(k.caddr)) {
		__u32 slot = join_slot(&k);
		m = bpf_map_lookup_elem(&join_marks, &slot);
		if (m)
			__builtin_memcpy(m, &k, sizeof(k));
	}
	if (st->flags & EVF_KIDS) {
		/* (probe.carrier) its ids were decided at its start, final. Its
		 * client's offer is spent: expected where an option (or header)
		 * gave it a parent; else that client's offer came after the
		 * start, and it is not joined, counted as any late send. */
		__u64 parent = 0;
		__builtin_memcpy(&parent, st->kids + 24, sizeof(parent));
		if (bpf_map_delete_elem(&joins, &k) == 0 && !parent)
			count(CNT_JOIN_LATE);
		return;
	}
	if (!join_claim(st, &k))
		return;
	if (m && join_same(m, &k))
		m->tcp_seq ^= 1; /* joined: the mark is spent */
	st->flags |= EVF_PARENT;
}

/* Sends on an HTTP/2 server connection that look for its caller: its first
 * send (the server's SETTINGS) can come before the client's send hook has
 * run; later ones find it. */
#define JOIN_H2_TRIES 8

/* An HTTP/2 server connection sends: was it opened by a client on this host
 * (its preface named as a request's first byte is, join_offer at the
 * client's h2_start)? Then this record names that connection (H2F_CALLER,
 * st->parent_conn) and the span-actor joins each stream to the client's
 * stream of the same id. */
static __always_inline __u8 join_take_h2(struct conn_state *st, struct sock *sk)
{
	if (!st->join_ok)
		return 0;
	st->join_tries += 1;
	if (st->join_tries >= JOIN_H2_TRIES)
		st->join_ok = 0;
	struct join_key k;
	join_key_of(&k, sk, 0, st->join_seq);
	return join_claim(st, &k) ? H2F_CALLER : 0;
}

#endif
