// SPDX-License-Identifier: GPL-2.0-only
/*
 * ringtail kernel side: one event per HTTP/1.x request, without kprobes,
 * fentry or syscall tracepoints.
 *
 * Where it hooks, and why there (all BTF tracepoints: no tracefs needed):
 *  - tp_btf/sock_recv_length and tp_btf/sock_send_length (Linux 6.3+). They
 *    fire once per completed socket receive or send, whatever the syscall
 *    (read, readv, recv, recvfrom, recvmsg, write, writev, send, sendto,
 *    sendmsg, sendfile), with the socket and the byte count. The syscall's
 *    own registers (bpf_task_pt_regs) give the fd and the user buffer. Only
 *    sockets reach them, so file and pipe I/O cost nothing; non-TCP sockets
 *    leave after two loads.
 *  - tp_btf/inet_sock_set_state: listen (port-based discovery) and close
 *    (connection state is freed, so the map cannot leak).
 *  - tp_btf/sched_process_{fork,exit,exec}: selected processes pass their
 *    selection to children, leave the map when they exit, and new
 *    executables are offered to the loader for exe-name matching.
 *
 * The request state machine lives in `conns` (keyed by struct sock *). A
 * server request starts when received bytes begin with a request line and
 * ends when the process sends a status line; a client request is the mirror
 * image. The event is submitted when the response begins (1xx interim
 * responses are skipped), carrying the first CAPTURE_LEN request bytes; user
 * space parses them. Parsing in the kernel stops at "is this a request line"
 * and "what is the status code", which keeps every program short.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ringtail.h"

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2
#define IPPROTO_TCP 6
#define SOCK_STREAM 1
#define PHASE_IDLE 0
#define PHASE_REQUEST 1
#define PREFIX_LEN 16
#define RINGBUF_HDR 8
/* conn_state.flags bit that never reaches an event */
#define STF_CONNECT 0x80
#define EVENT_RECORD ((sizeof(struct http_event) + RINGBUF_HDR + 7) & ~7ULL)

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load (aya override_global). */
/* Force a wakeup each time the unread events cross a multiple of this; 0 = kernel default. */
const volatile __u64 wakeup_len = 0;
/* 1 = trace every process except ringtail's own. */
const volatile __u8 select_all = 1;
/* 1 = report exec events (exe-name discovery is configured). */
const volatile __u8 watch_exec = 0;

/* Connection numbers: unique per loaded program, never kernel addresses. */
__u64 next_conn_id = 0;

struct conn_state {
	__u64 conn_id;
	__u64 start_ns;
	__u64 parent_conn;
	__u32 parent_seq;
	__u32 seq;
	__u32 tgid;
	__u32 tid;
	__s32 fd;
	__u32 req_len;
	__u16 cap_len;
	__u8 role;
	__u8 phase;
	__u8 flags;
	/* The start of a request line that arrived alone (Go's net/http reads
	 * one byte ahead between keep-alive requests): joined to the next read. */
	__u8 pend_len;
	__u8 _pad[6];
	__u8 pend[PREFIX_LEN];
	/* Twice the capture length so that an append at any offset below
	 * CAPTURE_LEN of up to CAPTURE_LEN bytes is provably in bounds. */
	__u8 buf[CAPTURE_LEN * 2];
};

struct active_req {
	__u64 conn_id;
	__u32 seq;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} execs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); /* resized by the loader */
	__type(key, __u64);
	__type(value, struct conn_state);
} conns SEC(".maps");

/* The server request a thread is serving, so that its outgoing client
 * requests become children. Task-local storage: O(1), no hashing, and freed
 * with the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct active_req);
} active SEC(".maps");

/* Selected processes. The value says why: SEL_EXPLICIT (a configured pid,
 * a listener on a configured port, or a child of one) survives exec;
 * SEL_EXE (the executable name matched) is dropped at exec, and the loader
 * selects the process again if the new executable matches too. Children
 * inherit the value. */
#define SEL_EXPLICIT 1
#define SEL_EXE 2
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} sel_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16);
	__type(value, __u8);
} sel_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* A zeroed conn_state: too big for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct conn_state);
} scratch SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

/* ringtail never traces itself: every ringtail binary's name starts so. */
static __always_inline int is_self(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	/* direct BTF loads: cheaper than a helper call */
	const char *c = t->group_leader->comm;
	return c[0] == 'r' && c[1] == 'i' && c[2] == 'n' && c[3] == 'g' && c[4] == 't' &&
	       c[5] == 'a' && c[6] == 'i' && c[7] == 'l';
}

static __always_inline int pid_selected(__u32 tgid)
{
	if (select_all)
		return !is_self();
	return bpf_map_lookup_elem(&sel_pids, &tgid) != NULL && !is_self();
}

static __always_inline int server_selected(__u32 tgid, __u16 lport)
{
	if (!select_all && bpf_map_lookup_elem(&sel_ports, &lport) != NULL)
		return !is_self();
	return pid_selected(tgid);
}

/* METHOD SP TARGET, METHOD 3..10 capitals. HTTP/2's "PRI *" is not HTTP/1. */
static __always_inline int is_request(const __u8 *p, __u32 n)
{
	int len = -1, bad = 0;
#pragma unroll
	for (int i = 0; i < 11; i++) {
		__u8 c = p[i];
		if (len < 0) {
			if (c == ' ')
				len = i;
			else if (c < 'A' || c > 'Z')
				bad = 1;
		}
	}
	if (bad || len < 3 || (__u32)len + 1 >= n)
		return 0;
	if (len == 3 && p[0] == 'P' && p[1] == 'R' && p[2] == 'I')
		return 0;
	__u8 t = p[(len + 1) & (PREFIX_LEN - 1)];
	if (t == '/' || t == '*' || t == 'h')
		return 1;
	/* CONNECT host:port */
	return len == 7 && p[0] == 'C' && p[1] == 'O' && p[2] == 'N';
}

/* "HTTP/1.x NNN": returns NNN, or 0. */
static __always_inline __u16 response_status(const __u8 *p, __u32 n)
{
	if (n < 12)
		return 0;
	if (p[0] != 'H' || p[1] != 'T' || p[2] != 'T' || p[3] != 'P' || p[4] != '/' ||
	    p[5] != '1' || p[6] != '.' || p[8] != ' ')
		return 0;
	__u8 a = p[9] - '0', b = p[10] - '0', c = p[11] - '0';
	if (a < 1 || a > 5 || b > 9 || c > 9)
		return 0;
	return a * 100 + b * 10 + c;
}

/* x86_64 syscall numbers of the calls whose buffers we can find. */
#define NR_READ 0
#define NR_WRITE 1
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47

/* Segments of user memory a syscall moved. With vectored I/O only the
 * first MAX_SEGS iovecs are looked at: request heads and status lines come
 * first, and the capture is bounded anyway. */
#define MAX_SEGS 4

struct segs {
	const __u8 *base[MAX_SEGS];
	__u64 len[MAX_SEGS];
	__u32 n;
	__u32 total;
};

/* The user buffers a socket send/receive of `len` bytes used, from the
 * syscall's registers. */
static __always_inline int user_segs(long len, __s32 *fd, struct segs *sg)
{
	/* bpf_task_pt_regs gives a BTF pointer: plain loads, no helper calls */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	long nr = regs->orig_ax;
	__u64 arg = regs->si;
	__u64 left = len;
	sg->n = 0;
	sg->total = len > 0xffffffff ? 0xffffffff : len;
	*fd = regs->di;
	if (nr == NR_READ || nr == NR_RECVFROM || nr == NR_WRITE || nr == NR_SENDTO) {
		sg->base[0] = (const __u8 *)arg;
		sg->len[0] = left;
		sg->n = 1;
		return 0;
	}
	const struct iovec *iovp;
	__u64 iovcnt;
	if (nr == NR_READV || nr == NR_WRITEV) {
		iovp = (const struct iovec *)arg;
		iovcnt = regs->dx;
	} else if (nr == NR_RECVMSG || nr == NR_SENDMSG) {
		struct user_msghdr m;
		if (bpf_probe_read_user(&m, sizeof(m), (const void *)arg))
			return -1;
		iovp = m.msg_iov;
		iovcnt = m.msg_iovlen;
	} else {
		return -1; /* sendfile, splice, io_uring: no user buffer to read */
	}
#pragma unroll
	for (int i = 0; i < MAX_SEGS; i++) {
		if (i >= iovcnt || left == 0)
			break;
		struct iovec v;
		if (bpf_probe_read_user(&v, sizeof(v), &iovp[i]))
			break;
		__u64 l = v.iov_len < left ? v.iov_len : left;
		sg->base[i] = v.iov_base;
		sg->len[i] = l;
		sg->n = i + 1;
		left -= l;
	}
	return sg->n ? 0 : -1;
}

/* The first bytes across the segments, into p[PREFIX_LEN * 2] from
 * offset `base`, until PREFIX_LEN bytes are there. Returns the total. */
static __always_inline __u32 read_prefix_at(__u8 *p, __u64 base, const struct segs *sg)
{
	__u64 got = base;
#pragma unroll
	for (int i = 0; i < MAX_SEGS; i++) {
		if (i >= sg->n || got >= PREFIX_LEN)
			break;
		__u64 want = PREFIX_LEN - got;
		__u64 l = sg->len[i] < want ? sg->len[i] : want;
		int err;
		if (l == PREFIX_LEN) {
			err = bpf_probe_read_user(p, PREFIX_LEN, sg->base[i]);
		} else {
			/* got < PREFIX_LEN and l < PREFIX_LEN: in bounds of 2 * PREFIX_LEN */
			barrier_var(l);
			barrier_var(got);
			err = bpf_probe_read_user(&p[got & (PREFIX_LEN - 1)], l & (PREFIX_LEN - 1), sg->base[i]);
		}
		if (err)
			break;
		got += l;
	}
	return got;
}

static __always_inline __u32 read_prefix(__u8 *p, const struct segs *sg)
{
	return read_prefix_at(p, 0, sg);
}

/* Could these bytes be the start of a request line ("G", "GET", "GET /x")? */
static __always_inline int request_prefix(const __u8 *p, __u32 n)
{
	int space = 0, ok = n > 0 && n < PREFIX_LEN;
#pragma unroll
	for (int i = 0; i < PREFIX_LEN; i++) {
		if (i < n && !space) {
			if (p[i] == ' ')
				space = i >= 3;
			else if (p[i] < 'A' || p[i] > 'Z')
				ok = 0;
		}
	}
	return ok;
}

/* Append request bytes to the capture buffer; remember what did not fit. */
static __always_inline void capture_one(struct conn_state *st, const __u8 *src, __u64 avail)
{
	__u64 off = st->cap_len;
	if (off >= CAPTURE_LEN) {
		st->flags |= EVF_TRUNCATED;
		return;
	}
	__u64 n = CAPTURE_LEN - off;
	if (n > avail)
		n = avail;
	else if (n < avail)
		st->flags |= EVF_TRUNCATED;
	int err;
	if (n == CAPTURE_LEN) {
		/* only when off == 0: a constant size the verifier needs no proof for */
		err = bpf_probe_read_user(st->buf, CAPTURE_LEN, src);
	} else {
		/* off < CAPTURE_LEN and n < CAPTURE_LEN: the masks make both
		 * provable, and the barriers keep clang from dropping them */
		barrier_var(n);
		barrier_var(off);
		err = bpf_probe_read_user(&st->buf[off & (CAPTURE_LEN - 1)],
					  n & (CAPTURE_LEN - 1), src);
	}
	if (!err)
		st->cap_len = off + n;
}

static __always_inline void capture(struct conn_state *st, const struct segs *sg)
{
	st->req_len += sg->total;
#pragma unroll
	for (int i = 0; i < MAX_SEGS; i++) {
		if (i >= sg->n)
			break;
		capture_one(st, sg->base[i], sg->len[i]);
	}
}

static __always_inline struct conn_state *new_conn(__u64 key, __u8 role, __u32 tgid, __u32 tid,
						  __s32 fd)
{
	__u32 zero = 0;
	struct conn_state *init = bpf_map_lookup_elem(&scratch, &zero);
	if (!init)
		return NULL;
	init->conn_id = __sync_fetch_and_add(&next_conn_id, 1) + 1;
	init->role = role;
	init->tgid = tgid;
	init->tid = tid;
	init->fd = fd;
	if (bpf_map_update_elem(&conns, &key, init, BPF_NOEXIST)) {
		count(CNT_CONN_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&conns, &key);
}

/* Marks a request begun whose bytes are already in st->buf. */
static __always_inline void request_started(struct conn_state *st, __u32 tid, __u64 now)
{
	st->seq += 1;
	st->phase = PHASE_REQUEST;
	st->start_ns = now;
	st->tid = tid;
	st->parent_conn = 0;
	st->parent_seq = 0;
	st->pend_len = 0;
	const __u8 *p = st->buf;
	if (p[0] == 'C' && p[1] == 'O' && p[2] == 'N' && p[3] == 'N')
		st->flags |= STF_CONNECT;
}

static __always_inline void begin_request(struct conn_state *st, __u32 tid, __u64 now,
					  const struct segs *sg, __u32 pend)
{
	st->cap_len = 0;
	st->req_len = 0;
	st->flags = 0;
	if (pend) {
		/* the bytes of the request line that came in an earlier read */
		__builtin_memcpy(st->buf, st->pend, PREFIX_LEN);
		st->cap_len = pend & (PREFIX_LEN - 1);
		st->req_len = st->cap_len;
	}
	capture(st, sg);
	request_started(st, tid, now);
}

static __always_inline __u64 wakeup_flags(void)
{
	if (wakeup_len == 0)
		return 0;
	__u64 thr = wakeup_len * EVENT_RECORD;
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	/* Wake only when the unread data crosses a multiple of the threshold:
	 * "at least the threshold" would wake on every event while the reader
	 * lags. The loader's flush timer drains what stays below it. */
	if (avail >= EVENT_RECORD && avail / thr != (avail - EVENT_RECORD) / thr) {
		count(CNT_WAKEUPS);
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void emit(struct conn_state *st, struct sock *sk, __u16 status,
				 __u8 extra_flags, __u64 now)
{
	struct http_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_RING_FULL);
		return;
	}
	struct task_struct *t = bpf_get_current_task_btf();
	ev->kind = EV_HTTP;
	ev->role = st->role;
	ev->flags = (st->flags & ~STF_CONNECT) | extra_flags;
	ev->status = status;
	ev->tgid = st->tgid;
	ev->tid = st->tid;
	ev->fd = st->fd;
	ev->req_len = st->req_len;
	ev->conn_id = st->conn_id;
	ev->start_ns = st->start_ns;
	ev->end_ns = now;
	ev->proc_start_ns = t->group_leader->start_boottime;
	ev->parent_conn = st->parent_conn;
	ev->parent_seq = st->parent_seq;
	ev->seq = st->seq;
	ev->_pad = 0;
	__u16 family = sk->__sk_common.skc_family;
	ev->family = family;
	ev->lport = sk->__sk_common.skc_num;
	ev->rport = bpf_ntohs(sk->__sk_common.skc_dport);
	__builtin_memset(ev->laddr, 0, sizeof(ev->laddr));
	__builtin_memset(ev->raddr, 0, sizeof(ev->raddr));
	/* direct BTF loads, no helper calls */
	if (family == AF_INET6) {
		__u32 *l = (__u32 *)ev->laddr, *r = (__u32 *)ev->raddr;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			l[i] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[i];
			r[i] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[i];
		}
	} else {
		*(__u32 *)ev->laddr = sk->__sk_common.skc_rcv_saddr;
		*(__u32 *)ev->raddr = sk->__sk_common.skc_daddr;
	}
	const char *comm = t->group_leader->comm;
#pragma unroll
	for (int i = 0; i < COMM_LEN; i++)
		ev->comm[i] = comm[i];
	__u32 n = extra_flags & EVF_ORPHAN ? 0 : st->cap_len;
	if (n > CAPTURE_LEN)
		n = CAPTURE_LEN;
	ev->cap_len = n;
	/* map value to ring record: a fixed-size copy is cheaper here than a
	 * helper call of the exact size */
	if (n)
		__builtin_memcpy(ev->buf, st->buf, CAPTURE_LEN);
	count(CNT_EVENTS);
	if (ev->flags & EVF_TRUNCATED)
		count(CNT_TRUNCATED);
	bpf_ringbuf_submit(ev, wakeup_flags());
}

/* A response (or interim response) went by. */
static __always_inline void on_response(struct conn_state *st, struct sock *sk, __u16 status,
					__u64 now)
{
	if (status >= 100 && status < 200 && status != 101)
		return; /* interim: the final response is still to come */
	if (st->phase != PHASE_REQUEST) {
		count(CNT_ORPHAN);
		emit(st, sk, status, EVF_ORPHAN, now);
		return;
	}
	emit(st, sk, status, 0, now);
	st->phase = PHASE_IDLE;
	if (status == 101 || ((st->flags & STF_CONNECT) && status < 300)) {
		st->role = ROLE_OPAQUE;
		count(CNT_UPGRADED);
	}
}

static __always_inline int is_tcp(struct sock *sk)
{
	return sk->sk_protocol == IPPROTO_TCP && sk->sk_type == SOCK_STREAM;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv, struct sock *sk, int ret, int flags)
{
	if (ret <= 0 || (flags & MSG_PEEK) || !is_tcp(sk))
		return 0;
	__u64 key = (__u64)sk;
	struct conn_state *st = bpf_map_lookup_elem(&conns, &key);
	if (st && st->role == ROLE_OPAQUE)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (!st && !server_selected(tgid, sk->__sk_common.skc_num))
		return 0;

	struct segs sg;
	__s32 fd = -1;
	if (user_segs(ret, &fd, &sg))
		return 0;
	__u64 now = bpf_ktime_get_ns();

	if (st && (st->role == ROLE_CLIENT || st->phase == PHASE_REQUEST)) {
		if (st->role == ROLE_SERVER) {
			capture(st, &sg); /* more of the request */
			return 0;
		}
		if (st->phase != PHASE_REQUEST)
			return 0;
		__u8 p[PREFIX_LEN * 2] = {};
		__u32 n = read_prefix(p, &sg);
		__u16 status = response_status(p, n);
		if (status)
			on_response(st, sk, status, now);
		return 0;
	}

	if (st && st->role == ROLE_SERVER && !st->pend_len) {
		/* Idle keep-alive connection: capture straight into its buffer and
		 * look there (one copy from user memory instead of two). */
		st->cap_len = 0;
		st->req_len = 0;
		st->flags = 0;
		capture(st, &sg);
		__u32 n = st->cap_len < PREFIX_LEN ? st->cap_len : PREFIX_LEN;
		if (!is_request(st->buf, n)) {
			st->pend_len = request_prefix(st->buf, n) ? n : 0;
			if (st->pend_len)
				__builtin_memcpy(st->pend, st->buf, PREFIX_LEN);
			st->cap_len = 0;
			return 0;
		}
		request_started(st, tid, now);
		goto active;
	}

	/* An unknown connection, or one holding the start of a request line:
	 * does a request begin? */
	__u8 p[PREFIX_LEN * 2] = {};
	__u32 pend = 0;
	if (st && st->pend_len) {
		__builtin_memcpy(p, st->pend, PREFIX_LEN);
		pend = st->pend_len & (PREFIX_LEN - 1);
	}
	__u32 n = read_prefix_at(p, pend, &sg);
	if (!is_request(p, n)) {
		if (st) {
			/* keep what may be the start of the next request line */
			st->pend_len = request_prefix(p, n) ? n : 0;
			if (st->pend_len)
				__builtin_memcpy(st->pend, p, PREFIX_LEN);
		}
		return 0;
	}
	if (!st)
		st = new_conn(key, ROLE_SERVER, tgid, tid, fd);
	if (!st)
		return 0;
	begin_request(st, tid, now, &sg, pend);
active:;
	struct active_req *a = bpf_task_storage_get(&active, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (a) {
		a->conn_id = st->conn_id;
		a->seq = st->seq;
	}
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send, struct sock *sk, int ret, int flags)
{
	if (ret <= 0 || !is_tcp(sk))
		return 0;
	__u64 key = (__u64)sk;
	struct conn_state *st = bpf_map_lookup_elem(&conns, &key);
	if (st && st->role == ROLE_OPAQUE)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (!st && !pid_selected(tgid))
		return 0;

	struct segs sg;
	__s32 fd = -1;
	if (user_segs(ret, &fd, &sg))
		return 0;

	if (st && st->role == ROLE_SERVER) {
		__u8 p[PREFIX_LEN * 2] = {};
		__u32 n = read_prefix(p, &sg);
		__u16 status = response_status(p, n);
		if (!status)
			return 0;
		on_response(st, sk, status, bpf_ktime_get_ns());
		if (st->phase == PHASE_IDLE) {
			struct active_req *a = bpf_task_storage_get(&active, bpf_get_current_task_btf(), 0, 0);
			if (a && a->conn_id == st->conn_id)
				a->conn_id = 0;
		}
		return 0;
	}
	if (st && st->phase == PHASE_REQUEST) {
		capture(st, &sg); /* request body or the rest of the head */
		return 0;
	}

	/* Idle client connection or an unknown one: does a request begin? */
	__u8 p[PREFIX_LEN * 2] = {};
	__u32 n = read_prefix(p, &sg);
	if (!is_request(p, n))
		return 0;
	if (!st)
		st = new_conn(key, ROLE_CLIENT, tgid, tid, fd);
	if (!st)
		return 0;
	begin_request(st, tid, bpf_ktime_get_ns(), &sg, 0);
	struct active_req *a = bpf_task_storage_get(&active, bpf_get_current_task_btf(), 0, 0);
	if (a && a->conn_id) {
		st->parent_conn = a->conn_id;
		st->parent_seq = a->seq;
		st->flags |= EVF_PARENT;
	}
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(sock_state, const struct sock *sk, const int oldstate, const int newstate)
{
	if (newstate == TCP_CLOSE) {
		__u64 key = (__u64)sk;
		struct conn_state *st = bpf_map_lookup_elem(&conns, &key);
		if (st) {
			if (st->phase == PHASE_REQUEST)
				count(CNT_ABORTED);
			bpf_map_delete_elem(&conns, &key);
		}
		return 0;
	}
	if (newstate == TCP_LISTEN && !select_all) {
		__u16 port = sk->__sk_common.skc_num;
		if (bpf_map_lookup_elem(&sel_ports, &port)) {
			__u32 tgid = bpf_get_current_pid_tgid() >> 32;
			__u8 why = SEL_EXPLICIT;
			bpf_map_update_elem(&sel_pids, &tgid, &why, BPF_ANY);
		}
	}
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
	if (select_all || child->pid != child->tgid)
		return 0;
	__u32 ptgid = parent->tgid;
	__u8 *why = bpf_map_lookup_elem(&sel_pids, &ptgid);
	if (!why)
		return 0;
	__u32 ctgid = child->tgid;
	__u8 inherited = *why;
	bpf_map_update_elem(&sel_pids, &ctgid, &inherited, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *p, bool group_dead)
{
	if (select_all || !group_dead)
		return 0;
	__u32 tgid = p->tgid;
	bpf_map_delete_elem(&sel_pids, &tgid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (!watch_exec)
		return 0;
	__u32 tgid = p->tgid;
	__u8 *why = bpf_map_lookup_elem(&sel_pids, &tgid);
	if (why && *why == SEL_EXE)
		bpf_map_delete_elem(&sel_pids, &tgid); /* the loader decides again */
	struct exec_event *ev = bpf_ringbuf_reserve(&execs, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_EXEC_LOST);
		return 0;
	}
	ev->tgid = p->tgid;
	ev->_pad = 0;
	ev->proc_start_ns = p->group_leader->start_boottime;
	bpf_probe_read_kernel_str(ev->path, sizeof(ev->path), bprm->filename);
	count(CNT_EXEC);
	/* Rare and urgent: the process may listen any moment now. */
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
	return 0;
}
