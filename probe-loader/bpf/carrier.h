/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The carrier (probe.carrier, off by default; socket backend): a request's
 * trace context carried to the next host in a TCP header option, so that a
 * call made while serving a request continues that request's trace there,
 * whatever the call's bytes (the payload is never touched). The wire format
 * is OpenTelemetry eBPF Instrumentation's: kind 25, length 26, the trace id
 * (16 bytes) and the span id (8) in W3C byte order; its meaning here is
 * stricter: the option names the request whose first byte has the
 * segment's sequence number.
 *
 *  - The kernel decides each HTTP/1 server request's ids at its start
 *    (carrier_server): the trace id and parent of its `traceparent` header
 *    (in the captured bytes, the ones user space reads: what the client
 *    itself sent wins), else of a received option that names the request's
 *    first byte, else a new trace; a new span id. The event carries them (EVF_KIDS) and user space uses them as
 *    they are. The thread that began the request keeps them (active_req)
 *    and, for the sockops program, which may not read task storage, a
 *    mirror by thread id (carrier_threads) says whether it is certainly
 *    serving that one request (the in-process link rules: one open, no
 *    alternate signal stack).
 *  - A TCP connection a traced thread begins (carrier_mark, at SYN_SENT) asks
 *    TCP for the header-option callbacks once established. A request starts
 *    at the first send on it, or the first after it received data: when TCP
 *    sizes that send (the sockops callback that sizes the MSS, inside the
 *    sending thread's sendmsg: the socket lock is the thread's) with nothing
 *    unsent queued, the ids are decided (the serving request's trace and,
 *    as parent, its span; a new trace where the thread serves none; none
 *    where it serves several, counted) for the byte at write_seq; every
 *    segment reserves room while that byte is unacknowledged (sizing and
 *    transmit alike, so no segment outgrows the MSS it was cut for), and
 *    the one that begins with it carries the option (again if
 *    retransmitted). The capture of that send (carrier_claim) gives the ids
 *    to the client request that begins there.
 *  - A received option (sockops' PARSE callback, only for segments with an
 *    option the kernel does not know) is kept on the socket by sequence
 *    number (carrier_rx, a few slots); a server request whose first byte
 *    has that number takes it, exactly.
 */
#ifndef RINGTAIL_CARRIER_H
#define RINGTAIL_CARRIER_H

#include "maps.h"
#include "process.h"
#include "conn_store.h"
#include "join.h"

#define CARRIER_KIND 25
#define CARRIER_LEN 26
/* the room reserved: the option rounded up to 4 bytes */
#define CARRIER_ROOM 28
#define CARRIER_RX_SLOTS 4

#ifndef RINGTAIL_CONN_TABLE
/* A connection a traced thread began, as a carrier of its requests. */
struct carrier_tx {
	__u8 ids[32];	  /* trace, span, parent of the request at start_seq */
	__u32 start_seq;  /* where that request's first byte is */
	__u32 tid;	  /* the thread whose send decided it */
	__u8 armed;	  /* connected by a traced thread */
	__u8 rx_since;	  /* bytes received since the last start (or no send yet) */
	__u8 pending;	  /* start_seq is unacknowledged: room is reserved */
	__u8 claimable;	  /* no client request took the ids yet */
	__u8 written;	  /* the option went out once */
	__u8 flags_ours;  /* sockops callback flags the carrier turned on */
	__u8 _pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct carrier_tx);
} carrier_tx SEC(".maps") __weak;

/* Options received on a socket, by the sequence number of their segment. */
struct carrier_slot {
	__u32 seq;
	__u32 used;
	__u8 ids[24]; /* trace, span (the caller's: the request's parent) */
};

struct carrier_rx {
	struct carrier_slot s[CARRIER_RX_SLOTS];
	__u32 next;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct carrier_rx);
} carrier_rx SEC(".maps") __weak;

#endif

/* The request a thread serves, for the sockops program: its trace id and
 * span id; certain 0: the thread serves more than one (or runs tasks), or
 * one whose ids user space decides: its calls carry nothing. LRU: a thread
 * that ends while serving ages out. */
struct carrier_thread {
	__u8 ids[24];
	__u16 certain;
	__u16 undecided; /* the request's ids are user space's (TLS) */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct carrier_thread);
} carrier_threads SEC(".maps") __weak;

/* `n` random bytes, never all zero (W3C: an all-zero id is invalid). */
static __always_inline void carrier_random(__u8 *d, int n)
{
#pragma unroll
	for (int i = 0; i < 16; i += 4) {
		if (i >= n)
			break;
		__u32 r = bpf_get_prandom_u32();
		__builtin_memcpy(d + i, &r, 4);
	}
	d[n - 1] |= 1;
}

#ifndef RINGTAIL_CONN_TABLE
/* inet_sock_set_state to SYN_SENT (the connecting thread): a traced
 * process's connection carries its requests' context. */
static __always_inline void carrier_mark(struct sock *sk, int newstate)
{
	if (!carrier || newstate != 2 /* TCP_SYN_SENT */ || sk->sk_protocol != 6 /* TCP */)
		return;
	if (!pid_selected(bpf_get_current_pid_tgid() >> 32))
		return;
	struct carrier_tx *tx = bpf_sk_storage_get(&carrier_tx, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!tx)
		return;
	__builtin_memset(tx, 0, sizeof(*tx));
	tx->armed = 1;
	tx->rx_since = 1;
}

/* Bytes received on a carrier connection: its next send starts a request. */
static __always_inline void carrier_on_recv(struct sock *sk)
{
	if (!carrier)
		return;
	struct carrier_tx *tx = bpf_sk_storage_get(&carrier_tx, sk, NULL, 0);
	if (tx)
		tx->rx_since = 1;
}

#endif

/* The serving mirror of thread `tid` after its active_req `a` changed. */
static __always_inline void carrier_mirror(const struct active_req *a, __u32 tid)
{
	if (!carrier)
		return;
	if (!a->conn_id && !a->open) {
		bpf_map_delete_elem(&carrier_threads, &tid);
		return;
	}
	struct carrier_thread t = {};
	__builtin_memcpy(t.ids, a->ids, sizeof(t.ids));
	/* (the in-process link's rule, client_links: else "concurrent") */
	int linked = a->conn_id && a->open <= 1 && !current_alt_stack();
	t.undecided = linked && a->ids_conn != a->conn_id;
	t.certain = linked && !t.undecided;
	bpf_map_update_elem(&carrier_threads, &tid, &t, BPF_ANY);
}

#ifndef RINGTAIL_CONN_TABLE
/* What a `traceparent` header scan found (carrier_header). */
struct tp_scan {
	const __u8 *buf;
	__u32 n;
	__u32 at; /* offset of the value, 0: none */
};

static __always_inline __u8 lower(__u8 c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* bpf_loop step: does a "traceparent:" header line begin after byte i? */
static int tp_find(__u32 i, struct tp_scan *s)
{
	/* "\ntraceparent:" is 13 bytes; the value needs 55 more */
	if (i + 13 + 55 > s->n)
		return 1;
	const __u8 *b = s->buf + (i & (CAPTURE_LEN - 1));
	if (b[0] != '\n')
		return 0;
	if (b[1] == '\r' || b[1] == '\n')
		return 1; /* the empty line: the head ends, the body is not looked at */
	if (lower(b[1]) != 't')
		return 0;
	if (lower(b[2]) != 'r' || lower(b[3]) != 'a' || lower(b[4]) != 'c' || lower(b[5]) != 'e' ||
	    lower(b[6]) != 'p' || lower(b[7]) != 'a' || lower(b[8]) != 'r' || lower(b[9]) != 'e' ||
	    lower(b[10]) != 'n' || lower(b[11]) != 't' || b[12] != ':')
		return 0;
	__u32 v = i + 13;
	/* optional white space */
#pragma unroll
	for (int k = 0; k < 2; k++)
		if (s->buf[v & (CAPTURE_LEN - 1)] == ' ' || s->buf[v & (CAPTURE_LEN - 1)] == '\t')
			v++;
	s->at = v;
	return 1;
}

static __always_inline int hexval(__u8 c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The trace id and parent of the request's first `traceparent` header, in
 * its head's captured bytes `buf` (`n` of them), into ids[0..16) and
 * ids[24..32), by user space's rules (ids.rs, parse_traceparent):
 * "VV-<32 hex>-<16 hex>-<2 hex>", lower-case hex, version not ff and, 00,
 * nothing after; neither id zero. */
static __always_inline int carrier_header(const __u8 *buf, __u32 n, __u8 *ids)
{
	struct tp_scan s = { .buf = buf, .n = n < CAPTURE_LEN ? n : CAPTURE_LEN };
	bpf_loop(CAPTURE_LEN, tp_find, &s, 0);
	if (!s.at || s.at + 55 > s.n)
		return 0;
	const __u8 *v = buf + (s.at & (CAPTURE_LEN - 1));
	if (v[2] != '-' || v[35] != '-' || v[52] != '-')
		return 0;
	if (hexval(v[0]) < 0 || hexval(v[1]) < 0 || (v[0] == 'f' && v[1] == 'f') || hexval(v[53]) < 0 || hexval(v[54]) < 0)
		return 0;
	if (v[0] == '0' && v[1] == '0') {
		/* version 00: the value ends there */
		__u8 e = s.at + 55 < s.n ? v[55] : '\r';
		if (e != '\r' && e != '\n' && e != ' ' && e != '\t')
			return 0;
	}
	__u8 any_t = 0, any_s = 0;
#pragma unroll
	for (int k = 0; k < 16; k++) {
		int hi = hexval(v[3 + 2 * k]), lo = hexval(v[4 + 2 * k]);
		if (hi < 0 || lo < 0)
			return 0;
		ids[k] = (__u8)(hi << 4 | lo);
		any_t |= ids[k];
	}
#pragma unroll
	for (int k = 0; k < 8; k++) {
		int hi = hexval(v[36 + 2 * k]), lo = hexval(v[37 + 2 * k]);
		if (hi < 0 || lo < 0)
			return 0;
		ids[24 + k] = (__u8)(hi << 4 | lo);
		any_s |= ids[24 + k];
	}
	return any_t && any_s;
}

/* A server request of `st` began (its first byte at st->join_seq, clear
 * text), on thread `a`'s: its ids, decided here (see the top). */
static __always_inline void carrier_server(struct conn_state *st, const struct conn_io *io, struct active_req *a)
{
	if (!carrier)
		return;
	__u8 *k = st->kids;
	/* a traceparent the client itself sent wins over our option */
	int from = carrier_header(st->buf, st->cap_len, k) ? 2 : 0;
	if (!from)
		__builtin_memset(k, 0, sizeof(st->kids));
	struct carrier_rx *rx = io->tls || !tcp_copied_seq_off ? NULL : bpf_sk_storage_get(&carrier_rx, io->sk, NULL, 0);
	if (rx) {
		int found = 0;
#pragma unroll
		for (int i = 0; i < CARRIER_RX_SLOTS; i++) {
			struct carrier_slot *sl = &rx->s[i];
			if (!found && sl->used && sl->seq == st->join_seq) {
				if (!from) {
					__builtin_memcpy(k, sl->ids, 16);
					__builtin_memcpy(k + 24, sl->ids + 16, 8);
				}
				sl->used = 0;
				found = 1;
			}
		}
		if (found) {
			count(CNT_CARRIER_MATCHED);
			from = from ? from : 1;
		}
	}
	if (!from && st->join_ok) {
		/* A client on this host that sent it without an option (its call
		 * was not carried: its thread served several requests) offered
		 * to join it: its trace is user space's to decide, and so is this
		 * one's (the calls made while serving it carry nothing). An offer
		 * that comes later is counted where the request is answered
		 * (join_take). */
		struct join_key jk;
		join_key_of(&jk, io->sk, 0, st->join_seq);
		if (bpf_map_lookup_elem(&joins, &jk)) {
			count(CNT_CARRIER_JOINED);
			a->ids_conn = 0;
			return;
		}
	}
	if (!from)
		carrier_random(k, 16);
	carrier_random(k + 16, 8);
	st->flags |= EVF_KIDS;
	__builtin_memcpy(a->ids, k, sizeof(a->ids));
	a->ids_conn = st->conn_id;
}

/* A client request linked to the request its thread serves (`a`,
 * client_links): its ids, as a child of that one. */
static __always_inline void carrier_child(struct conn_state *st, const struct active_req *a)
{
	if (!carrier || a->ids_conn != a->conn_id)
		return; /* (a request whose ids user space decides: TLS) */
	__builtin_memcpy(st->kids, a->ids, 16);
	carrier_random(st->kids + 16, 8);
	__builtin_memcpy(st->kids + 24, a->ids + 16, 8);
	st->flags |= EVF_KIDS;
}

/* A client request begins at byte `skip` of this send (`total` bytes,
 * over): the ids its start segment carried, if the carrier decided them
 * for that byte on this thread. */
static __always_inline void carrier_claim(struct conn_state *st, const struct conn_io *io, __u32 total, __u32 skip)
{
	if (!carrier || io->tls || !tcp_write_seq_off)
		return;
	struct carrier_tx *tx = bpf_sk_storage_get(&carrier_tx, io->sk, NULL, 0);
	if (!tx || !tx->claimable || tx->tid != io->tid)
		return;
	/* the send is over: write_seq is just past its bytes */
	__u32 start = sk_u32_at(io->sk, tcp_write_seq_off) - total + skip;
	if (start != tx->start_seq)
		return;
	tx->claimable = 0;
	__builtin_memcpy(st->kids, tx->ids, sizeof(st->kids));
	st->flags |= EVF_KIDS;
}

#else /* the connection table's objects: no socket-local storage */

static __always_inline void carrier_server(struct conn_state *st, const struct conn_io *io, struct active_req *a)
{
}

static __always_inline void carrier_child(struct conn_state *st, const struct active_req *a)
{
}

static __always_inline void carrier_claim(struct conn_state *st, const struct conn_io *io, __u32 total, __u32 skip)
{
}

#endif

#endif
