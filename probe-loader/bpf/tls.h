/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * TLS (OpenSSL): what the socket hooks and the TLS uprobes share.
 *
 * The plaintext of a TLS connection is read where the library hands it to
 * the application (SSL_read/SSL_read_ex, on return) or takes it from it
 * (SSL_write/SSL_write_ex, on entry), and goes to the same state machine
 * (capture.h) as cleartext bytes, on the connection's socket. The socket is
 * learnt by binding: a uprobe records the thread's call in progress
 * (`tls_calls`); a socket hook firing on that thread inside the call (the
 * library reading or writing ciphertext) binds the SSL object to its socket
 * (`tls_socks`) and leaves the ciphertext alone. The calls that bind are
 * SSL_read (a server's first bytes) and SSL_do_handshake (also behind
 * SSL_connect and SSL_accept: a client writes before it ever reads). Writes
 * are seen at entry only (one uprobe hit), by the binding made before.
 *
 * A program that runs TLS over memory buffers (Node's TLSWrap, Python's
 * ssl.SSLObject under asyncio) moves the ciphertext itself, outside any TLS
 * call, on the thread that makes the calls: the handshake call produces a
 * flight (a client's ClientHello, a server's ServerHello...), which the
 * program then sends. So a TLS call that moved no ciphertext itself and
 * whose SSL object has no binding is remembered for the thread
 * (`tls_pending`), and the thread's next send, outside any TLS call, on a
 * socket with no state, of bytes that begin a TLS handshake record binds
 * it (tls_saw_send). What binds is what the process itself sent: bytes a
 * peer sends cannot steer a binding.
 *
 * The hook programs are in tls_hooks.h (one compilation unit per backend
 * object: sock_tls.bpf.c, syscalls_tls.bpf.c).
 */
#ifndef RINGTAIL_TLS_H
#define RINGTAIL_TLS_H

#include "globals.h"
#include "maps.h"

/* tls_call.kind */
#define TLS_READ 1
#define TLS_READ_EX 2
#define TLS_HANDSHAKE 3

/* A TLS call in progress on a thread, between its uprobe and uretprobe. */
struct tls_call {
	__u64 ssl;
	__u64 buf;  /* the plaintext buffer (reads) */
	__u64 out;  /* SSL_read_ex's size_t *readbytes */
	__u64 sk;   /* the socket a hook saw inside the call, 0 before */
	/* A read: the socket its SSL object was bound to at entry (0: none),
	 * and that socket's copied_seq then: where the call's first read of
	 * ciphertext, if it makes one, begins. With OpenSSL reading no further
	 * ahead than a record (its default), the start of the record whose
	 * plaintext the call returns (join.h, for same-host joins). */
	__u64 seq_sk;
	__u32 rec_seq;
	__u32 kind; /* TLS_* */
};

/* By thread id; the uretprobe deletes its call's record. An LRU: a thread
 * that dies inside a call leaves its record to be evicted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct tls_call);
} tls_calls SEC(".maps") __weak;

/* An SSL object of a process. */
struct tls_key {
	__u64 ssl;
	__u32 tgid;
	__u32 _pad;
};

/* The socket an SSL object reads and writes. */
struct tls_sock {
	__u64 sk;
	__s32 fd;
	__u32 _pad;
};

/* SSL object -> socket, deleted at SSL_free. An LRU sized like the
 * connection table (probe.max_connections, set by the loader): a process
 * killed before it freed its SSL objects leaves bindings to be evicted; an
 * evicted live binding is made again by the connection's next read or
 * handshake that touches the socket, and what went by meanwhile is counted
 * (CNT_TLS_UNBOUND). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct tls_key);
	__type(value, struct tls_sock);
} tls_socks SEC(".maps") __weak;

/* The SSL object of the thread's last TLS call that moved no ciphertext
 * and had no binding, by thread id, until a handshake record the thread
 * sends binds it (see above). An LRU: a thread that never sends one leaves
 * its record to be evicted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} tls_pending SEC(".maps") __weak;

/* The processes some TLS call of which the uprobes saw, by tgid (an LRU):
 * a handshake one of them reads outside a TLS call is TLS over memory
 * buffers, bound later (tls_pend); one another process reads was read
 * before its library was attached (CNT_TLS_EARLY). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} tls_procs SEC(".maps") __weak;

/* The current process makes TLS calls the uprobes see. */
static __always_inline void tls_proc_seen(__u32 tgid)
{
	if (!bpf_map_lookup_elem(&tls_procs, &tgid)) {
		__u8 one = 1;
		bpf_map_update_elem(&tls_procs, &tgid, &one, BPF_ANY);
	}
}

/* Whether the `n` bytes at `p` begin a TLS handshake record (content
 * type 22, protocol major version 3). */
static __always_inline int tls_handshake_record(const __u8 *p, __u32 n)
{
	return n >= 3 && p[0] == 22 && p[1] == 3;
}

/* A receive of process `tgid` on a socket with no state, outside any TLS
 * call of the thread, began with the `n` bytes at `p`: a handshake record
 * read by a process no TLS call of which was ever seen is a TLS
 * connection made before its library's uprobes were attached (or the
 * first of a process that runs TLS over memory buffers, Node's, which
 * binds it later): counted, CNT_TLS_EARLY. */
static __always_inline void tls_saw_read(__u32 tgid, const __u8 *p, __u32 n)
{
	if (tls_on && tls_handshake_record(p, n) && !bpf_map_lookup_elem(&tls_procs, &tgid))
		count(CNT_TLS_EARLY);
}

/* A send on `sk` (no state, no TLS call of the thread) began with the `n`
 * bytes at `p`: a handshake record binds the thread's pending SSL object
 * to `sk`. */
static __always_inline void tls_saw_send(struct sock *sk, __u32 tgid, __u32 tid, __s32 fd, const __u8 *p, __u32 n)
{
	if (!tls_on || !tls_handshake_record(p, n))
		return;
	__u64 *pp = bpf_map_lookup_elem(&tls_pending, &tid);
	if (!pp)
		return;
	struct tls_key k = { .ssl = *pp, .tgid = tgid };
	bpf_map_delete_elem(&tls_pending, &tid);
	struct tls_sock v = { .sk = (__u64)sk, .fd = fd };
	if (bpf_map_update_elem(&tls_socks, &k, &v, BPF_NOEXIST) == 0)
		count(CNT_TLS_BINDINGS);
}

/* A TLS call of `ssl` moved no ciphertext itself: when `ssl` has no
 * binding, it waits for the handshake record the thread sends next. */
static __always_inline void tls_pend(__u64 ssl, __u32 tgid, __u32 tid)
{
	struct tls_key k = { .ssl = ssl, .tgid = tgid };
	if (!bpf_map_lookup_elem(&tls_socks, &k))
		bpf_map_update_elem(&tls_pending, &tid, &ssl, BPF_ANY);
}

/* The TLS call the current thread is inside, if any (socket hooks). */
static __always_inline struct tls_call *tls_call_now(__u32 tid)
{
	if (!tls_on)
		return NULL;
	return bpf_map_lookup_elem(&tls_calls, &tid);
}

/* A socket hook saw `sk` move bytes inside TLS call `c` of this thread:
 * binds the call's SSL object to `sk`. Returns 1 when the bytes are the
 * call's ciphertext (the hook leaves them), 0 when they are another
 * socket's (a library that reads a second socket inside a TLS call). */
static __always_inline int tls_bind(struct tls_call *c, struct sock *sk, __u32 tgid, __s32 fd)
{
	__u64 s = (__u64)sk;
	if (c->sk)
		return c->sk == s;
	c->sk = s;
	struct tls_key k = { .ssl = c->ssl, .tgid = tgid };
	struct tls_sock *b = bpf_map_lookup_elem(&tls_socks, &k);
	if (b && b->sk == s)
		return 1;
	struct tls_sock v = { .sk = s, .fd = fd };
	bpf_map_update_elem(&tls_socks, &k, &v, BPF_ANY);
	count(CNT_TLS_BINDINGS);
	return 1;
}

#endif
