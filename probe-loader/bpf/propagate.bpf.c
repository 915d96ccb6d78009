// SPDX-License-Identifier: GPL-2.0-only
/*
 * Trace context propagation's programs (probe.propagate; propagate.h says
 * what they do) and the carrier's sockops callbacks (probe.carrier,
 * carrier.h): linked into the socket backend's object only when either is
 * on (build.rs: ringtail-sock-propagate.bpf.o), because creating the socket
 * map and attaching to the root cgroup take CAP_NET_ADMIN, which the loader
 * otherwise never needs.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "conn.h"
#include "http1.h"
#include "propagate.h"
#include "carrier.h"

#define TCP_ESTABLISHED_STATE 1
#define TCP_CLOSE_WAIT_STATE 8
/* the sockops callbacks a claimed socket asks for */
#define PROP_CB_FLAGS (BPF_SOCK_OPS_STATE_CB_FLAG | BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG)
/* Bodies of 2 GiB or more are not counted (the sequence arithmetic is
 * signed 32-bit): the connection is given up after such a request. */
#define PROP_MAX_BODY 0x7fffffffU

/* The sockets the sk_msg program sees, by socket cookie (removed by the
 * sockops program when they are given up or close, and by the kernel when
 * they are freed); sized by probe.max_connections. */
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

/* Takes a socket out of the map (its proto back to plain TCP's once the
 * calls under way on it are over), and turns off the callbacks its claim
 * turned on. */
static __always_inline void prop_release(struct bpf_sock_ops *skops, struct prop_state *ps)
{
	__u64 cookie = bpf_get_socket_cookie(skops);
	bpf_map_delete_elem(&prop_socks, &cookie);
	ps->leave = 0;
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags & ~(__u32)ps->flags_ours);
	ps->flags_ours = 0;
}

#ifndef ENOMSG
#define ENOMSG 42
#endif

/* The carrier's option, as it is on the wire (carrier.h). */
struct carrier_opt {
	__u8 kind;
	__u8 len;
	__u8 ids[24];
	__u8 _pad[2];
};

/* Where the segment whose header the callback sees begins (its TCP
 * header is at skb_data: the written one, or the received one); 0 with
 * `ok` 0 when it cannot be read. */
static __always_inline __u32 carrier_seg_seq(struct bpf_sock_ops *skops, int *ok)
{
	void *data = (void *)(long)skops->skb_data;
	void *end = (void *)(long)skops->skb_data_end;
	struct tcphdr *th = data;
	*ok = 0;
	if ((void *)(th + 1) > end)
		return 0;
	*ok = 1;
	return bpf_ntohl(th->seq);
}

/* A request starts at write_seq (carrier_len): its ids, as the child of
 * the request its thread certainly serves, or a new trace where the thread
 * serves none. A thread serving several (or running tasks), or one whose
 * request's ids user space decides (TLS, HTTP/2), carries nothing: its
 * calls keep the links user space makes (in-process, forwarded
 * traceparent), counted. */
static __always_inline void carrier_decide(struct carrier_tx *tx, struct tcp_sock *tp)
{
	if (tx->claimable)
		count(CNT_CARRIER_UNCLAIMED);
	tx->claimable = 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct carrier_thread *t = bpf_map_lookup_elem(&carrier_threads, &tid);
	if (t && !t->certain) {
		count(t->undecided ? CNT_CARRIER_UNDECIDED : CNT_CARRIER_AMBIGUOUS);
		return;
	}
	__builtin_memset(tx->ids, 0, sizeof(tx->ids));
	if (t) {
		__builtin_memcpy(tx->ids, t->ids, 16);
		__builtin_memcpy(tx->ids + 24, t->ids + 16, 8);
	} else {
		carrier_random(tx->ids, 16);
	}
	carrier_random(tx->ids + 16, 8);
	tx->start_seq = tp->write_seq;
	tx->tid = tid;
	tx->pending = 1;
	tx->claimable = 1;
	tx->written = 0;
}

/* HDR_OPT_LEN: TCP sizes a send (no segment yet: args[0] is
 * BPF_WRITE_HDR_TCP_CURRENT_MSS) or a segment it is about to send. */
static __always_inline void carrier_len(struct bpf_sock_ops *skops, struct bpf_sock *sk, struct carrier_tx *tx)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return;
	if (tx->pending && (__s32)(tp->snd_una - tx->start_seq) > 0)
		tx->pending = 0; /* the start was acknowledged */
	/* (a FIN queued by close or shutdown is sized too: no request) */
	__u8 state = tp->inet_conn.icsk_inet.sk.__sk_common.skc_state;
	if (skops->args[0] == BPF_WRITE_HDR_TCP_CURRENT_MSS && !tx->pending && tx->rx_since &&
	    (state == TCP_ESTABLISHED_STATE || state == TCP_CLOSE_WAIT_STATE) && tp->inet_conn.icsk_inet.sk.sk_lock.owned) {
		/* A send of the thread that holds the socket (tcp_sendmsg
		 * sizes it first), the first since bytes came in: a request
		 * starts at write_seq, if nothing unsent is queued before it. */
		tx->rx_since = 0;
		if (tp->write_seq != tp->snd_nxt) {
			count(CNT_CARRIER_MID_SEND);
		} else {
			carrier_decide(tx, tp);
		}
	}
	/* Room on every segment sized or sent while the start is not
	 * acknowledged: the same at sizing and at transmit, so that no
	 * segment outgrows the MSS it was cut for. */
	if (tx->pending && bpf_reserve_hdr_opt(skops, CARRIER_ROOM, 0))
		count(CNT_CARRIER_NO_SPACE);
}

/* WRITE_HDR_OPT: the segment that begins with the request's first byte
 * carries the option (the others' room is padding). */
static __always_inline void carrier_write(struct bpf_sock_ops *skops, struct carrier_tx *tx)
{
	if (!tx->pending)
		return;
	int ok;
	__u32 seq = carrier_seg_seq(skops, &ok);
	if (!ok || seq != tx->start_seq)
		return;
	struct carrier_opt o = { .kind = CARRIER_KIND, .len = CARRIER_LEN };
	__builtin_memcpy(o.ids, tx->ids, sizeof(o.ids));
	if (bpf_store_hdr_opt(skops, &o, CARRIER_LEN, 0)) {
		count(CNT_CARRIER_STORE);
		return;
	}
	count(tx->written ? CNT_CARRIER_REWRITTEN : CNT_CARRIER_WRITTEN);
	tx->written = 1;
}

/* PARSE_HDR_OPT: a received segment has an option the kernel does not
 * know; ours is kept by the segment's sequence number. */
static __always_inline void carrier_parse(struct bpf_sock_ops *skops, struct bpf_sock *sk)
{
	struct carrier_opt o = { .kind = CARRIER_KIND };
	int n = bpf_load_hdr_opt(skops, &o, sizeof(o), 0);
	if (n == -ENOMSG)
		return;
	int ok;
	__u32 seq = carrier_seg_seq(skops, &ok);
	__u8 any_t = 0, any_s = 0;
#pragma unroll
	for (int i = 0; i < 16; i++)
		any_t |= o.ids[i];
#pragma unroll
	for (int i = 16; i < 24; i++)
		any_s |= o.ids[i];
	if (n != CARRIER_LEN || !ok || !any_t || !any_s) {
		count(CNT_CARRIER_INVALID);
		return;
	}
	struct carrier_rx *rx = bpf_sk_storage_get(&carrier_rx, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!rx)
		return;
	/* the same segment again (a retransmission, a pure ack before it):
	 * its slot is updated */
	__u32 slot = rx->next % CARRIER_RX_SLOTS;
	int again = 0;
#pragma unroll
	for (int i = 0; i < CARRIER_RX_SLOTS; i++) {
		if (rx->s[i].used && rx->s[i].seq == seq) {
			slot = i;
			again = 1;
		}
	}
	if (!again) {
		rx->next += 1;
		count(CNT_CARRIER_RECEIVED);
	}
	struct carrier_slot *sl = &rx->s[slot & (CARRIER_RX_SLOTS - 1)];
	sl->seq = seq;
	sl->used = 1;
	__builtin_memcpy(sl->ids, o.ids, sizeof(sl->ids));
}

/* probe.carrier's callbacks. */
static __always_inline int carrier_sockops(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return 1;
	if (op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB) {
		/* a server's connection: our option is read where it comes
		 * (only segments with an option the kernel does not know call) */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG);
		/* and in the segment that concluded the handshake: where its
		 * pure ACK was lost, the client's request (and our option) is
		 * that segment, which no parse callback sees */
		carrier_parse(skops, sk);
		return 1;
	}
	if (op == BPF_SOCK_OPS_PARSE_HDR_OPT_CB) {
		carrier_parse(skops, sk);
		return 1;
	}
	struct carrier_tx *tx = bpf_sk_storage_get(&carrier_tx, sk, NULL, 0);
	if (!tx || !tx->armed)
		return 1;
	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB) {
		__u32 have = skops->bpf_sock_ops_cb_flags;
		tx->flags_ours = BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG & ~have;
		bpf_sock_ops_cb_flags_set(skops, have | BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
	} else if (op == BPF_SOCK_OPS_HDR_OPT_LEN_CB) {
		carrier_len(skops, sk, tx);
	} else if (op == BPF_SOCK_OPS_WRITE_HDR_OPT_CB) {
		carrier_write(skops, tx);
	}
	return 1;
}

SEC("sockops")
int prop_sockops(struct bpf_sock_ops *skops)
{
	if (carrier)
		return carrier_sockops(skops);
	__u32 op = skops->op;
	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_HDR_OPT_LEN_CB &&
	    op != BPF_SOCK_OPS_STATE_CB)
		return 1;
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return 1;
	struct prop_state *ps = bpf_sk_storage_get(&prop, sk, NULL, 0);
	if (!ps || !ps->armed)
		return 1;
	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB) {
		__u64 cookie = bpf_get_socket_cookie(skops);
		if (bpf_sock_hash_update(skops, &prop_socks, &cookie, BPF_NOEXIST)) {
			/* its requests are counted as such (prop_claim) */
			ps->armed = 0;
			ps->why = CNT_PROP_SOCKS_FULL;
			return 1;
		}
		/* only the flags no other program of this socket turned on are
		 * ours to turn off again */
		__u32 have = skops->bpf_sock_ops_cb_flags;
		ps->flags_ours = PROP_CB_FLAGS & ~have;
		bpf_sock_ops_cb_flags_set(skops, have | PROP_CB_FLAGS);
		return 1;
	}
	if (op == BPF_SOCK_OPS_HDR_OPT_LEN_CB) {
		/* (inside a send, TCP sizing its segments; the send that asked
		 * to leave, unless no option space is left: the next one) */
		if (ps->leave)
			prop_release(skops, ps);
		return 1;
	}
	/* BPF_SOCK_OPS_STATE_CB: args[1] is the new state. Any after
	 * ESTABLISHED (its FIN sent, the peer's received, a reset) ends what
	 * could be written: out of the map before the application's next
	 * call (a recv after shutdown(SHUT_WR) is plain TCP's). */
	if (skops->args[1] == TCP_ESTABLISHED_STATE)
		return 1;
	if (ps->state != PROP_OUT) {
		ps->state = PROP_OUT;
		ps->why = CNT_PROP_GIVEN_UP;
	}
	prop_release(skops, ps);
	return 1;
}

/* What the head's scan found. */
struct head_scan {
	struct prop_scratch *s;
	__u32 n;	 /* bytes in s->head */
	__u32 end;	 /* offset just past the empty line ending the head; 0: not found */
	__u32 has_tp;	 /* a traceparent header */
	__u32 length;	 /* Content-Length's value */
	__u32 lengths;	 /* Content-Length headers */
	__u32 unknown;	 /* the body's end cannot be counted */
	__u32 upgrade;	 /* an Upgrade header */
};

#define HMASK (PROP_HEAD_MAX * 2 - 1)
/* byte k of the line that begins at b; lower-cased (letters only: `| 0x20`
 * is compared only with lower-case letters, which it maps C and c to) */
#define AT(k) (p[(b + (k)) & HMASK])
#define LC(k) (AT(k) | 0x20)

/* Content-Length's value, after the colon at b + 15: optional blanks, 1 to
 * 10 digits, optional blanks, the line's end, within 24 bytes. Anything
 * else: unknown. Branch-free (http1.h says why). */
static __always_inline void content_length(struct head_scan *h, const __u8 *p, __u32 b)
{
	__u64 v = 0, digits = 0, after = 0, bad = 0, live = 1;
#pragma clang loop unroll(disable)
	for (int k = 15; k < 15 + 24; k++) {
		__u64 c = p[(b + k) & HMASK];
		__u64 digit = lt(c, '9' + 1) & (lt(c, '0') ^ 1);
		__u64 take = live & digit & (after ^ 1);
		__u64 blank = live & (eq(c, ' ') | eq(c, '\t'));
		__u64 cr = live & eq(c, '\r');
		__u64 other = live & (take ^ 1) & (blank ^ 1) & (cr ^ 1);
		v += take * (v * 9 + c - '0');
		digits += take;
		after |= blank & lt(0, digits);
		bad |= other;
		live &= (cr | other) ^ 1;
	}
	if (live | bad | eq(digits, 0) | lt(10, digits) || v > PROP_MAX_BODY) {
		h->unknown = 1;
		return;
	}
	h->length = v;
	h->lengths += 1;
}

/* bpf_loop callback: does a header line begin after byte i (a '\n')? */
static long scan_line(__u64 i, void *ctx)
{
	struct head_scan *h = ctx;
	__u8 *p = h->s->head;
	__u32 at = (__u32)i & (PROP_HEAD_MAX - 1);
	if (at + 1 >= h->n || p[at] != '\n')
		return 0;
	__u32 b = at + 1;
	if (AT(0) == '\r' && AT(1) == '\n') {
		h->end = b + 2;
		return 1; /* the empty line: the head ends here */
	}
	/* (no string constants: they would need .rodata, which this object's
	 * link does not lay out right) */
	if (AT(0) == ' ' || AT(0) == '\t') {
		h->unknown = 1; /* a folded line: what it continues is not known */
		return 0;
	}
	if (LC(0) == 't' && LC(1) == 'r' && LC(2) == 'a' && LC(3) == 'c' && LC(4) == 'e' && LC(5) == 'p' &&
	    LC(6) == 'a' && LC(7) == 'r' && LC(8) == 'e' && LC(9) == 'n' && LC(10) == 't' && AT(11) == ':') {
		if (b + 12 <= h->n)
			h->has_tp = 1;
		return 0;
	}
	if (LC(0) == 'c' && LC(1) == 'o' && LC(2) == 'n' && LC(3) == 't' && LC(4) == 'e' && LC(5) == 'n' &&
	    LC(6) == 't' && AT(7) == '-' && LC(8) == 'l' && LC(9) == 'e' && LC(10) == 'n' && LC(11) == 'g' &&
	    LC(12) == 't' && LC(13) == 'h' && AT(14) == ':') {
		content_length(h, p, b);
		return 0;
	}
	/* "transfer-encoding:", any value: a body whose end the kernel does
	 * not count (chunked), or a request the server refuses */
	if (LC(0) == 't' && LC(1) == 'r' && LC(2) == 'a' && LC(3) == 'n' && LC(4) == 's' && LC(5) == 'f' &&
	    LC(6) == 'e' && LC(7) == 'r' && AT(8) == '-' && LC(9) == 'e' && LC(10) == 'n' && LC(11) == 'c' &&
	    LC(12) == 'o' && LC(13) == 'd' && LC(14) == 'i' && LC(15) == 'n' && LC(16) == 'g' && AT(17) == ':') {
		h->unknown = 1;
		return 0;
	}
	/* "expect:": the body is sent only if the server asks (100), or not */
	if (LC(0) == 'e' && LC(1) == 'x' && LC(2) == 'p' && LC(3) == 'e' && LC(4) == 'c' && LC(5) == 't' &&
	    AT(6) == ':') {
		h->unknown = 1;
		return 0;
	}
	/* "upgrade:": the connection may speak another protocol after it */
	if (LC(0) == 'u' && LC(1) == 'p' && LC(2) == 'g' && LC(3) == 'r' && LC(4) == 'a' && LC(5) == 'd' &&
	    LC(6) == 'e' && AT(7) == ':')
		h->upgrade = 1;
	return 0;
}

#undef LC
#undef AT

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

/* The connection is given up: nothing is written into it again, and it
 * leaves the map in this send (the header-option callback). `reason` is
 * counted (0: not), and its later requests count as `why`; `tid` (0: none)
 * is the thread whose send's head this was: the capture does not count
 * that request again. */
static __always_inline int give_up(struct prop_state *ps, __u32 reason, __u8 why, __u32 tid)
{
	if (reason)
		count(reason);
	ps->state = PROP_OUT;
	ps->why = why;
	ps->leave = 1;
	if (tid) {
		ps->seen = 1;
		ps->tid = tid;
	}
	return SK_PASS;
}

/* Whether the send's head and the line certainly go in whole. A send the
 * kernel cannot complete (no room: a non-blocking socket's EAGAIN) returns
 * the bytes it took; were the line among those not taken, the application
 * would send again bytes that are already on the wire. TCP takes a send's
 * first segment (the head and the line are at most PROP_HEAD_MAX +
 * TP_LINE_LEN bytes: one or two segments) as long as its queue is below
 * the send buffer and nothing queued is unsent (TCP_NOTSENT_LOWAT): so
 * both, with PROP_SEND_ROOM bytes to spare. `seq` is write_seq. */
#define PROP_SEND_ROOM 8192
static __always_inline int room_for_line(struct sock *sk, __u32 seq)
{
	__s64 room = (__s64)sk->sk_sndbuf - sk->sk_wmem_queued;
	if (room < PROP_SEND_ROOM)
		return 0;
	if (!tcp_snd_nxt_off || !tcp_write_seq_off)
		return sk->sk_wmem_queued == 0;
	return sk_u32_at(sk, tcp_snd_nxt_off) == seq;
}

/* Inserts the line with `ids` after the request line (`eol` bytes).
 * Returns 1 if it is in. */
static __always_inline int write_line(struct sk_msg_md *msg, struct prop_scratch *s, __u32 eol)
{
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
	if (bpf_msg_push_data(msg, eol, TP_LINE_LEN, 0))
		return 0;
	if (bpf_msg_pull_data(msg, eol, eol + TP_LINE_LEN, 0)) {
		/* the room is made and cannot be filled: take it back */
		bpf_msg_pop_data(msg, eol, TP_LINE_LEN, 0);
		return 0;
	}
	__u8 *d = (void *)(long)msg->data;
	__u8 *e = (void *)(long)msg->data_end;
	if ((void *)(d + TP_LINE_LEN) > (void *)e) {
		bpf_msg_pop_data(msg, eol, TP_LINE_LEN, 0);
		return 0;
	}
#pragma unroll
	for (int k = 0; k < TP_LINE_LEN; k++)
		d[k] = line[k];
	return 1;
}

SEC("sk_msg")
int prop_msg(struct sk_msg_md *msg)
{
	struct bpf_sock *bsk = msg->sk;
	if (!bsk)
		return SK_PASS;
	struct prop_state *ps = bpf_sk_storage_get(&prop, bsk, NULL, 0);
	if (!ps || !ps->armed || ps->state == PROP_OUT)
		return SK_PASS;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(bsk);
	if (!tp)
		return SK_PASS;
	struct sock *sk = (struct sock *)tp;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	/* the TCP sequence number of this send's first byte */
	__u32 seq = sk_u32_at(sk, tcp_write_seq_off);
	__u32 size = msg->size;
	if (ps->state == PROP_HTTP) {
		__s32 at = (__s32)(seq - ps->next_seq);
		if (at < 0) {
			if ((__s32)(seq + size - ps->next_seq) <= 0) {
				/* the current request's body: no request begins */
				ps->in_body = 1;
				ps->tid = tid;
				return SK_PASS;
			}
			/* the next request begins inside this send */
			return give_up(ps, CNT_PROP_PIPELINED, CNT_PROP_GIVEN_UP, 0);
		}
		if (at > 0)
			return give_up(ps, CNT_PROP_SEND_UNSEEN, CNT_PROP_GIVEN_UP, 0);
		/* a request may begin here: once the previous one's answer
		 * was read */
		if (!ps->answered)
			return give_up(ps, CNT_PROP_PIPELINED, CNT_PROP_GIVEN_UP, tid);
	}
	/* a socket made blocking since its connect */
	if (!prop_nonblocking(sk))
		return give_up(ps, CNT_PROP_BLOCKING, CNT_PROP_BLOCKING, tid);
	__u32 n = size < PROP_HEAD_MAX ? size : PROP_HEAD_MAX;
	__u32 zero = 0;
	struct prop_scratch *s = bpf_map_lookup_elem(&prop_buf, &zero);
	if (!s || n < 16 || bpf_msg_pull_data(msg, 0, n, 0))
		return give_up(ps, CNT_PROP_NOT_HTTP, CNT_PROP_GIVEN_UP, tid);
	void *data = (void *)(long)msg->data;
	if (bpf_probe_read_kernel(s->head, n & (PROP_HEAD_MAX * 2 - 1), data))
		return give_up(ps, CNT_PROP_NOT_HTTP, CNT_PROP_GIVEN_UP, tid);
	/* a request line, at the very start (no empty lines before it) */
	if (!is_request(s->head, 0, n < PREFIX_LEN ? n : PREFIX_LEN))
		return give_up(ps, CNT_PROP_NOT_HTTP, CNT_PROP_GIVEN_UP, tid);
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
		return give_up(ps, CNT_PROP_NOT_HTTP, CNT_PROP_GIVEN_UP, tid);
	const __u8 *v = &s->head[(eol - 10) & (PROP_HEAD_MAX - 1)];
	if (v[0] != 'H' || v[1] != 'T' || v[2] != 'T' || v[3] != 'P' || v[4] != '/' || v[5] != '1' || v[6] != '.')
		return give_up(ps, CNT_PROP_NOT_HTTP, CNT_PROP_GIVEN_UP, tid);
	/* a head that ends in reach: its headers say how long its body is */
	struct head_scan h = { .s = s, .n = n };
	bpf_loop(PROP_HEAD_MAX, scan_line, &h, 0);
	if (!h.end)
		return give_up(ps, CNT_PROP_HEAD, CNT_PROP_GIVEN_UP, tid);
	const __u8 *m = s->head;
	if (m[0] == 'C' && m[1] == 'O' && m[2] == 'N' && m[3] == 'N' && m[4] == 'E' && m[5] == 'C' && m[6] == 'T')
		h.upgrade = 1;
	if (h.lengths > 1)
		h.unknown = 1;
	__u32 body = h.unknown ? 0 : h.length;

	/* written, or why not */
	int written = 0;
	if (h.has_tp) {
		count(CNT_PROP_HAS_TP);
	} else if (bpf_map_lookup_elem(&prop_threads, &tid)) {
		/* a call made while serving a request belongs to that
		 * request's trace */
		count(CNT_PROP_SERVING);
	} else if (!room_for_line(sk, seq)) {
		count(CNT_PROP_QUEUE_BUSY);
	} else if (!write_line(msg, s, eol)) {
		count(CNT_PROP_NO_ROOM);
	} else {
		written = 1;
		__builtin_memcpy(ps->ids, s->ids, sizeof(ps->ids));
		ps->pending = 1;
		count(CNT_PROPAGATED);
	}
	ps->seen = 1;
	ps->tid = tid;
	ps->state = PROP_HTTP;
	ps->answered = 0;
	ps->next_seq = seq + h.end + (written ? TP_LINE_LEN : 0) + body;

	/* what comes after this request */
	if (!prop_keep_alive || !tcp_write_seq_off)
		/* where FIONREAD reads 0 in a socket map: out after the first
		 * request (its later requests counted by the capture) */
		return give_up(ps, 0, CNT_PROP_KEEP_ALIVE_OFF, 0);
	if (h.unknown)
		return give_up(ps, CNT_PROP_BODY_UNKNOWN, CNT_PROP_GIVEN_UP, 0);
	if (h.upgrade)
		return give_up(ps, CNT_PROP_UPGRADE, CNT_PROP_GIVEN_UP, 0);
	if ((__u64)size > (__u64)h.end + body)
		/* more bytes than this request's: the next one begins in
		 * this send */
		return give_up(ps, CNT_PROP_PIPELINED, CNT_PROP_GIVEN_UP, 0);
	return SK_PASS;
}
