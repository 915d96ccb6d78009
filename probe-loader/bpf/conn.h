/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The per-connection HTTP/1 state machine, fed by any hook family.
 *
 * State is reached only through conn_get(), conn_new() and conn_del()
 * below, which keep it where the hook family's program type allows (socket-
 * local storage, or a table: see "Where state lives"). A server
 * request starts when received bytes begin with a request line and ends
 * when the process sends a status line; a client request is the mirror
 * image. The event is submitted when the response begins (1xx
 * interim responses are skipped), carrying the first CAPTURE_LEN request
 * bytes. A hook finds the connection, decides whether the process is
 * traced, finds the user segments of the bytes moved, and calls
 * conn_on_recv() or conn_on_send(); on close it calls conn_close().
 */
#ifndef RINGTAIL_CONN_H
#define RINGTAIL_CONN_H

#include "globals.h"
#include "http1.h"
#include "maps.h"
#include "segs.h"
#include "process.h"
#include "tls.h"

#define PHASE_IDLE 0
#define PHASE_REQUEST 1
#define RINGBUF_HDR 8
/* conn_state.flags bit that never reaches an event */
#define STF_CONNECT 0x80
#define EVENT_RECORD ((sizeof(struct http_event) + RINGBUF_HDR + 7) & ~7ULL)
/* conn_state.conn_id while its maker fills the record in (socket storage) */
#define CONN_ID_CLAIMED (~0ULL)
/* low bits of a PORTABLE connection number: the CPU (CONFIG_NR_CPUS <= 8192) */
#define CONN_ID_CPU_BITS 13

/* One send or receive on a connection, as a hook saw it. */
struct conn_io {
	struct sock *sk; /* the connection; addresses and ports for the event */
	__u32 tgid;
	__u32 tid;
	__s32 fd; /* -1 when unknown */
	__u8 tls; /* the bytes are a TLS connection's plaintext (tls.h) */
};

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
	/* saturating: a body of 4 GiB or more must not wrap to a small size */
	__u32 sum = st->req_len + sg->total;
	st->req_len = sum < st->req_len ? 0xffffffff : sum;
#pragma unroll
	for (int i = 0; i < MAX_SEGS; i++) {
		if (i >= sg->n)
			break;
		capture_one(st, sg->base[i], sg->len[i]);
	}
}

/*
 * Where state lives: the only code that knows. Chosen by the hook family's
 * compilation unit before it includes this file (RINGTAIL_CONN_TABLE: the
 * connection table alone, for the TLS hooks of the socket backend, tls.h):
 *
 *  - default (tp_btf hooks, Linux 6.3+): socket-local storage
 *    (BPF_MAP_TYPE_SK_STORAGE, which tp_btf programs may use) with no global
 *    capacity, the thread's server request in task-local storage, and the
 *    socket and task read by direct BTF loads;
 *  - RINGTAIL_PORTABLE (syscall tracepoints, Linux 5.8+: plain tracepoint
 *    programs may not use socket or task storage, and 5.8-5.10 have neither
 *    for tracing): a hash keyed by the socket's address, sized by
 *    probe.max_connections (the loader sets it), the thread's server request
 *    in an LRU hash by thread id, and the socket and task read with CO-RE
 *    probe reads (their pointers come from memory, not from BTF arguments).
 *    Not an LRU: an eviction would lose a request in progress without a
 *    trace. When the table is full a new connection gets no state and is
 *    counted (CNT_STATE_FAILED); records go at TCP_CLOSE, which every TCP
 *    socket that had state passes, so none is left behind.
 *  - RINGTAIL_CONN_TABLE (the TLS uprobes, tls.h, beside the tp_btf hooks:
 *    uprobe programs are of the kprobe type, which may not use socket-local
 *    storage): the connection table as in the portable variant (a TLS
 *    connection's record, deleted at TCP_CLOSE by tls_sock_state), and the
 *    thread's server request in the task-local storage the socket hooks use,
 *    so parents and children link across TLS and cleartext.
 */
#ifdef RINGTAIL_PORTABLE
#define RINGTAIL_CONN_TABLE
#endif

#ifdef RINGTAIL_CONN_TABLE

#define SK(sk, field) BPF_CORE_READ(sk, field)

/* Weak: both hook families of an object may hold this table (syscalls.bpf.c
 * and tls.h's syscalls_tls.bpf.c), and then they share it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* preallocated: updates never allocate */
	__uint(max_entries, 16384); /* probe.max_connections, set by the loader */
	__type(key, __u64);
	__type(value, struct conn_state);
} conn_table SEC(".maps") __weak;

/* One zeroed record: the template of a new one (too big for the stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct conn_state);
} conn_zero SEC(".maps") __weak;

static __always_inline struct conn_state *conn_lookup(struct sock *sk)
{
	__u64 key = (__u64)sk;
	return bpf_map_lookup_elem(&conn_table, &key);
}

/* The connection's record, made now if it has none; *made says whether
 * this call made it (and so must fill it in). The insertion decides, not an
 * atomic instruction: compare-and-swap is Linux 5.12+. */
static __always_inline struct conn_state *conn_create(struct sock *sk, int *made)
{
	__u64 key = (__u64)sk;
	__u32 zero = 0;
	struct conn_state *tmpl = bpf_map_lookup_elem(&conn_zero, &zero);
	if (!tmpl)
		return NULL;
	/* NOEXIST: another CPU may have created it meanwhile; then it is used.
	 * A full table fails the update: NULL, counted by conn_new. */
	*made = bpf_map_update_elem(&conn_table, &key, tmpl, BPF_NOEXIST) == 0;
	return bpf_map_lookup_elem(&conn_table, &key);
}

static __always_inline int conn_remove(struct sock *sk)
{
	__u64 key = (__u64)sk;
	return bpf_map_delete_elem(&conn_table, &key);
}

/* The socket's addresses into 16-byte buffers (IPv4: the first 4 bytes). */
static __always_inline void sk_addrs(struct sock *sk, __u16 family, __u8 *laddr, __u8 *raddr)
{
	if (family == FAMILY_INET6) {
		bpf_core_read(laddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(raddr, 16, &sk->__sk_common.skc_v6_daddr);
	} else {
		*(__u32 *)laddr = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		*(__u32 *)raddr = BPF_CORE_READ(sk, __sk_common.skc_daddr);
	}
}

#else /* socket-local storage */

#define SK(sk, field) ((sk)->field)

/* Connection state: a record is created when a request, or what may be the
 * start of one, is seen on a socket of a traced process, deleted at
 * TCP_CLOSE, and freed with the socket in any case. There is no global table
 * to fill: an idle or half-open connection costs its own socket's memory
 * (charged to the socket's option-memory budget, net.core.optmem_max) and
 * nobody else's tracing. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct conn_state);
} conns SEC(".maps");

static __always_inline struct conn_state *conn_lookup(struct sock *sk)
{
	return bpf_sk_storage_get(&conns, sk, NULL, 0);
}

static __always_inline struct conn_state *conn_create(struct sock *sk, int *made)
{
	struct conn_state *st = bpf_sk_storage_get(&conns, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) /* another CPU created it between our lookup and ours (or no memory) */
		st = bpf_sk_storage_get(&conns, sk, NULL, 0);
	/* Get-or-create does not say who created: whoever claims the record
	 * first fills it in (this object runs on 6.3+, which has cmpxchg). */
	*made = st && __sync_val_compare_and_swap(&st->conn_id, 0, CONN_ID_CLAIMED) == 0;
	return st;
}

static __always_inline int conn_remove(struct sock *sk)
{
	return bpf_sk_storage_delete(&conns, sk);
}

static __always_inline void sk_addrs(struct sock *sk, __u16 family, __u8 *laddr, __u8 *raddr)
{
	/* direct BTF loads, no helper calls */
	if (family == FAMILY_INET6) {
		__u32 *l = (__u32 *)laddr, *r = (__u32 *)raddr;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			l[i] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[i];
			r[i] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[i];
		}
	} else {
		*(__u32 *)laddr = sk->__sk_common.skc_rcv_saddr;
		*(__u32 *)raddr = sk->__sk_common.skc_daddr;
	}
}

#endif

#ifdef RINGTAIL_PORTABLE

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct active_req);
} active_table SEC(".maps") __weak;

/* The server request the current thread is serving. */
static __always_inline struct active_req *active_get(int create)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct active_req *a = bpf_map_lookup_elem(&active_table, &tid);
	if (a || !create)
		return a;
	struct active_req none = {};
	bpf_map_update_elem(&active_table, &tid, &none, BPF_NOEXIST);
	return bpf_map_lookup_elem(&active_table, &tid);
}

/* The current process's start time and name, for the event. */
static __always_inline void task_ids(__u64 *start, char *comm)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct task_struct *leader = BPF_CORE_READ(t, group_leader);
	*start = BPF_CORE_READ(leader, start_boottime);
	bpf_core_read(comm, COMM_LEN, &leader->comm);
}

#else /* task-local storage */

/* The server request a thread is serving, so that its outgoing client
 * requests become children. Task-local storage: O(1), no hashing, and freed
 * with the thread. Weak: the socket hooks and the TLS hooks (tls.h) of the
 * socket backend's object share it. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct active_req);
} active SEC(".maps") __weak;

static __always_inline struct active_req *active_get(int create)
{
	return bpf_task_storage_get(&active, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

static __always_inline void task_ids(__u64 *start, char *comm)
{
	/* direct BTF loads, no helper calls */
	struct task_struct *t = bpf_get_current_task_btf();
	*start = t->group_leader->start_boottime;
	const char *c = t->group_leader->comm;
#pragma unroll
	for (int i = 0; i < COMM_LEN; i++)
		comm[i] = c[i];
}

#endif

#ifdef RINGTAIL_PORTABLE

/* The next connection number of this CPU (PORTABLE objects load on 5.8+,
 * whose BPF has no fetch-and-add before 5.12). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} conn_ids SEC(".maps") __weak;

/* A connection number, unique within the loaded programs and never 0 nor
 * CONN_ID_CLAIMED: a count per CPU, with the CPU in the low bits. The count
 * needs no atomics: the programs that make connections run in process
 * context, one at a time on a CPU. */
static __always_inline __u64 conn_next_id(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&conn_ids, &zero);
	if (!n)
		return 1; /* cannot happen: an array's index 0 exists */
	*n += 1;
	return (*n << CONN_ID_CPU_BITS) | (bpf_get_smp_processor_id() & ((1 << CONN_ID_CPU_BITS) - 1));
}

#else

static __always_inline __u64 conn_next_id(void)
{
	return __sync_fetch_and_add(&next_conn_id, 1) + 1;
}

#endif

/* The connection's state, or NULL when it is not tracked. */
static __always_inline struct conn_state *conn_get(struct sock *sk)
{
	return conn_lookup(sk);
}

/* New state for a connection of `role` (zeroed but for these fields), or
 * NULL when none can be had (counted). */
static __always_inline struct conn_state *conn_new(const struct conn_io *io, __u8 role)
{
	struct sock *sk = io->sk;
	/* A closed socket gets none: TCP_CLOSE, which deletes state, has passed
	 * (bytes can still be read after a reset), and nothing can be answered. */
	if (SK(sk, __sk_common.skc_state) == TCP_CLOSE)
		return NULL;
	int made = 0;
	struct conn_state *st = conn_create(sk, &made);
	if (!st) {
		/* socket storage: the socket's option memory (net.core.optmem_max)
		 * is used up; the table: probe.max_connections are tracked; either:
		 * the kernel is out of memory */
		count(CNT_STATE_FAILED);
		return NULL;
	}
	/* Whoever made the record fills it in and counts it. */
	if (!made)
		return st;
	st->conn_id = conn_next_id();
	st->role = role;
	st->tgid = io->tgid;
	st->tid = io->tid;
	st->fd = io->fd;
	st->tls = io->tls;
	count(CNT_CONNS);
	return st;
}

/* Forgets a connection's state. */
static __always_inline void conn_del(struct sock *sk)
{
	if (conn_remove(sk) == 0)
		count_add(CNT_CONNS, -1);
}

/* Whether bytes a hook saw on `sk` go to the state machine (`st` from
 * conn_get): a tracked connection's do unless it left HTTP/1 or is TLS (its
 * socket carries ciphertext: the plaintext comes from tls.h); an untracked
 * one's when its process is selected, or (`recv`: a server's) when it
 * arrived on a selected listening port. */
static __always_inline int conn_wanted(struct conn_state *st, struct sock *sk, __u32 tgid, int recv)
{
	if (st)
		return st->role != ROLE_OPAQUE && !st->tls && st->h2 != H2_DEAD;
	return recv ? server_selected(tgid, SK(sk, __sk_common.skc_num)) : pid_selected(tgid);
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
	ev->kind = EV_HTTP;
	ev->role = st->role;
	ev->flags = (st->flags & ~STF_CONNECT) | extra_flags | (st->tls ? EVF_TLS : 0);
	ev->status = status;
	ev->tgid = st->tgid;
	ev->tid = st->tid;
	ev->fd = st->fd;
	ev->req_len = st->req_len;
	ev->conn_id = st->conn_id;
	ev->start_ns = st->start_ns;
	ev->end_ns = now;
	ev->parent_conn = st->parent_conn;
	ev->parent_seq = st->parent_seq;
	ev->seq = st->seq;
	ev->_pad = 0;
	task_ids(&ev->proc_start_ns, (char *)ev->comm);
	__u16 family = SK(sk, __sk_common.skc_family);
	ev->family = family;
	ev->lport = SK(sk, __sk_common.skc_num);
	ev->rport = bpf_ntohs(SK(sk, __sk_common.skc_dport));
	__builtin_memset(ev->laddr, 0, sizeof(ev->laddr));
	__builtin_memset(ev->raddr, 0, sizeof(ev->raddr));
	sk_addrs(sk, family, ev->laddr, ev->raddr);
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

#include "h2.h"

/* A response (or interim response) went by, at the start of `sg`, in
 * direction `dir` (H2_SEND: the process is the server). */
static __always_inline void on_response(struct conn_state *st, const struct conn_io *io,
					const struct segs *sg, __u8 dir, __u16 status, __u64 now)
{
	if (status >= 100 && status < 200 && status != 101)
		return; /* interim: the final response is still to come */
	if (st->phase != PHASE_REQUEST) {
		count(CNT_ORPHAN);
		emit(st, io->sk, status, EVF_ORPHAN, now);
		return;
	}
	__u32 h2c = status == 101 ? h2c_head_len(sg) : 0;
	emit(st, io->sk, status, h2c ? EVF_H2C : 0, now);
	st->phase = PHASE_IDLE;
	if (status == 101 || ((st->flags & STF_CONNECT) && status < 300)) {
		count(CNT_UPGRADED);
		if (h2c)
			h2_upgrade(st, dir, h2c);
		else
			st->role = ROLE_OPAQUE;
	}
}

/* The send hooks fire when a send is over. A client that reads on another
 * thread than it writes (Go's HTTP/1 transport, gRPC) can read the answer
 * before that: a final response went by while no request was pending
 * (early_ns), and the request reported next is the one it answered
 * (however long its send took: a large body). Pairing that request with
 * the next response would make a wrong span: it is not traced, and
 * counted. (A response to a request sent before tracing began is taken
 * for one too: the next request is then given up, counted.) */
static __always_inline int answered_first(struct conn_state *st)
{
	if (!st->early_ns || st->role != ROLE_CLIENT)
		return 0;
	st->early_ns = 0;
	count(CNT_ANSWERED_FIRST);
	return 1;
}

/* Remembers the first bytes of a read that may begin a request line
 * (p, PREFIX_LEN of them, n valid), or forgets what was remembered. */
static __always_inline void keep_prefix(struct conn_state *st, const __u8 *p, __u32 n)
{
	__u32 skip = leading_newlines(p, n);
	st->pend_len = request_prefix(p, skip, n) ? n : 0;
	if (st->pend_len)
		__builtin_memcpy(st->pend, p, PREFIX_LEN);
}

/* Bytes received on a connection that is not HTTP/2 (yet): HTTP/1. Returns
 * the connection if it is HTTP/2 from these bytes on (a client preface, a
 * 101 to `Upgrade: h2c`): the caller walks them. */
static __always_inline struct conn_state *http1_on_recv(struct conn_state *st, const struct conn_io *io,
							const struct segs *sg)
{
	__u64 now = bpf_ktime_get_ns();

	if (st && (st->role == ROLE_CLIENT || st->phase == PHASE_REQUEST)) {
		if (st->role == ROLE_SERVER) {
			capture(st, sg); /* more of the request */
			return NULL;
		}
		__u8 p[PREFIX_LEN * 2] = {};
		__u32 n = read_prefix(p, sg);
		__u16 status = response_status(p, n);
		if (st->phase != PHASE_REQUEST) {
			/* A response while no request is pending: that request's
			 * send is not reported yet (answered_first). */
			if (is_final(status))
				st->early_ns = now;
			return NULL;
		}
		if (status)
			on_response(st, io, sg, H2_RECV, status, now);
		return st->h2 ? st : NULL;
	}

	if (st && st->role == ROLE_SERVER && !st->pend_len) {
		/* Idle keep-alive connection: capture straight into its buffer and
		 * look there (one copy from user memory instead of two). */
		st->cap_len = 0;
		st->req_len = 0;
		st->flags = 0;
		capture(st, sg);
		__u32 n = st->cap_len < PREFIX_LEN ? st->cap_len : PREFIX_LEN;
		if (!is_request(st->buf, leading_newlines(st->buf, n), n)) {
			keep_prefix(st, st->buf, n);
			st->cap_len = 0;
			return NULL;
		}
		request_started(st, io->tid, now);
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
	__u32 n = read_prefix_at(p, pend, sg);
	__u32 skip = leading_newlines(p, n);
	if (!is_request(p, skip, n)) {
		if (!skip && h2_is_preface(p, n)) {
			/* prior-knowledge HTTP/2: the process is its server */
			if (!st)
				st = conn_new(io, ROLE_SERVER);
			if (!st || st->seq)
				return NULL;
			h2_start(st, H2_RECV, pend);
			return st;
		}
		if (!st && !io->tls)
			tls_saw_read(io->tgid, p, n); /* tls.attach_later */
		/* A new connection whose first read may be the start of a request
		 * line ("G", then the rest later) gets state now, or that request
		 * would go unseen. */
		if (!st && request_prefix(p, skip, n)) {
			st = conn_new(io, ROLE_SERVER);
		} else if (!pend && is_final(response_status(p, n))) {
			/* A response on a connection with no request: its
			 * request's send is not reported yet (answered_first). */
			if (!st)
				st = conn_new(io, ROLE_CLIENT);
			if (st && st->role == ROLE_CLIENT)
				st->early_ns = now;
			return NULL;
		}
		if (st)
			keep_prefix(st, p, n);
		return NULL;
	}
	if (!st)
		st = conn_new(io, ROLE_SERVER);
	if (!st)
		return NULL;
	begin_request(st, io->tid, now, sg, pend);
active:;
	struct active_req *a = active_get(1);
	if (a) {
		a->conn_id = st->conn_id;
		a->seq = st->seq;
	}
	return NULL;
}

/* Bytes the process received on a connection (`st` from conn_get, NULL for
 * an untracked one: it becomes a server connection if a request, or what
 * may be the start of one, begins). One place walks HTTP/2 bytes, so the
 * walk is verified once per program. */
static __always_inline void conn_on_recv(struct conn_state *st, const struct conn_io *io,
					 const struct segs *sg)
{
	if (!st || !st->h2)
		st = http1_on_recv(st, io, sg);
	if (st)
		h2_on_data(st, io, sg, H2_RECV);
}

/* Bytes sent on a connection that is not HTTP/2 (yet): HTTP/1. Returns the
 * connection if it is HTTP/2 from these bytes on (a client preface, a 101
 * to `Upgrade: h2c`): the caller walks them. */
static __always_inline struct conn_state *http1_on_send(struct conn_state *st, const struct conn_io *io,
							const struct segs *sg)
{
	/* A server connection that has seen a request: is this its response? */
	if (st && st->role == ROLE_SERVER && st->seq) {
		__u8 p[PREFIX_LEN * 2] = {};
		__u32 n = read_prefix(p, sg);
		__u16 status = response_status(p, n);
		if (!status)
			return NULL;
		on_response(st, io, sg, H2_SEND, status, bpf_ktime_get_ns());
		if (st->phase == PHASE_IDLE) {
			struct active_req *a = active_get(0);
			if (a && a->conn_id == st->conn_id)
				a->conn_id = 0;
		}
		return st->h2 ? st : NULL;
	}
	if (st && st->phase == PHASE_REQUEST) {
		capture(st, sg); /* request body or the rest of the head */
		return NULL;
	}

	/* An idle client connection, an unknown one, or one that only ever
	 * received the start of a request line: does a request begin? */
	__u8 p[PREFIX_LEN * 2] = {};
	__u32 n = read_prefix(p, sg);
	if (!is_request(p, leading_newlines(p, n), n)) {
		if (!st && !io->tls)
			tls_saw_send(io->sk, io->tgid, io->tid, io->fd, p, n); /* TLS over memory buffers */
		if ((!st || !st->seq) && h2_is_preface(p, n)) {
			/* prior-knowledge HTTP/2: the process is its client */
			if (!st)
				st = conn_new(io, ROLE_CLIENT);
			if (!st)
				return NULL;
			st->role = ROLE_CLIENT;
			h2_start(st, H2_SEND, 0);
			return st;
		}
		/* A response where no request was recognised (a shape not
		 * followed, a request read before ringtail started, bytes read
		 * where no buffer could be found): counted, never silent. */
		if (!st || st->role == ROLE_SERVER) {
			if (is_final(response_status(p, n)))
				count(CNT_UNRECOGNIZED);
			if (st)
				st->pend_len = 0;
		}
		return NULL;
	}
	if (!st)
		st = conn_new(io, ROLE_CLIENT);
	if (!st)
		return NULL;
	__u64 now = bpf_ktime_get_ns();
	if (answered_first(st))
		return NULL;
	/* (a record made by a request-line prefix received on what turns out
	 * to be a client connection becomes the client's) */
	st->role = ROLE_CLIENT;
	st->pend_len = 0;
	begin_request(st, io->tid, now, sg, 0);
	struct active_req *a = active_get(0);
	if (a && a->conn_id) {
		st->parent_conn = a->conn_id;
		st->parent_seq = a->seq;
		st->flags |= EVF_PARENT;
	}
	return NULL;
}

/* Bytes the process sent on a connection (`st` from conn_get, NULL for an
 * untracked one: it becomes a client connection if a request begins). */
static __always_inline void conn_on_send(struct conn_state *st, const struct conn_io *io,
					 const struct segs *sg)
{
	if (!st || !st->h2)
		st = http1_on_send(st, io, sg);
	if (st)
		h2_on_data(st, io, sg, H2_SEND);
}

/* The connection closed: its state goes (a request in flight is counted). */
static __always_inline void conn_close(struct sock *sk)
{
	struct conn_state *st = conn_get(sk);
	if (!st)
		return;
	if (st->h2)
		h2_close(st, sk);
	else if (st->phase == PHASE_REQUEST)
		count(CNT_ABORTED);
	conn_del(sk);
}

/* A TCP socket changed state (inet_sock_set_state): at close its state goes;
 * a listener on a configured port selects its process (port discovery). */
static __always_inline void conn_sock_state(struct sock *sk, int newstate)
{
	if (newstate == TCP_CLOSE) {
		conn_close(sk);
		return;
	}
	if (newstate == TCP_LISTEN && !select_all) {
		__u16 port = SK(sk, __sk_common.skc_num);
		if (bpf_map_lookup_elem(&sel_ports, &port)) {
			__u32 tgid = bpf_get_current_pid_tgid() >> 32;
			__u8 why = SEL_EXPLICIT;
			bpf_map_update_elem(&sel_pids, &tgid, &why, BPF_ANY);
		}
	}
}

#endif
