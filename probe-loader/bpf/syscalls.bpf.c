// SPDX-License-Identifier: GPL-2.0-only
/*
 * Syscall hooks: the capture backend for kernels without the socket
 * tracepoints (Linux 5.8-6.2; `probe.backend = "syscalls"`). Linked into its
 * own object with the process hooks (build.rs); the loader loads this object
 * or the socket one (sock.bpf.c), never both.
 *
 *  - tracepoint syscalls/sys_enter_{read,readv,recvfrom,recvmsg,write,
 *    writev,sendto,sendmsg} (two programs, by argument count): a process
 *    not selected leaves at once when selection is by pid or executable
 *    name; otherwise the fd is resolved to its socket (task->files->fdt->fd[fd], CO-RE); a non-socket
 *    fd (a file, a pipe) leaves there, after a few probe reads and no map
 *    operation; a TCP socket's call is remembered by thread (`sys_pending`).
 *  - tracepoint syscalls/sys_exit_* of the same calls (one program per
 *    direction, like the socket backend's): with
 *    the byte count, the remembered call goes to the same connection state
 *    machine as the socket backend's (capture.h, struct conn_io), user
 *    segments from the saved arguments (io.h).
 *  - tp_btf/inet_sock_set_state: as in sock.bpf.c (close, port discovery).
 *
 * sendfile moves no user memory: as with the socket backend, nothing to read
 * (its response head goes by write/writev first). Connection state lives in
 * a table of probe.max_connections here (conn_store.h, RINGTAIL_PORTABLE):
 * tracepoint programs may not use socket-local storage.
 *
 * This object defines the globals the loader sets (globals.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define RINGTAIL_DEFINE_GLOBALS
#define RINGTAIL_PORTABLE
#include "globals.h"
#include "maps.h"
#include "capture.h"
#include "io.h"
#include "tls.h"
#include "fdsock.h"

#define MSG_PEEK 2

/* The raw layout of syscalls/sys_{enter,exit}_* records (tracefs `format`):
 * 8 bytes of common fields, the syscall number, then 8-byte arguments. */
struct sys_enter_rec {
	__u64 common;
	__s32 nr;
	__u32 _pad;
	__u64 args[6];
};

struct sys_exit_rec {
	__u64 common;
	__s32 nr;
	__u32 _pad;
	__s64 ret;
};

/* A socket call in progress on a thread, between its enter and exit. */
struct pending_io {
	struct sock *sk; /* NULL once the exit has handled it */
	__u64 buf;	 /* the buffer, iovec array or msghdr */
	__u64 count;	 /* the iovec count (readv/writev) */
	__s32 fd;
	__s32 nr;
};

/* By thread id. A thread is in one syscall at a time; an entry is reused by
 * the thread's next socket call, and the LRU bounds threads gone. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct pending_io);
} sys_pending SEC(".maps");

/* A socket call begins: remember it when `fd` is a TCP socket. */
static __always_inline void sys_enter(__s32 nr, __u64 fd_arg, __u64 buf, __u64 count, __u64 flags)
{
	if (flags & MSG_PEEK)
		return;
	/* A process that cannot be traced leaves before the fd walk: when
	 * selection is by pid or executable only, one lookup decides. (A port
	 * selection needs the socket's port, so the walk comes first then.) */
	if (!select_all && !select_ports) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;
		if (!bpf_map_lookup_elem(&sel_pids, &tgid))
			return;
	}
	__s32 fd = (__s32)fd_arg;
	struct sock *sk = fd_tcp_sock(fd);
	if (!sk)
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pending_io p = { .sk = sk, .buf = buf, .count = count, .fd = fd, .nr = nr };
	bpf_map_update_elem(&sys_pending, &tid, &p, BPF_ANY);
}

/* Enters of the three-argument calls: read, readv, write, writev, recvmsg,
 * sendmsg. A program may read no further into the record than the
 * shortest tracepoint it is attached to has (the kernel refuses the
 * attachment otherwise), hence two enter programs. */
SEC("tracepoint")
int sys_enter_3(struct sys_enter_rec *ctx)
{
	__s32 nr = ctx->nr;
	__u64 a2 = ctx->args[2];
	sys_enter(nr, ctx->args[0], ctx->args[1], a2, nr == NR_RECVMSG ? a2 : 0);
	return 0;
}

/* Enters of recvfrom and sendto (six arguments; the flags are the fourth). */
SEC("tracepoint")
int sys_enter_6(struct sys_enter_rec *ctx)
{
	__s32 nr = ctx->nr;
	__u64 a3 = ctx->args[3];
	sys_enter(nr, ctx->args[0], ctx->args[1], ctx->args[2], nr == NR_RECVFROM ? a3 : 0);
	return 0;
}

/* The exit of a remembered socket call: its bytes to the state machine. */
static __always_inline void sys_exit_data(struct sys_exit_rec *ctx, int recv)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct pending_io *pp = bpf_map_lookup_elem(&sys_pending, &tid);
	if (!pp || !pp->sk)
		return;
	struct pending_io p = *pp;
	pp->sk = NULL;
	long ret = ctx->ret;
	if (ret <= 0 || p.nr != ctx->nr)
		return;
	struct conn_state *st = conn_get(p.sk);
	if (st && st->tls) {
		/* A TLS connection's ciphertext: (re)binds its SSL object when
		 * inside a TLS call (the binding may have been evicted). */
		struct tls_call *tc = tls_call_now(tid);
		if (tc)
			tls_bind(tc, p.sk, tgid, p.fd);
		return;
	}
	if (!conn_wanted(st, p.sk, tgid, recv))
		return;
	/* Inside a TLS call of this thread: ciphertext, which binds the call's
	 * SSL object to this socket (tls.h) and is not looked at. (A database
	 * connection has state from its first bytes in clear: PostgreSQL's
	 * SSLRequest, MySQL's greeting.) */
	struct tls_call *tc = st && !st->stream ? NULL : tls_call_now(tid);
	if (tc && tls_bind(tc, p.sk, tgid, p.fd))
		return;
	struct segs sg;
	if (syscall_segs(p.nr, p.buf, p.count, ret, &sg))
		return;
	struct conn_io io = { .sk = p.sk, .tgid = tgid, .tid = tid, .fd = p.fd };
	if (recv)
		conn_on_recv(st, &io, &sg);
	else
		conn_on_send(st, &io, &sg);
}

/* Exits of read, readv, recvfrom, recvmsg (one program per direction, as
 * in sock.bpf.c: each is verified with one half of the state machine). */
SEC("tracepoint")
int sys_exit_recv(struct sys_exit_rec *ctx)
{
	sys_exit_data(ctx, 1);
	return 0;
}

/* Exits of write, writev, sendto, sendmsg. */
SEC("tracepoint")
int sys_exit_send(struct sys_exit_rec *ctx)
{
	sys_exit_data(ctx, 0);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(sock_state, const struct sock *sk, const int oldstate, const int newstate)
{
	conn_sock_state((struct sock *)sk, newstate);
	return 0;
}
