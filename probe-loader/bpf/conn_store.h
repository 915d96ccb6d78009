/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Where a connection's state and a thread's server request live, and the
 * connection numbers: the only code that knows (see "Where state lives"
 * below). Everything else reaches them through conn.h.
 */
#ifndef RINGTAIL_CONN_STORE_H
#define RINGTAIL_CONN_STORE_H

#include "globals.h"
#include "maps.h"

/* conn_state.conn_id while its maker fills the record in (socket storage) */
#define CONN_ID_CLAIMED (~0ULL)
/* low bits of a PORTABLE connection number: the CPU (CONFIG_NR_CPUS <= 8192) */
#define CONN_ID_CPU_BITS 13

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
} conns SEC(".maps") __weak; /* also propagate.bpf.c's */

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
/* (propagate.h: the socket backend's only) */
static __always_inline void active_mirror(const struct active_req *a, __u32 tid)
{
}

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

/* Whether the current thread has an alternate signal stack (http1_conn.h). */
static __always_inline int current_alt_stack(void)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	return BPF_CORE_READ(t, sas_ss_sp) != 0;
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

/* probe.propagate: the threads serving a request (a server request begun
 * and not answered, as `active` says), for the sk_msg program, which may
 * not read task-local storage on Linux 6.12 (6.18 lets it; propagate.h). LRU: a thread
 * that ends while serving leaves its entry, aged out; an entry evicted
 * while its thread serves is caught where the request is claimed
 * (CNT_PROP_WHILE_SERVING). Weak: both hook families of the object. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} prop_threads SEC(".maps") __weak;

/* After `a` (thread `tid`'s) changed: the mirror above, with propagation on. */
static __always_inline void active_mirror(const struct active_req *a, __u32 tid)
{
	if (!propagate)
		return;
	if (a->conn_id || a->open) {
		__u8 one = 1;
		bpf_map_update_elem(&prop_threads, &tid, &one, BPF_ANY);
	} else {
		bpf_map_delete_elem(&prop_threads, &tid);
	}
}

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

static __always_inline int current_alt_stack(void)
{
	return bpf_get_current_task_btf()->sas_ss_sp != 0;
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

#endif
