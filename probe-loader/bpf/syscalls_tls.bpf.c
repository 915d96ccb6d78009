// SPDX-License-Identifier: GPL-2.0-only
/*
 * The TLS hooks of the syscall backend's object (tls_hooks.h): state as the
 * syscall hooks keep it (conn_store.h, RINGTAIL_PORTABLE), in the same connection
 * table, where a TLS connection's record is marked so the syscall hooks
 * leave its ciphertext alone; sock_state deletes it at TCP_CLOSE.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define RINGTAIL_PORTABLE
#include "tls_hooks.h"
