/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The kernel contract: every constant, flag and struct layout shared by the
 * kernel programs (*.bpf.c) and the loader is written here, and only here.
 * build.rs generates the Rust side: every `#define NAME <integer expression>`
 * below becomes a typed `pub const` (evaluated by the C compiler), and the
 * structs' sizes and offsets are checked against src/kernel.rs's mirrors.
 * Kernel-internal constants live with the code that uses them.
 */
#ifndef RINGTAIL_H
#define RINGTAIL_H

/* Request bytes captured per request (request line + headers, then body).
 * A power of two: the kernel masks offsets with CAPTURE_LEN - 1. */
#define CAPTURE_LEN 512
/* Bytes of the executable path carried by an exec event. */
#define EXEC_PATH_LEN 128
#define COMM_LEN 16

/* http_event.family */
#define FAMILY_INET 2
#define FAMILY_INET6 10

/* event.kind */
#define EV_HTTP 1

/* event.role and conn_state.role */
#define ROLE_SERVER 1
#define ROLE_CLIENT 2
/* a connection that switched protocol (101, CONNECT tunnel): never parsed again */
#define ROLE_OPAQUE 3

/* event.flags */
#define EVF_TRUNCATED 0x01 /* more request bytes arrived than were captured */
#define EVF_ORPHAN 0x02    /* a response with no captured request: pipelining */
#define EVF_PARENT 0x04    /* parent_conn/parent_seq name the enclosing server request */

/* Why a process is selected (the `sel_pids` value). SEL_EXPLICIT (a
 * configured pid, a listener on a configured port, or a child of one)
 * survives exec; SEL_EXE (the executable name matched) is dropped at exec,
 * and the loader selects the process again if the new executable matches
 * too. Children inherit the value. */
#define SEL_EXPLICIT 1
#define SEL_EXE 2

/* Per-CPU counters (index into the `counters` map). */
#define CNT_EVENTS 0         /* http events submitted to the ring */
#define CNT_RING_FULL 1      /* ring buffer reserve failures: events lost */
#define CNT_TRUNCATED 2      /* requests larger than CAPTURE_LEN */
#define CNT_ABORTED 3        /* connections closed mid-request: no span */
#define CNT_STATE_FAILED 4   /* connection state could not be allocated: request not tracked */
#define CNT_ORPHAN 5         /* responses without a tracked request (pipelining) */
#define CNT_EXEC 6           /* exec events submitted */
#define CNT_EXEC_LOST 7      /* exec ring full */
#define CNT_UPGRADED 8       /* connections that left HTTP/1 (101, CONNECT) */
#define CNT_WAKEUPS 9        /* forced ring-buffer wakeups */
#define CNT_UNRECOGNIZED 10  /* status lines sent on a connection where no request was recognised */
#define CNT_CONNS 11         /* connection records alive: +1 created, -1 deleted (a gauge) */
#define CNT_MAX 12

struct http_event {
	__u8 kind;
	__u8 role;
	__u8 flags;
	__u8 family; /* FAMILY_INET or FAMILY_INET6 */
	__u16 status;
	__u16 cap_len;
	__u32 tgid;
	__u32 tid;
	__s32 fd; /* -1 when the connection was accepted before ringtail started */
	__u32 req_len; /* request bytes seen before the response began */
	__u64 conn_id; /* per-boot connection number, never a kernel address */
	__u64 start_ns; /* CLOCK_MONOTONIC */
	__u64 end_ns;
	__u64 proc_start_ns; /* start_boottime of the process: pid-reuse guard */
	__u64 parent_conn;
	__u32 parent_seq;
	__u32 seq; /* request number on this connection, from 1 */
	__u16 lport;
	__u16 rport;
	__u32 _pad;
	__u8 laddr[16];
	__u8 raddr[16];
	char comm[COMM_LEN];
	__u8 buf[CAPTURE_LEN];
};

struct exec_event {
	__u32 tgid;
	__u32 _pad;
	__u64 proc_start_ns;
	char path[EXEC_PATH_LEN];
};

#endif
