/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Every map, and the shapes of the kernel-only values they hold. Each
 * program object includes this file; the maps are weak, so `bpftool gen
 * object` merges the identical definitions into one map each.
 */
#ifndef RINGTAIL_MAPS_H
#define RINGTAIL_MAPS_H

#include "ringtail.h"

/* Bytes kept of the start of a request line that arrived alone. */
#define PREFIX_LEN 16

/* conn_state.h2 */
#define H2_NONE 0
#define H2_LIVE 1
#define H2_DEAD 2 /* framing lost: only the close is still reported */

/* Where an HTTP/2 connection's frames are, in one direction (h2.h). */
struct h2_dir {
	__u32 left;	/* payload bytes of the current frame still to come */
	__u16 want;	/* of those, bytes still to capture */
	__u16 skip;	/* bytes not framed still to skip: the client preface, a 101's head */
	__u8 hlen;	/* bytes of a frame header held in hdr (0 to 8: it straddled iovecs or syscalls) */
	__u8 hdr[8];
};

/* Per-connection state (conn.h; HTTP/1: http1_conn.h, HTTP/2: h2.h). */
struct conn_state {
	__u64 conn_id;
	__u64 start_ns;
	/* A client's final response read while no request was pending: when
	 * (the token its reader and its request's sender settle by, 0: none);
	 * and when its request left, if the socket says (http1_conn.h,
	 * answer_early), else 0 */
	__u64 early_ns;
	__u64 early_start_ns;
	__u64 parent_conn;
	__u32 parent_seq;
	__u32 seq;
	__u32 tgid;
	__u32 tid;
	__s32 fd;
	__u32 req_len;
	/* With join_ok: the TCP sequence number of the current server
	 * request's first byte (http1_conn.h, same-host joins) */
	__u32 join_seq;
	/* A server connection outside TLS: the socket's write_seq when the
	 * hooks last saw it (its request began, or a send of it was reported);
	 * and, with pend_len during a request, where the bytes held in pend
	 * began (http1_conn.h, late_request_start) */
	__u32 sent_seq;
	__u32 late_seq;
	/* With early_seqs: the socket's write_seq when the early response was
	 * read; and its status */
	__u32 early_seq;
	/* A stream connection (stream.h): bytes of each direction (IO_RECV,
	 * IO_SEND) in its records that the ring had no room for, not yet told
	 * to user space (PIECE_GAP pieces of its next record) */
	__u64 gap[2];
	__u16 early_status;
	__u16 cap_len;
	__u8 role;
	__u8 phase;
	__u8 flags;
	/* The start of a request line that arrived alone (Go's net/http reads
	 * one byte ahead between keep-alive requests): joined to the next read. */
	__u8 pend_len;
	/* 1: a TLS connection, fed plaintext by the TLS hooks (tls.h); the
	 * socket hooks leave its ciphertext alone */
	__u8 tls;
	__u8 h2; /* H2_* (h2.h): 0 = HTTP/1 */
	/* IOF_START (and H2F_UPGRADE) for the connection's next record: set
	 * where HTTP/2 or a stream begins (h2_start, h2_upgrade, stream.h),
	 * sent and cleared with that record */
	__u8 first;
	__u8 join_ok;
	/* HTTP/2 server: sends on which join_take_h2 looked its caller up */
	__u8 join_tries;
	/* 1: the current client request carries the traceparent in tp (propagate.h) */
	__u8 tp_set;
	/* 1: a stream connection (stream.h: a configured port's): its bytes
	 * go to user space as they are, no protocol machine here */
	__u8 stream;
	/* 1: early_seq is known (http1_conn.h, answer_early) */
	__u8 early_seqs;
	/* the trace id (16 bytes, W3C order) and span id (8, little-endian) of
	 * the traceparent the kernel wrote into the current client request */
	__u8 tp[24];
	/* (probe.carrier) the current request's ids as the kernel decided
	 * them: trace, span, parent, W3C byte order (carrier.h, EVF_KIDS) */
	__u8 kids[32];
	__u8 pend[PREFIX_LEN];
	/* HTTP/2 framing per direction (h2.h), by IO_RECV / IO_SEND */
	struct h2_dir h2d[2];
	/* Twice the capture length so that an append at any offset below
	 * CAPTURE_LEN of up to CAPTURE_LEN bytes is provably in bounds. */
	__u8 buf[CAPTURE_LEN * 2];
};

/* The server request a thread is serving: the last one it began, while
 * unanswered (conn_id 0: none), and how many it began and has not answered
 * (http1_conn.h: a client request is linked only when that is one). */
struct active_req {
	__u64 conn_id;
	__u32 seq;
	__u32 open;
	/* (probe.carrier) the trace id and span id, W3C byte order, of server
	 * request ids_conn's last request (carrier.h: the kernel decided them
	 * for a clear-text HTTP/1 request of the socket hooks) */
	__u8 ids[24];
	__u64 ids_conn;
};

/* A request as both ends of its TCP connection name it: the client's and
 * the server's address and port, and the TCP sequence number of its first
 * byte (IPv4-mapped IPv6 addresses in their IPv4 form). */
struct join_key {
	__u8 caddr[16];
	__u8 saddr[16];
	__u16 cport;
	__u16 sport;
	__u32 tcp_seq;
};

/* The client request a key names. */
struct join_val {
	__u64 conn_id;
	__u32 seq;
	__u32 _pad;
};

/* Loopback requests a server answered without finding their client
 * (join.h): a direct-mapped table (a slot by a hash of the key), so that
 * marking one costs a few stores, not an LRU insert on every request of an
 * untraced local client. */
#define JOIN_MARKS 4096
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, JOIN_MARKS);
	__type(key, __u32);
	__type(value, struct join_key);
} join_marks SEC(".maps") __weak;

/* Client requests recently sent, for the server on this host that answers
 * them (http1_conn.h). LRU: a request sent to another host is never looked
 * up and ages out. Weak: shared by the hook families of an object. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct join_key);
	__type(value, struct join_val);
} joins SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader */
} events SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* about 120 exec records (8.6 KiB each) */
} execs SEC(".maps") __weak;

/* Connection state (`conns`) and the server request of each thread
 * (`active`) are defined by conn_store.h: where they live depends on the hook
 * family. */

/* Selected processes, by tgid; the value is SEL_* (ringtail.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} sel_pids SEC(".maps") __weak;

/* Configured listening ports. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16);
	__type(value, __u8);
} sel_ports SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps") __weak;

/* The capture epoch: a random number the loader writes once when it loads
 * the programs, pinned with them, so that span and trace ids (derived from
 * it and the connection numbers) are the same whichever loader instance
 * reads an event. Programs never use it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} epoch SEC(".maps") __weak;

/* A zeroed conn_state: too big for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct conn_state);
} scratch SEC(".maps") __weak;

/* Where the walk of one syscall's bytes is (h2.h). */
struct h2_walk {
	__u64 pos;  /* within the current segment */
	__u64 seen; /* bytes of the finished segments */
	__u32 seg;
	__u32 off; /* bytes of pieces written */
	__u32 bad; /* framing lost */
	__u32 full; /* the record is full: the next frame begins the next */
	__u32 iov_seg; /* 1 + the segment iov_base/iov_len hold */
	__u32 _pad;
	__u64 iov_base;
	__u64 iov_len;
};

/* An h2 record being built (h2.h); the spill makes any piece written at
 * an offset below H2_DATA_LEN provably in bounds. */
struct h2_scratch {
	struct h2_event ev;
	__u8 spill[H2_DATA_LEN];
	struct h2_walk walk;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct h2_scratch);
} h2_scratch SEC(".maps") __weak;

/* A stream record being built (stream.h): a per-CPU value holds 32 KiB
 * at most; stream.h bounds every write by clamps, with no spill. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stream_event);
} stream_scratch SEC(".maps") __weak;

/* Adds `delta` to a per-CPU counter (a negative delta wraps: user space
 * sums the CPUs with wrapping arithmetic, so gauges come out right). */
static __always_inline void count_add(__u32 idx, __s64 delta)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += (__u64)delta;
}

static __always_inline void count(__u32 idx)
{
	count_add(idx, 1);
}

/* What the kernel tells the TLS attacher (struct tls_report, TLSR_*): its
 * own ring, which it alone reads; full, a report is lost and counted
 * (CNT_TLS_REPORT_LOST). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} tls_reports SEC(".maps") __weak;

/* A file reported to the attacher (an executable, a mapped libssl), and for
 * which process (0: file-wide links, once per file). */
struct tls_file_key {
	__u32 dev_major;
	__u32 dev_minor;
	__u64 ino;
	__u32 tgid;
	__u32 _pad;
};

/* The files reported already: each once (per process with per-process
 * links). An LRU: an evicted file is reported again, which costs the
 * attacher one look. The attacher deletes a file it could not look at (the
 * process gone first), so that the next process mapping it reports it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct tls_file_key);
	__type(value, __u8);
} tls_reported SEC(".maps") __weak;

#endif
