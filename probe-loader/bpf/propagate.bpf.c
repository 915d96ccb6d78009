// SPDX-License-Identifier: GPL-2.0-only
/*
 * Trace context propagation's programs (probe.propagate; propagate.h says
 * what they do): linked into the socket backend's object only when
 * propagation is on (build.rs: ringtail-sock-propagate.bpf.o), because
 * creating their socket map takes CAP_NET_ADMIN, which the loader otherwise
 * never needs.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "conn.h"
#include "http1.h"
#include "propagate.h"

/* The sockets the sk_msg program sees, by socket cookie (removed by the
 * kernel when they close); sized by probe.max_connections. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u32); /* (a socket fd from user space; aya reads it so) */
} prop_socks SEC(".maps");

/* What the sk_msg program looks at and writes (too big for its stack). */
struct prop_scratch {
	__u8 head[PROP_HEAD_MAX * 2];
	__u8 line[TP_LINE_LEN + 2];
	__u8 ids[24];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct prop_scratch);
} prop_buf SEC(".maps");

SEC("sockops")
int prop_sockops(struct bpf_sock_ops *skops)
{
	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)
		return 1;
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return 1;
	struct prop_state *ps = bpf_sk_storage_get(&prop, sk, NULL, 0);
	if (!ps || !ps->armed)
		return 1;
	__u64 cookie = bpf_get_socket_cookie(skops);
	if (bpf_sock_hash_update(skops, &prop_socks, &cookie, BPF_NOEXIST))
		count(CNT_PROP_SOCKS_FULL);
	return 1;
}

static __always_inline __u8 lower(__u8 c)
{
	return c >= 'A' && c <= 'Z' ? c | 0x20 : c;
}

struct head_scan {
	struct prop_scratch *s;
	__u32 n;    /* bytes in s->head */
	__u32 end;  /* offset just past the empty line ending the head; 0: not found */
	__u32 has_tp;
};

/* bpf_loop callback: does a header line begin after byte i (a '\n')? */
static long scan_line(__u64 i, void *ctx)
{
	struct head_scan *h = ctx;
	__u8 *p = h->s->head;
	__u32 at = (__u32)i & (PROP_HEAD_MAX - 1);
	if (at + 1 >= h->n || p[at] != '\n')
		return 0;
	__u32 b = at + 1;
	if (p[b & (PROP_HEAD_MAX * 2 - 1)] == '\r' && p[(b + 1) & (PROP_HEAD_MAX * 2 - 1)] == '\n') {
		h->end = b + 2;
		return 1; /* the empty line: the head ends here */
	}
#define AT(k) lower(p[(b + k) & (PROP_HEAD_MAX * 2 - 1)])
	/* (no string constants: they would need .rodata, which this object's
	 * link does not lay out right) */
	int same = AT(0) == 't' && AT(1) == 'r' && AT(2) == 'a' && AT(3) == 'c' && AT(4) == 'e' &&
		   AT(5) == 'p' && AT(6) == 'a' && AT(7) == 'r' && AT(8) == 'e' && AT(9) == 'n' &&
		   AT(10) == 't' && AT(11) == ':';
#undef AT
	if (same && b + 12 <= h->n) {
		h->has_tp = 1;
		return 1;
	}
	return 0;
}

static __always_inline __u8 hex_digit(__u8 v)
{
	return v < 10 ? '0' + v : 'a' + v - 10;
}

static __always_inline void hex_bytes(__u8 *out, const __u8 *in, int n)
{
#pragma unroll
	for (int k = 0; k < 16; k++) {
		if (k < n) {
			out[2 * k] = hex_digit(in[k] >> 4);
			out[2 * k + 1] = hex_digit(in[k] & 15);
		}
	}
}

SEC("sk_msg")
int prop_msg(struct sk_msg_md *msg)
{
	struct bpf_sock *bsk = msg->sk;
	if (!bsk)
		return SK_PASS;
	struct prop_state *ps = bpf_sk_storage_get(&prop, bsk, NULL, 0);
	if (!ps || ps->pending)
		return SK_PASS;
	/* idle: nothing pending, HTTP/1 in clear text, no early answer */
	struct conn_state *st = bpf_sk_storage_get(&conns, bsk, NULL, 0);
	if (st && (st->role != ROLE_CLIENT || st->phase == PHASE_REQUEST || st->h2 || st->tls || st->early_ns))
		return SK_PASS;
	__u32 size = msg->size;
	if (size < 16)
		return SK_PASS;
	__u32 n = size < PROP_HEAD_MAX ? size : PROP_HEAD_MAX;
	if (bpf_msg_pull_data(msg, 0, n, 0))
		return SK_PASS;
	__u32 zero = 0;
	struct prop_scratch *s = bpf_map_lookup_elem(&prop_buf, &zero);
	if (!s)
		return SK_PASS;
	void *data = (void *)(long)msg->data;
	if (bpf_probe_read_kernel(s->head, n & (PROP_HEAD_MAX * 2 - 1), data))
		return SK_PASS;
	/* a request line */
	if (!is_request(s->head, 0, n < PREFIX_LEN ? n : PREFIX_LEN))
		return SK_PASS;
	__u32 eol = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 1; i < PROP_HEAD_MAX; i++) {
		if (i >= n)
			break;
		if (s->head[i] == '\n' && s->head[i - 1] == '\r') {
			eol = i + 1;
			break;
		}
	}
	/* "... HTTP/1.x\r\n" */
	if (eol < 12)
		return SK_PASS;
	const __u8 *v = &s->head[(eol - 10) & (PROP_HEAD_MAX - 1)];
	if (v[0] != 'H' || v[1] != 'T' || v[2] != 'T' || v[3] != 'P' || v[4] != '/' || v[5] != '1' || v[6] != '.')
		return SK_PASS;
	/* a head that ends in reach and names no traceparent */
	struct head_scan h = { .s = s, .n = n };
	bpf_loop(PROP_HEAD_MAX, scan_line, &h, 0);
	if (h.has_tp) {
		count(CNT_PROP_HAS_TP);
		return SK_PASS;
	}
	if (!h.end) {
		count(CNT_PROP_HEAD);
		return SK_PASS;
	}
	/* a call made while serving a request belongs to that request's trace */
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	if (bpf_map_lookup_elem(&prop_threads, &tid)) {
		count(CNT_PROP_SERVING);
		return SK_PASS;
	}
	__u8 *ids = s->ids;
#pragma unroll
	for (int k = 0; k < 24; k += 4)
		*(__u32 *)&ids[k] = bpf_get_prandom_u32();
	ids[0] |= 1;  /* a trace id is never all zeros */
	ids[16] |= 1; /* nor a span id */
	__u8 *line = s->line;
	/* "traceparent: 00-", as stores (see scan_line) */
	line[0] = 't', line[1] = 'r', line[2] = 'a', line[3] = 'c', line[4] = 'e', line[5] = 'p';
	line[6] = 'a', line[7] = 'r', line[8] = 'e', line[9] = 'n', line[10] = 't', line[11] = ':';
	line[12] = ' ', line[13] = '0', line[14] = '0', line[15] = '-';
	hex_bytes(line + 16, ids, 16);
	line[48] = '-';
	hex_bytes(line + 49, ids + 16, 8);
	line[65] = '-', line[66] = '0', line[67] = '1', line[68] = '\r', line[69] = '\n';
	if (bpf_msg_push_data(msg, eol, TP_LINE_LEN, 0)) {
		count(CNT_PROP_NO_ROOM);
		return SK_PASS;
	}
	if (bpf_msg_pull_data(msg, eol, eol + TP_LINE_LEN, 0)) {
		/* the room is made and cannot be filled: take it back */
		bpf_msg_pop_data(msg, eol, TP_LINE_LEN, 0);
		count(CNT_PROP_NO_ROOM);
		return SK_PASS;
	}
	__u8 *d = (void *)(long)msg->data;
	__u8 *e = (void *)(long)msg->data_end;
	if ((void *)(d + TP_LINE_LEN) > (void *)e) {
		bpf_msg_pop_data(msg, eol, TP_LINE_LEN, 0);
		count(CNT_PROP_NO_ROOM);
		return SK_PASS;
	}
#pragma unroll
	for (int k = 0; k < TP_LINE_LEN; k++)
		d[k] = line[k];
	__builtin_memcpy(ps->ids, ids, sizeof(ps->ids));
	ps->tid = tid;
	ps->pending = 1;
	count(CNT_PROPAGATED);
	return SK_PASS;
}

