/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * TLS hooks (OpenSSL 1.1 and 3.x, see tls.h): uprobes on the library's
 * functions, attached by the loader to each libssl file and each binary
 * exporting the symbols (probes.rs, tls.rs). Included by one compilation
 * unit per backend object, after it chose where state lives (conn_store.h):
 * uprobe programs are of the kprobe type, which may not use socket-local
 * storage, so a TLS connection's state is in the connection table.
 *
 * Hits per request, each a trap into the kernel (~13 us on a VM): a server
 * pays SSL_read entry and return for each read (plus a read that finds
 * nothing yet, when the server tries one) and SSL_write entry for each
 * write; a client the same. SSL_do_handshake entry and return, and
 * SSL_free, are per connection. A process not selected pays the traps and
 * one lookup (pid_selected, before any copy or map write); its uretprobes
 * find no record.
 */
#ifndef RINGTAIL_TLS_HOOKS_H
#define RINGTAIL_TLS_HOOKS_H

#include "capture.h"
#include "tls.h"

/* A call begins: remember it for its return and the socket hooks. */
static __always_inline void tls_enter(__u32 kind, __u64 ssl, __u64 buf, __u64 out)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!pid_selected(id >> 32))
		return;
	__u32 tid = (__u32)id;
	tls_proc_seen(id >> 32);
	struct tls_call c = { .ssl = ssl, .buf = buf, .out = out, .kind = kind };
	if (kind != TLS_HANDSHAKE && tcp_copied_seq_off) {
		struct tls_key k = { .ssl = ssl, .tgid = id >> 32 };
		struct tls_sock *b = bpf_map_lookup_elem(&tls_socks, &k);
		if (b) {
			c.seq_sk = b->sk;
			c.rec_seq = sk_u32_at((struct sock *)b->sk, tcp_copied_seq_off);
		}
	}
	bpf_map_update_elem(&tls_calls, &tid, &c, BPF_ANY);
}

/* `n` bytes of plaintext at `buf` moved on the TLS connection whose
 * socket is `sk` (its fd `fd` in the process): to the state machine. `c`:
 * an OpenSSL read's call record (where its ciphertext began), or NULL. */
static __always_inline void tls_sock_data(struct sock *sk, __s32 fd, __u64 buf, __u64 n, __u32 tgid, __u32 tid,
					  int recv, const struct tls_call *c)
{
	struct conn_state *st = conn_get(sk);
	if (st) {
		if (st->role == ROLE_OPAQUE || st->h2 == H2_DEAD)
			return;
		/* A server that answered a request is idle until the next: what it
		 * writes now is the rest of the response, or the same response
		 * again (a write retried after SSL_ERROR_WANT_WRITE, which the
		 * entry alone cannot tell from a new one). HTTP/2 has no such
		 * phase: its writes are frames, walked as they come. */
		if (!st->h2 && !recv && st->role == ROLE_SERVER && st->seq && st->phase != PHASE_REQUEST)
			return;
		st->tls = 1;
	}
	count(CNT_TLS_CALLS);
	struct segs sg = {};
	sg.base[0] = (const __u8 *)buf;
	sg.len[0] = n;
	sg.n = 1;
	sg.total = n > 0xffffffff ? 0xffffffff : n;
	struct conn_io io = { .sk = sk, .tgid = tgid, .tid = tid, .fd = fd, .tls = 1 };
	/* the read moved ciphertext if copied_seq moved: it began there */
	if (c && c->seq_sk == (__u64)sk && sk_u32_at(sk, tcp_copied_seq_off) != c->rec_seq) {
		io.tls_seq_ok = 1;
		io.tls_seq = c->rec_seq;
	}
	if (recv)
		conn_on_recv(st, &io, &sg);
	else
		conn_on_send(st, &io, &sg);
}

/* `n` bytes of plaintext at `buf` moved on SSL object `ssl`: to the state
 * machine, on the socket it is bound to. */
static __always_inline void tls_data(__u64 ssl, __u64 buf, __u64 n, __u32 tgid, __u32 tid, int recv,
				     const struct tls_call *c)
{
	struct tls_key k = { .ssl = ssl, .tgid = tgid };
	struct tls_sock *b = bpf_map_lookup_elem(&tls_socks, &k);
	if (!b) {
		count(CNT_TLS_UNBOUND);
		return;
	}
	tls_sock_data((struct sock *)b->sk, b->fd, buf, n, tgid, tid, recv, c);
}

/* int SSL_read(SSL *ssl, void *buf, int num) */
SEC("uprobe")
int BPF_KPROBE(tls_read_enter, void *ssl, void *buf)
{
	tls_enter(TLS_READ, (__u64)ssl, (__u64)buf, 0);
	return 0;
}

/* int SSL_read_ex(SSL *ssl, void *buf, size_t num, size_t *readbytes) */
SEC("uprobe")
int BPF_KPROBE(tls_read_ex_enter, void *ssl, void *buf, __u64 num, void *readbytes)
{
	tls_enter(TLS_READ_EX, (__u64)ssl, (__u64)buf, (__u64)readbytes);
	return 0;
}

/* int SSL_do_handshake(SSL *ssl): SSL_connect and SSL_accept call it. */
SEC("uprobe")
int BPF_KPROBE(tls_handshake_enter, void *ssl)
{
	tls_enter(TLS_HANDSHAKE, (__u64)ssl, 0, 0);
	return 0;
}

/* The return of SSL_read, SSL_read_ex or SSL_do_handshake on this thread,
 * which returned `ret`: the record says which call it was. */
static __always_inline void tls_return(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct tls_call *cp = bpf_map_lookup_elem(&tls_calls, &tid);
	if (!cp)
		return;
	struct tls_call c = *cp;
	bpf_map_delete_elem(&tls_calls, &tid);
	if (!c.sk)
		tls_pend(c.ssl, id >> 32, tid); /* no ciphertext moved inside */
	__u64 n = 0;
	if (c.kind == TLS_READ) {
		if ((int)ret <= 0)
			return;
		n = (int)ret;
	} else if (c.kind == TLS_READ_EX) {
		if ((int)ret != 1 || bpf_probe_read_user(&n, sizeof(n), (const void *)c.out))
			return;
	} else {
		return; /* a handshake: its binding, if any, is made */
	}
	if (n)
		tls_data(c.ssl, c.buf, n, id >> 32, tid, 1, &c);
}

/* The return of SSL_read, SSL_read_ex and SSL_do_handshake (one program:
 * the record says which call it was). */
SEC("uretprobe")
int BPF_KRETPROBE(tls_call_exit, long ret)
{
	/* (tls_return's body, spelt out: the perf-event programs run on 5.10
	 * and 6.1, whose verifiers follow the database path's clamps only as
	 * clang compiles them in this program, not inside a wrapper) */
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct tls_call *cp = bpf_map_lookup_elem(&tls_calls, &tid);
	if (!cp)
		return 0;
	struct tls_call c = *cp;
	bpf_map_delete_elem(&tls_calls, &tid);
	if (!c.sk)
		tls_pend(c.ssl, id >> 32, tid); /* no ciphertext moved inside */
	__u64 n = 0;
	if (c.kind == TLS_READ) {
		if ((int)ret <= 0)
			return 0;
		n = (int)ret;
	} else if (c.kind == TLS_READ_EX) {
		if ((int)ret != 1 || bpf_probe_read_user(&n, sizeof(n), (const void *)c.out))
			return 0;
	} else {
		return 0; /* a handshake: its binding, if any, is made */
	}
	if (n)
		tls_data(c.ssl, c.buf, n, id >> 32, tid, 1, &c);
	return 0;
}

/* int SSL_write(SSL *ssl, const void *buf, int num): entry only. Without
 * SSL_MODE_ENABLE_PARTIAL_WRITE it writes everything or fails (and is
 * called again with the same bytes), so the entry has what the state
 * machine needs; the return would be a second hit per write. */
static __always_inline void tls_write(__u64 ssl, __u64 buf, __s64 num)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (num <= 0 || !pid_selected(id >> 32))
		return;
	tls_data(ssl, buf, (__u64)num, id >> 32, (__u32)id, 0, NULL);
}

SEC("uprobe")
int BPF_KPROBE(tls_write_enter, void *ssl, void *buf, int num)
{
	/* (tls_write's body, spelt out: see tls_call_exit) */
	__u64 id = bpf_get_current_pid_tgid();
	if (num <= 0 || !pid_selected(id >> 32))
		return 0;
	tls_data((__u64)ssl, (__u64)buf, (__u64)num, id >> 32, (__u32)id, 0, NULL);
	return 0;
}

/* int SSL_write_ex(SSL *ssl, const void *buf, size_t num, size_t *written) */
SEC("uprobe")
int BPF_KPROBE(tls_write_ex_enter, void *ssl, void *buf, __u64 num)
{
	/* (as tls_write_enter) */
	__u64 id = bpf_get_current_pid_tgid();
	if (num == 0 || !pid_selected(id >> 32))
		return 0;
	tls_data((__u64)ssl, (__u64)buf, num, id >> 32, (__u32)id, 0, NULL);
	return 0;
}

/* void SSL_free(SSL *ssl): the binding goes. */
static __always_inline void tls_freed(__u64 ssl)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!pid_selected(id >> 32))
		return;
	struct tls_key k = { .ssl = ssl, .tgid = id >> 32 };
	bpf_map_delete_elem(&tls_socks, &k);
}

SEC("uprobe")
int BPF_KPROBE(tls_free, void *ssl)
{
	tls_freed((__u64)ssl);
	return 0;
}

/* uprobe_multi links (Linux 6.6+) and uprobe sessions (6.13+): one program
 * on every function of a file, told apart by the link's cookie (TLSF_*),
 * one link a file (a process, with per-process links) instead of a perf
 * event per function. The entry of a call; 1 if its return is wanted (a
 * read or a handshake of a selected process: tls_enter stored its call). */
static __always_inline int tls_entry(struct pt_regs *ctx, __u64 fn)
{
	__u64 a = PT_REGS_PARM1(ctx), b = PT_REGS_PARM2(ctx), c = PT_REGS_PARM3(ctx), d = PT_REGS_PARM4(ctx);
	switch (fn) {
	case TLSF_READ:
	case TLSF_READ_EX:
	case TLSF_HANDSHAKE:
		if (!pid_selected(bpf_get_current_pid_tgid() >> 32))
			return 0;
		tls_enter(fn == TLSF_READ ? TLS_READ : fn == TLSF_READ_EX ? TLS_READ_EX : TLS_HANDSHAKE, a,
			  fn == TLSF_HANDSHAKE ? 0 : b, fn == TLSF_READ_EX ? d : 0);
		return 1;
	case TLSF_WRITE:
		tls_write(a, b, (int)c);
		return 0;
	case TLSF_WRITE_EX:
		tls_write(a, b, c > 0x7fffffff ? 0x7fffffff : (__s64)c);
		return 0;
	case TLSF_FREE:
		tls_freed(a);
		return 0;
	}
	return 0;
}

/* uprobe_multi (6.6-6.12): every function's entry. */
SEC("uprobe")
int tls_multi_enter(struct pt_regs *ctx)
{
	tls_entry(ctx, bpf_get_attach_cookie(ctx));
	return 0;
}

/* uprobe_multi, BPF_F_UPROBE_MULTI_RETURN: SSL_read's, SSL_read_ex's and
 * SSL_do_handshake's returns. */
SEC("uretprobe")
int tls_multi_exit(struct pt_regs *ctx)
{
	tls_return(PT_REGS_RC(ctx));
	return 0;
}

/* A uprobe session (6.13+): run at a function's entry, and at its return
 * only if the entry returned 0, so that the functions whose return says
 * nothing (SSL_write, SSL_free), and every call of a process not selected,
 * take one trap, not two. The return is told from the entry by where it
 * runs: at the entry the instruction pointer is the function's own
 * address (bpf_get_func_ip), at the return the caller's. */
SEC("uprobe")
int tls_session(struct pt_regs *ctx)
{
	if (PT_REGS_IP(ctx) != bpf_get_func_ip(ctx)) {
		tls_return(PT_REGS_RC(ctx));
		return 0;
	}
	return tls_entry(ctx, bpf_get_attach_cookie(ctx)) ? 0 : 1;
}

#include "go_tls.h"

#endif
