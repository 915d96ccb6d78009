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
 * a connection is left alone once the plaintext gave it state (st->tls); a
 * ClientHello or ServerHello before that makes no state (it is no request).
 *
 * Hits per request: Read entry and one return per read, Write entry per
 * write; a process not selected pays the traps and one lookup.
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

/* `n` bytes of plaintext at `buf` moved on Go connection `conn`. */
static __always_inline void go_data(__u64 conn, __u64 buf, __u64 n, __u64 id, int recv)
{
	__s32 fd = -1;
	struct sock *sk = go_conn_sock(conn, &fd);
	if (!sk) {
		count(CNT_GO_NO_SOCKET);
		return;
	}
	tls_sock_data(sk, fd, buf, n, id >> 32, (__u32)id, recv, NULL);
}

/* func (c *Conn) Write(b []byte) (int, error): c in RAX, b's pointer and
 * length in RBX and RCX. */
static __always_inline void go_write(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 n = ctx->cx;
	if (!n || !pid_selected(id >> 32))
		return;
	go_data(ctx->ax, ctx->bx, n, id, 0);
}

SEC("uprobe")
int go_tls_write_enter(struct pt_regs *ctx)
{
	go_write(ctx);
	return 0;
}

/* func (c *Conn) Read(b []byte) (int, error): entry. */
static __always_inline void go_read(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!pid_selected(id >> 32))
		return;
	tls_proc_seen(id >> 32);
	struct go_call_key k = { .g = ctx->r14, .tgid = id >> 32 };
	struct go_call c = { .conn = ctx->ax, .buf = ctx->bx };
	bpf_map_update_elem(&go_calls, &k, &c, BPF_ANY);
}

SEC("uprobe")
int go_tls_read_enter(struct pt_regs *ctx)
{
	go_read(ctx);
	return 0;
}

/* Read's return instructions: n in RAX. */
static __always_inline void go_read_ret(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct go_call_key k = { .g = ctx->r14, .tgid = id >> 32 };
	struct go_call *cp = bpf_map_lookup_elem(&go_calls, &k);
	if (!cp)
		return;
	struct go_call c = *cp;
	bpf_map_delete_elem(&go_calls, &k);
	__s64 n = (__s64)ctx->ax;
	if (n > 0)
		go_data(c.conn, c.buf, (__u64)n, id, 1);
}

SEC("uprobe")
int go_tls_read_exit(struct pt_regs *ctx)
{
	go_read_ret(ctx);
	return 0;
}

/* uprobe_multi (6.6+): one program on Read's entry and return instructions
 * and Write's entry of an executable, told apart by the cookie (GOF_*):
 * one link an executable (a process) instead of a perf event each. */
SEC("uprobe")
int go_tls_multi(struct pt_regs *ctx)
{
	switch (bpf_get_attach_cookie(ctx)) {
	case GOF_READ:
		go_read(ctx);
		break;
	case GOF_READ_RET:
		go_read_ret(ctx);
		break;
	case GOF_WRITE:
		go_write(ctx);
		break;
	}
	return 0;
}

#endif
