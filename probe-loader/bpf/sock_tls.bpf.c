// SPDX-License-Identifier: GPL-2.0-only
/*
 * The TLS hooks of the socket backend's object (tls_hooks.h), with a TLS
 * connection's state in the connection table (conn_store.h, RINGTAIL_CONN_TABLE)
 * and the thread's server request in the task storage the socket hooks use.
 *
 *  - tp_btf/inet_sock_set_state (`tls_sock_state`): at TCP_CLOSE a TLS
 *    connection's record goes (the socket hooks' own program, sock_state,
 *    only sees socket-local storage).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define RINGTAIL_CONN_TABLE
#include "tls_hooks.h"

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tls_sock_state, const struct sock *sk, const int oldstate, const int newstate)
{
	if (newstate == TCP_CLOSE)
		conn_close((struct sock *)sk);
	return 0;
}
