/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Go's crypto/tls: the plaintext of `(*tls.Conn).Read` and `Write` in Go
 * executables (amd64, Go's register ABI), to the same state machine as
 * OpenSSL's (tls_hooks.h, tls_sock_data). The loader finds the functions in
 * each Go executable of a selected process (src/gobin.rs: its symbols, or
 * `.gopclntab` when stripped) and attaches
 *  - go_tls_write_enter at Write's entry (it writes everything or fails:
 *    the entry has what the state machine needs, as with SSL_write);
 *    "entry" here is the first instruction past Go's stack check: a call
 *    that must grow its goroutine's stack runs the function's first
 *    instructions again after runtime.morestack, and a Write seen twice
 *    would be walked twice (src/gobin.rs, stack_check_end);
 *  - go_tls_read_enter at Read's entry, which remembers the buffer for
 *  - go_tls_read_exit at each of Read's return instructions, found by
 *    decoding its machine code: a uretprobe rewrites the return address on
 *    the stack, which Go's runtime copies when it grows a goroutine's stack
 *    and reads when it unwinds (the process would die).
 * A goroutine moves between threads, in a Read that waits among them: the
 * call in progress is kept by goroutine (R14 holds its `g` in Go's ABI),
 * not by thread.
 *
 * The socket comes from the connection itself, not from a binding (tls.h):
 * the `tls.Conn`'s net.Conn is a *net.TCPConn whose netFD holds the fd
 * (offsets GO_* in ringtail.h, the same in every Go version the loader
 * accepts), resolved through the task's file table (fdsock.h). A net.Conn
 * of another type (a wrapper) reads as some other value: unless that is
 * the number of one of the process's TCP sockets, nothing is found
 * (counted, CNT_GO_NO_SOCKET). The ciphertext the socket hooks see on such
 * a connection is left alone: the handshake record it sent gave it state
 * marked TLS (http1_conn.h, tls_conn_mark), or the plaintext did.
 *
 * Hits per request: Read entry and one return per read, Write entry per
 * write; on the lazy path (below) Read's and Write's entries alone. A
 * process not selected pays the traps and one lookup.
 */
#ifndef RINGTAIL_GO_TLS_H
#define RINGTAIL_GO_TLS_H

#include "fdsock.h"

/* A Read in progress, by goroutine. */
struct go_call_key {
	__u64 g;
	__u32 tgid;
	__u32 _pad;
};

struct go_call {
	__u64 conn; /* the *tls.Conn */
	__u64 buf;  /* the plaintext buffer */
};

/* An LRU: a goroutine whose Read never returns (the process died) leaves
 * its record to be evicted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_call_key);
	__type(value, struct go_call);
} go_calls SEC(".maps") __weak;

/* The TCP socket under a *tls.Conn, and its fd; NULL when there is none. */
static __always_inline struct sock *go_conn_sock(__u64 conn, __s32 *fd)
{
	__u64 data = 0, netfd = 0;
	__s64 sysfd = -1;
	/* the interface's data word: the *net.TCPConn */
	if (bpf_probe_read_user(&data, sizeof(data), (const void *)(conn + GO_CONN_OFF + 8)) || !data)
		return NULL;
	if (bpf_probe_read_user(&netfd, sizeof(netfd), (const void *)(data + GO_TCP_FD_OFF)) || !netfd)
		return NULL;
	if (bpf_probe_read_user(&sysfd, sizeof(sysfd), (const void *)(netfd + GO_SYSFD_OFF)))
		return NULL;
	if (sysfd < 0 || sysfd > 0x7fffffff)
		return NULL;
	*fd = (__s32)sysfd;
	return fd_tcp_sock((__s32)sysfd);
}

/* Plaintext for the state machine: `n` bytes at `buf` on `sk`. */
struct go_bytes {
	__u64 sk;
	__u64 buf;
	__u64 n;
	__s32 fd;
};

/* `n` bytes at `buf` moved on Go connection `conn`: where they go, in
 * `out` (n stays 0 when the socket is not found). */
static __always_inline void go_bytes_of(__u64 conn, __u64 buf, __u64 n, struct go_bytes *out)
{
	struct sock *sk = go_conn_sock(conn, &out->fd);
	if (!sk) {
		count(CNT_GO_NO_SOCKET);
		return;
	}
	out->sk = (__u64)sk;
	out->buf = buf;
	out->n = n;
}

/* The bytes to the state machine (each program has one place per
 * direction that does this: the verifier walks each once). */
static __always_inline void go_hand(const struct go_bytes *b, __u64 id, int recv)
{
	if (b->n)
		tls_sock_data((struct sock *)b->sk, b->fd, b->buf, b->n, id >> 32, (__u32)id, recv, NULL);
}

/* func (c *Conn) Write(b []byte) (int, error): c in RAX, b's pointer and
 * length in RBX and RCX. */
static __always_inline void go_write(struct pt_regs *ctx, struct go_bytes *tx)
{
	if (ctx->cx)
		go_bytes_of(ctx->ax, ctx->bx, ctx->cx, tx);
}

SEC("uprobe")
int go_tls_write_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!pid_selected(id >> 32))
		return 0;
	struct go_bytes tx = {};
	go_write(ctx, &tx);
	go_hand(&tx, id, 0);
	return 0;
}

/* func (c *Conn) Read(b []byte) (int, error): entry. */
static __always_inline void go_read(struct pt_regs *ctx, __u64 id)
{
	tls_proc_seen(id >> 32);
	struct go_call_key k = { .g = ctx->r14, .tgid = id >> 32 };
	struct go_call c = { .conn = ctx->ax, .buf = ctx->bx };
	bpf_map_update_elem(&go_calls, &k, &c, BPF_ANY);
}

SEC("uprobe")
int go_tls_read_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (pid_selected(id >> 32))
		go_read(ctx, id);
	return 0;
}

/* Read's return instructions: n in RAX. */
static __always_inline void go_read_ret(struct pt_regs *ctx, __u64 id, struct go_bytes *rx)
{
	struct go_call_key k = { .g = ctx->r14, .tgid = id >> 32 };
	struct go_call *cp = bpf_map_lookup_elem(&go_calls, &k);
	if (!cp)
		return;
	struct go_call c = *cp;
	bpf_map_delete_elem(&go_calls, &k);
	__s64 n = (__s64)ctx->ax;
	if (n > 0)
		go_bytes_of(c.conn, c.buf, (__u64)n, rx);
}

SEC("uprobe")
int go_tls_read_exit(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct go_bytes rx = {};
	go_read_ret(ctx, id, &rx);
	go_hand(&rx, id, 1);
	return 0;
}

/*
 * The lazy path (uprobe_multi kernels, a Go release whose tls.Conn.input
 * offset the loader knows: src/gobin.rs INPUTS): three hits a request
 * (and Close's once a connection), not five: no probe on Read's returns.
 * Read returns what it copied from `c.input`, a bytes.Reader over the
 * record's plaintext in c.rawInput
 * ({s []byte; i int64}: the bytes read so far are s[..i]). So Read's entry
 * notes where the input stands, and the connection's next Read, Write or
 * Close entry, or Read's call of readRecordOrCCS for a waiting
 * close_notify (which resets the input), finds what the Read took from it:
 *  - the input held bytes at the entry (i < len(s)): Read took the next
 *    ones from the same record, s[i0..i];
 *  - it was empty: Read read a record (resetting the input to nil first,
 *    to the record's plaintext after) and took s[..i]. A record of the
 *    same length at the same address as the last (rawInput reuses its
 *    buffer) is told by the socket's copied_seq, which moved.
 * The bytes are still in rawInput then: it is read again only inside a
 * Read, after that Read's entry. A Read still waiting (the input nil, or
 * unchanged) stays pending.
 * Reads and writes of one connection run on several threads at once (an
 * HTTP/2 connection's reader and writers; net/http's background read and
 * its handler's Write). The first to find a Read over claims its record
 * (a compare-and-swap on its state word, which holds the record's
 * generation: a record the LRU recycled for another connection meanwhile
 * fails the swap) and hands its bytes on; a thread that finds the record
 * claimed waits until it is done (at most GO_WAIT_NS): a Write, so that a
 * request reaches the state machine before its response; a Read's entry,
 * so that its Read, which may overwrite rawInput, runs only once the
 * bytes were copied. The socket's copied_seq is loaded before the input:
 * a Read that moved it had reset the input before (x86 loads are not
 * reordered), so a moved sequence with the old input is never seen.
 */
struct go_conn_key {
	__u64 conn; /* the *tls.Conn */
	__u32 tgid;
	__u32 _pad;
};

#define GO_PENDING 0
#define GO_CLAIMED 1
#define GO_DONE 2

/* c.input as Read's entry found it, and the connection's socket then. */
struct go_read {
	__u64 s;
	__u64 len;
	__u64 i;
	__u64 sk;
	__s32 fd;
	__u32 seq; /* the socket's copied_seq */
	__u64 conn; /* the key again: a recycled record is told apart */
	__u32 tgid;
	__u32 _pad;
	/* generation (its entry's time) << 2 | GO_PENDING, _CLAIMED or _DONE */
	__u64 state;
};

/* bytes.Reader: s (a slice: pointer, length, capacity), i. */
struct go_input {
	__u64 s;
	__u64 len;
	__u64 cap;
	__s64 i;
};

/* The Read of each connection whose bytes are not yet seen. An LRU: a
 * connection whose last Read is never followed leaves its record to be
 * evicted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_conn_key);
	__type(value, struct go_read);
} go_reads SEC(".maps") __weak;

#define GO_MAX_RECORD (1 << 20) /* above any TLS record's plaintext (16 KiB) */

/* Whether the Read `r` is over, given the socket's copied_seq `seq` (read
 * first) and the input `in` now; its bytes in `out` (n is 0 when it took
 * none). */
static __always_inline int go_read_over(const struct go_read *r, __u32 seq, const struct go_input *in, struct go_bytes *out)
{
	if (!in->s || in->i <= 0 || (__u64)in->i > in->len || in->len > GO_MAX_RECORD)
		return 0; /* waiting inside readRecord, or nothing read */
	__u64 i = (__u64)in->i;
	if (r->i < r->len) {
		/* bytes were waiting at the entry: the Read took from them */
		if (in->s != r->s || in->len != r->len) {
			count(CNT_GO_TLS_LOST); /* another record: a Read not seen */
			return 1;
		}
		if (i <= r->i)
			return 0;
		out->buf = in->s + r->i;
		out->n = i - r->i;
	} else {
		if (in->s == r->s && in->len == r->len && i == r->i && seq == r->seq)
			return 0;
		out->buf = in->s;
		out->n = i;
	}
	out->sk = r->sk;
	out->fd = r->fd;
	return 1;
}

/* Off the stack (the program's is near its limit): [0] the new Read's
 * record, made before it is stored; [1] a copy of the record found. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct go_read);
} go_read_scratch SEC(".maps") __weak;

/* What a lazy hit does after it found its bytes: the record it claimed
 * (and its state word then), marked done once the Read's bytes are handed
 * on, and the new Read's record (`next`: NULL, none), stored after that. */
struct go_lazy_step {
	struct go_read *claimed;
	__u64 state;
	struct go_read *next;
	struct go_conn_key k;
};

/* Longest a thread waits for another to hand a Read's bytes on. A hand-off
 * takes microseconds, but the thread doing it may be preempted inside it
 * (a uprobe's program runs preemptible): it runs again within a scheduler
 * slice (a few ms), which the wait outlasts; the spin is paid only then. */
#define GO_WAIT_NS 10000000
#define GO_WAIT_TURNS (1 << 22) /* bpf_loop's turns: more than 10 ms of them */

struct go_wait {
	struct go_conn_key k;
	__u64 until;
};

/* One turn of a wait (bpf_loop): 1 (stop) once the connection's record is
 * no longer being handed on by another thread, or too late. */
static long go_wait_turn(__u32 i, void *arg)
{
	struct go_wait *w = arg;
	struct go_read *rp = bpf_map_lookup_elem(&go_reads, &w->k);
	if (!rp || rp->conn != w->k.conn || rp->tgid != w->k.tgid || (*(volatile __u64 *)&rp->state & 3) != GO_CLAIMED)
		return 1;
	if (bpf_ktime_get_ns() > w->until) {
		count(CNT_GO_TLS_ORDER);
		return 1;
	}
	return 0;
}

#ifndef RINGTAIL_NO_XCHG
/* (The object for kernels before 5.12 holds no compare-and-swap, nor
 * this path: uprobe_multi needs 6.6.) */

/* A lazy hit `fn` on connection RAX, whose input is at `input_off`: the
 * pending Read's bytes to `rx` if it is over and this thread claims it;
 * Read's entry makes the new Read's record (`step`). */
static __always_inline void go_lazy(struct pt_regs *ctx, __u32 fn, __u64 input_off, __u64 id, struct go_bytes *rx,
				    struct go_lazy_step *step)
{
	__u64 conn = ctx->ax;
	step->k.conn = conn;
	step->k.tgid = id >> 32;
	if (input_off > 4096)
		return;
	struct go_input in = {};
	__u32 one = 1;
	struct go_read *rp = bpf_map_lookup_elem(&go_reads, &step->k);
	struct go_read *r = bpf_map_lookup_elem(&go_read_scratch, &one);
	if (rp && r) {
		__builtin_memcpy(r, rp, sizeof(*r));
		int waits = 0;
		if (r->conn != conn || r->tgid != step->k.tgid) {
			/* recycled under us: not this connection's */
		} else if ((r->state & 3) == GO_PENDING) {
			__u32 seq = r->sk && tcp_copied_seq_off ? sk_u32_at((struct sock *)r->sk, tcp_copied_seq_off) : 0;
			barrier();
			if (bpf_probe_read_user(&in, sizeof(in), (const void *)(conn + input_off)))
				return;
			/* over (or a new Read begins: the last took nothing), and ours */
			if (go_read_over(r, seq, &in, rx) || fn == GOF_LAZY_READ) {
				if (__sync_val_compare_and_swap(&rp->state, r->state, r->state + GO_CLAIMED) == r->state) {
					step->claimed = rp;
					step->state = r->state + GO_CLAIMED;
				} else {
					rx->n = 0; /* another thread's */
					waits = 1;
				}
			}
		} else if ((r->state & 3) == GO_CLAIMED) {
			waits = 1;
		}
		if (waits && (fn == GOF_LAZY_WRITE || fn == GOF_LAZY_READ || fn == GOF_LAZY_ALERT)) {
			struct go_wait w = { .k = step->k, .until = bpf_ktime_get_ns() + GO_WAIT_NS };
			bpf_loop(GO_WAIT_TURNS, go_wait_turn, &w, 0);
		}
	}
	if (fn != GOF_LAZY_READ)
		return;
	tls_proc_seen(id >> 32);
	/* where this Read starts (after any wait: the input as it now is) */
	if (bpf_probe_read_user(&in, sizeof(in), (const void *)(conn + input_off)))
		return;
	__u32 zero = 0;
	r = bpf_map_lookup_elem(&go_read_scratch, &zero);
	if (!r)
		return;
	r->s = in.s;
	r->len = in.len;
	r->i = in.i < 0 ? 0 : (__u64)in.i;
	r->conn = conn;
	r->tgid = id >> 32;
	r->state = bpf_ktime_get_ns() << 2 | GO_PENDING;
	r->fd = -1;
	struct sock *sk = go_conn_sock(conn, &r->fd);
	if (!sk) {
		count(CNT_GO_NO_SOCKET);
		return;
	}
	r->sk = (__u64)sk;
	r->seq = tcp_copied_seq_off ? sk_u32_at(sk, tcp_copied_seq_off) : 0;
	step->next = r;
}
#endif

/* uprobe_multi (6.6+): one program on an executable's probes, told apart
 * by the cookie (GOF_*): one link an executable (a process) instead of a
 * perf event each. Entry and returns (GOF_READ, GOF_READ_RET, GOF_WRITE),
 * or the lazy path (GOF_LAZY_*). One place hands each direction's bytes
 * to the state machine (the verifier walks each once). */
SEC("uprobe")
int go_tls_multi(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 fn = (__u32)cookie;
	__u64 id = bpf_get_current_pid_tgid();
	struct go_bytes b = {};
	struct go_lazy_step step = {};
	if (fn == GOF_READ_RET) {
		go_read_ret(ctx, id, &b); /* a Read of a selected process: its entry looked */
	} else if (!pid_selected(id >> 32)) {
		return 0;
	} else if (fn == GOF_READ) {
		go_read(ctx, id);
		return 0;
	} else if (fn != GOF_WRITE) {
#ifndef RINGTAIL_NO_XCHG
		go_lazy(ctx, fn, cookie >> 32, id, &b, &step);
#endif
	}
	go_hand(&b, id, 1);
#ifndef RINGTAIL_NO_XCHG
	if (step.claimed)
		__sync_val_compare_and_swap(&step.claimed->state, step.state, (step.state & ~3ULL) | GO_DONE);
#endif
	if (step.next)
		bpf_map_update_elem(&go_reads, &step.k, step.next, BPF_ANY);
	if (fn == GOF_WRITE || fn == GOF_LAZY_WRITE) {
		b.n = 0;
		go_write(ctx, &b);
		go_hand(&b, id, 0);
	}
	return 0;
}

#endif
