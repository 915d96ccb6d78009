// SPDX-License-Identifier: GPL-2.0-only
/*
 * Socket hooks: one event per HTTP/1.x request, without kprobes, fentry or
 * syscall tracepoints (all BTF tracepoints: no tracefs needed).
 *
 *  - tp_btf/sock_recv_length and tp_btf/sock_send_length (Linux 6.3+). They
 *    fire once per completed socket receive or send, whatever the syscall
 *    (read, readv, recv, recvfrom, recvmsg, write, writev, send, sendto,
 *    sendmsg, sendfile), with the socket and the byte count. The syscall's
 *    own registers (io.h) give the fd and the user buffer. Only sockets
 *    reach them, so file and pipe I/O cost nothing; non-TCP sockets leave
 *    after two loads. The bytes go to the connection state machine (capture.h).
 *    A send or receive inside a TLS call of the thread (tls.h) binds the
 *    SSL object to the socket instead: the plaintext comes from the TLS
 *    uprobes (sock_tls.bpf.c).
 *  - tp_btf/inet_sock_set_state: listen (port-based discovery), close
 *    (connection state is deleted; it would go with the socket anyway) and
 *    connect (a traced process's connection is marked for propagation).
 *  - sockops and sk_msg (probe.propagate, propagate.h): the traceparent
 *    written into traced clients' requests; a read that begins with a
 *    final answer tells them an exchange may be over (prop_on_recv).
 *
 * This object defines the globals the loader sets (globals.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define RINGTAIL_DEFINE_GLOBALS
#include "globals.h"
#include "maps.h"
#include "capture.h"
#include "io.h"
#include "tls.h"

#define MSG_PEEK 2
#define IPPROTO_TCP 6
#define SOCK_STREAM 1

static __always_inline int is_tcp(struct sock *sk)
{
	return sk->sk_protocol == IPPROTO_TCP && sk->sk_type == SOCK_STREAM;
}

/* Both data hooks: find the connection and, when its bytes are wanted
 * (conn.h), the user segments, and feed the state machine (capture.h). */
static __always_inline void sock_data(struct sock *sk, int ret, int recv)
{
	struct conn_state *st = conn_get(sk);
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (st && st->tls) {
		/* A TLS connection's ciphertext (its handshake was seen,
		 * tls_conn_mark): binds its SSL object when inside a TLS call
		 * (one whose library was attached after the handshake). */
		struct tls_call *tc = tls_call_now(tid);
		if (tc)
			tls_bind(tc, sk, tgid, syscall_fd());
		return;
	}
	if (!conn_wanted(st, sk, tgid, recv))
		return;
	/* Inside a TLS call of this thread: ciphertext, which binds the call's
	 * SSL object to this socket (tls.h) and is not looked at. (A database
	 * connection has state from its first bytes in clear: PostgreSQL's
	 * SSLRequest, MySQL's greeting.) */
	struct tls_call *tc = st && !st->stream ? NULL : tls_call_now(tid);
	if (tc && tls_bind(tc, sk, tgid, syscall_fd()))
		return;
	struct segs sg;
	__s32 fd = -1;
	if (user_segs(ret, &fd, &sg))
		return;
	struct conn_io io = { .sk = sk, .tgid = tgid, .tid = tid, .fd = fd };
	if (recv)
		conn_on_recv(st, &io, &sg);
	else
		conn_on_send(st, &io, &sg);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv, struct sock *sk, int ret, int flags)
{
	if (ret > 0 && !(flags & MSG_PEEK) && is_tcp(sk)) {
		sock_data(sk, ret, 1);
		prop_on_recv(sk, ret);
		carrier_on_recv(sk);
	}
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send, struct sock *sk, int ret, int flags)
{
	if (!is_tcp(sk))
		return 0;
	if (ret > 0)
		sock_data(sk, ret, 0);
	prop_settle(sk);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(sock_state, const struct sock *sk, const int oldstate, const int newstate)
{
	conn_sock_state((struct sock *)sk, newstate);
	prop_mark((struct sock *)sk, newstate);
	carrier_mark((struct sock *)sk, newstate);
	return 0;
}
