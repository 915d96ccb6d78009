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
/* Bytes of the executable's file name (NAME_MAX + 1: never truncated). */
#define EXE_NAME_LEN 256
/* Bytes of the new environment carried by an exec event (with
 * probe.read_process_env): larger environments are cut, flagged and counted.
 * A power of two: the kernel masks the copy length with ENV_LEN - 1. */
#define ENV_LEN 8192
#define COMM_LEN 16
/* Bytes of a cgroup's name carried by an exec event (a container runtime's
 * longest, cri-containerd-<64 hex>.scope, is 85). */
#define CGROUP_NAME_LEN 128
/* A cgroup path in an exec event: the names of its outermost CGROUP_TOP
 * levels (level 1 first; "" past its depth), then its parent's and its
 * own (a container's id is the outermost runtime-shaped name: runtimes
 * make theirs within 6 levels of the root, and what a container makes
 * below its own must not count). CGROUP_WALK bounds the walk up. */
#define CGROUP_TOP 6
#define CGROUP_PATH_NAMES (CGROUP_TOP + 2)
#define CGROUP_WALK 16
/* exec_event.cgroups: the process's path in the unified (v2) hierarchy,
 * then in the memory controller's (where cgroup v1 hosts put containers;
 * the same cgroup as the unified one on v2 hosts). */
#define CGROUP_NAMES (2 * CGROUP_PATH_NAMES)

/* conn_head.family */
#define FAMILY_INET 2
#define FAMILY_INET6 10

/* conn_head.kind: the first byte of every record of the `events` ring,
 * which says what follows the connection's header */
#define EV_HTTP 1   /* struct http_event: one HTTP/1 exchange */
#define EV_H2 2     /* struct h2_event: one syscall's frames on an HTTP/2 connection */
#define EV_STREAM 3 /* struct stream_event: one syscall's bytes on a connection of another protocol */

/* conn_head.role and conn_state.role */
#define ROLE_SERVER 1
#define ROLE_CLIENT 2
/* a connection that switched protocol (101, CONNECT tunnel): never parsed again */
#define ROLE_OPAQUE 3

/* http_event's conn_head.flags */
#define EVF_TRUNCATED 0x01 /* more request bytes arrived than were captured */
#define EVF_ORPHAN 0x02    /* a response with no captured request: pipelining */
/* parent_conn/parent_seq name, for a client request, the server request its
 * thread was serving; for a server request, the client request on this host
 * that sent it (the same TCP connection's other end, http1_conn.h) */
#define EVF_PARENT 0x04
/* (probe.carrier) kids holds the span's ids as the kernel decided them
 * (carrier.h): trace, span and parent (0: none), final in user space */
#define EVF_KIDS 0x08
/* the 101 answering an `Upgrade: h2c` request: the connection goes on as
 * HTTP/2, its stream 1 is this request (an H2F_UPGRADE record follows) */
#define EVF_H2C 0x10
/* a client request into which the kernel wrote a `traceparent` line
 * (propagate.h): tp_trace/tp_span are the ids it carries, which the client
 * span takes */
#define EVF_PROPAGATED 0x20
/* a client request made by a thread that was serving a server request but
 * not linked to it (several open, or an alternate signal stack: http1_conn.h):
 * the span-actor may still link it where the request shows it was made for
 * one (a traceparent forwarded as it came in) */
#define EVF_UNLINKED 0x40

/* conn_head.flags of the records of a connection's syscalls (h2_event,
 * stream_event), whatever their kind */
#define IOF_CLOSE 0x01 /* the connection closed: no pieces follow, none will */
#define IOF_START 0x02 /* the connection's first record */
/* h2_event's besides */
#define H2F_UPGRADE 0x08 /* with IOF_START: HTTP/2 after a 101 (EVF_H2C), not a preface */
#define H2F_CALLER 0x10  /* link_conn: the client connection on this host that opened this one (join.h) */
/* stream_event's besides: a send's link_conn/link_seq name the server
 * request the sending thread was serving (the rules of a client HTTP
 * request's EVF_PARENT); SF_UNLINKED: it was serving, not linked
 * (EVF_UNLINKED) */
#define SF_PARENT 0x08
#define SF_UNLINKED 0x10

/* io_head.dir: which way the bytes went, seen from the traced process */
#define IO_RECV 0
#define IO_SEND 1

/* Pieces in h2_event.data and stream_event.data, back to back, each
 * starting with its tag (integers little-endian):
 *  PIECE_FRAME: (h2) the 9-byte frame header as on the wire; its
 *               payload's captured bytes follow in PIECE_MORE pieces;
 *  PIECE_MORE:  u16 n, then n bytes: (h2) more of the current frame's
 *               payload, (stream) the syscall's bytes;
 *  PIECE_LOST:  u32 n: n bytes went by unseen;
 *  PIECE_GAP:   (stream records only, after every other piece) u8 dir,
 *               u32 n: before this record, n bytes of direction dir
 *               (IO_*) went by in records of this connection that the
 *               ring had no room for (stream.h); at most one a direction. */
#define PIECE_FRAME 1
#define PIECE_MORE 2
#define PIECE_LOST 3
#define PIECE_GAP 4
/* Bytes of pieces one h2 record carries at most (a power of two: the kernel
 * masks offsets with H2_DATA_LEN - 1). Header blocks are what matters:
 * DATA frames cost 10 bytes each. */
#define H2_DATA_LEN 4096
/* A stream record (stream.h) carries the first bytes of a syscall, then
 * (PIECE_LOST) how many went by unseen, then its last STREAM_TAIL bytes: a
 * response's end (PostgreSQL's ReadyForQuery, MySQL's final EOF) is in its
 * last bytes; then PIECE_GAP pieces, if records were lost. */
#define STREAM_TAIL 256
/* Bytes of a PIECE_GAP piece (tag, dir, u32). */
#define GAP_PIECE_LEN 6
/* Bytes of pieces a stream record carries at most: a pipeline of
 * requests is read whole up to this. A power of two: the kernel masks
 * offsets with STREAM_DATA_LEN - 1. */
#define STREAM_DATA_LEN 16384
/* Configured ports of byte-stream protocols (probe.stream_ports): a selected
 * process's connection to one of them goes to user space as a byte
 * stream (stream.h), whose protocol user space tells. */
#define STREAM_PORTS 16
/* Payload bytes captured of one frame at most (header blocks, SETTINGS,
 * RST_STREAM, GOAWAY; never DATA). */
#define H2_FRAME_CAP 2048

/* discovery.exe_names that are a literal name (`^name$`) or the literal
 * start of one (`^name`): matched by the kernel at exec against the
 * basename of the path given to exec (process.bpf.c), so that such a
 * process is traced from its first instruction, not from when the loader
 * has read its exec record. The loader still decides every name. */
#define EXE_LITERALS 8
#define EXE_LITERAL_LEN 30
struct exe_literal {
	__u8 len;   /* bytes of name; 0: unused */
	__u8 exact; /* 1: the whole basename, 0: its start */
	char name[EXE_LITERAL_LEN];
};

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
#define CNT_FORK 12          /* fork records submitted (new processes, for their names) */
#define CNT_FORK_LOST 13     /* fork records lost: exec ring full */
#define CNT_TLS_CALLS 14     /* TLS reads and writes whose plaintext went to the state machine */
#define CNT_TLS_UNBOUND 15   /* TLS reads/writes on a connection whose socket was not seen: not traced */
#define CNT_TLS_BINDINGS 16  /* TLS connections bound to their socket (SSL* -> socket) */
#define CNT_H2_CONNS 17      /* connections recognised as HTTP/2 (the client preface) */
#define CNT_H2_EVENTS 18     /* h2 records submitted to the ring */
#define CNT_H2_LOST 19       /* h2 records lost: ring full (the connection is given up) */
#define CNT_H2_CUT 20        /* h2 syscalls whose frames did not fit a record or the walk: connection given up */
#define CNT_H2_PARTIAL 21    /* h2 payload bytes not captured (iovecs past MAX_SEGS, record full) */
#define CNT_ANSWERED_FIRST 22 /* client requests whose response was read before their send was reported, not paired: not traced */
#define CNT_JOINS 23         /* server requests joined to the client request on this host that sent them */
#define CNT_LINK_AMBIGUOUS 24 /* client requests not linked: their thread had more than one server request open */
#define CNT_LINK_ALT_STACK 25 /* client requests not linked: their thread has an alternate signal stack (Go, Rust) */
#define CNT_JOIN_LATE 26     /* loopback requests not joined: the client's send was reported after its server answered */
#define CNT_PROPAGATED 27   /* client requests sent with a traceparent the kernel wrote (propagate.h) */
#define CNT_PROP_SERVING 28  /* not written: the thread was serving a request (its trace is not the kernel's to name), or made the connection while serving one */
#define CNT_PROP_HAS_TP 29   /* not written: the request carried a traceparent */
#define CNT_PROP_HEAD 30     /* not written: the request head's end was not in the send's first PROP_HEAD_MAX bytes */
#define CNT_PROP_NO_ROOM 31  /* not written: the kernel refused to insert the bytes */
#define CNT_PROP_UNCLAIMED 32 /* written, but the capture began no request at that send: no client span carries the ids */
#define CNT_PROP_SOCKS_FULL 33 /* connections of traced processes not claimed for propagation: the socket map is full */
#define CNT_PROP_NOT_CLAIMED 34 /* client requests on a connection not claimed when it connected (its process not traced yet, or before ringtail started) */
#define CNT_PROP_WHILE_SERVING 35 /* written while the thread served a request (its prop_threads entry evicted): the call is not linked to it */
#define CNT_ANSWERED_PAIRED 36 /* client requests whose response was read before their send was reported, paired with it (http1_conn.h) */
#define CNT_STREAM_CONNS 37   /* connections to a configured port (stream.h) */
#define CNT_STREAM_EVENTS 38  /* stream records submitted to the ring */
#define CNT_STREAM_LOST 39    /* stream records lost, either direction: ring full (the connection's next record says so: PIECE_GAP) */
#define CNT_STREAM_PARTIAL 40 /* stream syscalls whose middle bytes were not captured (PIECE_LOST) */
#define CNT_GO_NO_SOCKET 41  /* Go crypto/tls calls whose connection's socket was not found (go_tls.h: not a TCP socket underneath) */
/* probe.propagate (propagate.h): requests not written into, and connections given up */
#define CNT_PROP_NOT_HTTP 42 /* connections given up: a send where a request had to begin (the first, or one after an exchange) did not begin with an HTTP/1 request line */
#define CNT_PROP_BLOCKING 43 /* requests on a blocking socket: never in the socket map (a recv waiting there can return EAGAIN) */
#define CNT_PROP_KEEP_ALIVE_OFF 44 /* requests after a connection's first, which left the socket map after it (probe.propagate_keep_alive) */
#define CNT_PROP_GIVEN_UP 45 /* requests on a connection given up earlier (counted once as why) or closing */
#define CNT_PROP_BODY_UNKNOWN 46 /* connections given up after a request whose body's end is not counted (Transfer-Encoding, Expect, a bad or repeated Content-Length) */
#define CNT_PROP_UPGRADE 47  /* connections given up after a request that may switch protocols (Upgrade, CONNECT) */
#define CNT_PROP_PIPELINED 48 /* connections given up: a request began before the previous one's answer was read, or inside a send */
#define CNT_PROP_SEND_UNSEEN 49 /* connections given up: a send the sk_msg program did not see (the kernel skips it after a send it could not complete) */
#define CNT_PROP_IN_BODY 50  /* requests the capture began where the sk_msg program framed body bytes or took no head */
#define CNT_PROP_QUEUE_BUSY 51 /* requests not written: the socket had unsent bytes queued, or its send buffer little room (a send cut short would keep part of the line) */
/* stream sends whose record the ring had no room for: the calls they
 * carried are not traced (one a send: a client writes a call a syscall; a
 * pipeline written in one counts once) */
#define CNT_STREAM_CALLS_LOST 52
#define CNT_TLS_REPORT_LOST 53 /* reports to the TLS attacher lost: its ring was full (tls_reports) */
#define CNT_TLS_EARLY 54     /* TLS connections whose handshake a process read before any TLS call of it was seen (its library not attached yet, or TLS over memory buffers) */
#define CNT_GO_TLS_LOST 55  /* Go crypto/tls reads whose bytes were not seen: the connection's buffered input was not where its Read's entry left it (go_tls.h, the lazy path) */
#define CNT_GO_TLS_ORDER 56 /* Go crypto/tls hits that stopped waiting for another thread handing a Read on (longer than GO_WAIT_NS): a Write may then reach the state machine before its request, a Read may overwrite the bytes being copied */
/* probe.carrier (carrier.h): the trace context in a TCP header option */
#define CNT_CARRIER_WRITTEN 57   /* requests whose start segment carried the option */
#define CNT_CARRIER_REWRITTEN 58 /* the option written again (a retransmitted start segment) */
#define CNT_CARRIER_RECEIVED 59  /* options received on traced servers' sockets (after duplicates) */
#define CNT_CARRIER_MATCHED 60   /* server requests whose first byte a received option named */
#define CNT_CARRIER_NO_SPACE 61  /* segments with no room left for the option (SACK blocks, MD5) */
#define CNT_CARRIER_MID_SEND 62  /* request starts not carried: unsent bytes were queued before them */
#define CNT_CARRIER_AMBIGUOUS 63 /* requests not carried: their thread served several requests, or ran tasks (alternate stack) */
#define CNT_CARRIER_UNCLAIMED 64 /* ids carried that no client span took (a protocol the capture does not frame) */
#define CNT_CARRIER_INVALID 65   /* options received of the wrong length, or with a zero id */
#define CNT_CARRIER_STORE 66     /* options the kernel refused to write (another program's, no room) */
#define CNT_CARRIER_UNDECIDED 67 /* requests not carried: their thread serves a request whose ids user space decides (TLS) */
#define CNT_CARRIER_JOINED 68   /* server requests a client on this host sent without an option: left to user space's join (their calls not carried) */
#define CNT_MAX 69

/* proc_head.kind: records of the `execs` ring. */
#define PROC_EXEC 1
#define PROC_FORK 2

/* tls_report.kind: what the kernel tells the TLS attacher (the only
 * reader of the `tls_reports` ring, src/attacher.rs). */
#define TLSR_EXEC 1   /* a process exec'd a file (its executable may be Go's crypto/tls, or export OpenSSL's functions) */
#define TLSR_MAP 2    /* a process mapped a libssl* file executable */
#define TLSR_FORK 3   /* a selected process forked: the child needs its own per-process links */
#define TLSR_EXIT 4   /* a selected process exited: its per-process links go */
#define TLSR_SELECT 5 /* a running process became selected (a listener on a configured port) */
/* The function a uprobe_multi or session uprobe is on: its cookie
 * (tls_hooks.h, go_tls.h). */
#define TLSF_READ 1      /* SSL_read */
#define TLSF_READ_EX 2   /* SSL_read_ex */
#define TLSF_HANDSHAKE 3 /* SSL_do_handshake */
#define TLSF_WRITE 4     /* SSL_write */
#define TLSF_WRITE_EX 5  /* SSL_write_ex */
#define TLSF_FREE 6      /* SSL_free */
#define GOF_READ 16      /* crypto/tls.(*Conn).Read's entry */
#define GOF_READ_RET 17  /* one of its return instructions */
#define GOF_WRITE 18     /* crypto/tls.(*Conn).Write's entry */
/* The lazy path (go_tls.h): no return probes. The cookie's high 32 bits
 * are the offset of tls.Conn's `input` (a bytes.Reader) in the release. */
#define GOF_LAZY_READ 19  /* Read's entry: the previous Read's bytes, then where this one starts */
#define GOF_LAZY_WRITE 20 /* Write's entry: the pending Read's bytes, then the write's */
#define GOF_LAZY_ALERT 21 /* Read's call of readRecordOrCCS for a close_notify after its bytes (which it resets) */
#define GOF_LAZY_CLOSE 22 /* Close's entry: the last Read's bytes, when nothing followed them */

/* tls_report.flags */
#define TLSRF_SELECTED 0x01 /* the kernel had the process selected then */

/* Go crypto/tls (go_tls.h): where the socket's fd is, from a *tls.Conn.
 * The loader attaches only to binaries whose Go version has this layout
 * (src/gobin.rs, LAYOUTS; checked equal there). */
#define GO_CONN_OFF 0   /* tls.Conn.conn, a net.Conn interface (itab, data) */
#define GO_TCP_FD_OFF 0 /* *net.TCPConn: its embedded conn.fd, a *netFD */
#define GO_SYSFD_OFF 16 /* netFD.pfd.Sysfd */

/* exec_event.flags */
#define EXECF_ENV 0x01           /* env holds the start of the new environment */
#define EXECF_ENV_TRUNCATED 0x02 /* the environment was longer than ENV_LEN */
#define EXECF_ENV_FAULT 0x04     /* the environment could not be read */

/* What every record of the `events` ring starts with: its kind and the
 * connection it is of (conn.h, conn_head_fill). */
struct conn_head {
	__u8 kind; /* EV_* */
	__u8 role; /* ROLE_SERVER or ROLE_CLIENT */
	__u8 flags; /* the kind's: EVF_*; IOF_* with H2F_* or SF_* */
	__u8 family; /* FAMILY_INET or FAMILY_INET6 */
	__u32 tgid;
	__u32 tid;
	__s32 fd; /* -1 when not known (accepted before ringtail started) */
	__u64 conn_id; /* per-boot connection number, never a kernel address */
	__u64 proc_start_ns; /* start_boottime of the process: pid-reuse guard */
	__u16 lport;
	__u16 rport;
	__u8 tls; /* 1: TLS, the bytes are plaintext from the TLS uprobes */
	__u8 _pad[3];
	__u8 laddr[16];
	__u8 raddr[16];
	char comm[COMM_LEN];
};

struct http_event {
	struct conn_head h; /* kind EV_HTTP, flags EVF_* */
	__u16 status;
	__u16 cap_len;
	__u32 req_len; /* request bytes seen before the response began */
	__u64 start_ns; /* CLOCK_MONOTONIC */
	__u64 end_ns;
	__u64 parent_conn;
	__u32 parent_seq;
	__u32 seq; /* request number on this connection, from 1 */
	/* with EVF_PROPAGATED: the trace id and the span id (W3C byte order)
	 * of the traceparent the kernel wrote into the request (propagate.h) */
	/* with EVF_KIDS (probe.carrier, never with EVF_PROPAGATED): the trace
	 * id and span id the kernel decided, W3C byte order, and kparent the
	 * parent span id (0: none) (carrier.h) */
	__u8 tp[24];
	__u8 kparent[8];
	__u8 buf[CAPTURE_LEN];
};

/* What a record of one send or receive (or, with IOF_CLOSE, of the
 * connection's end) has before its pieces, whatever its protocol: data_len
 * bytes of pieces follow it (h2_event, stream_event). */
struct io_head {
	struct conn_head h; /* flags IOF_* with H2F_* or SF_* */
	__u8 dir; /* IO_RECV or IO_SEND */
	__u8 _pad0;
	__u16 data_len;
	__u32 link_seq; /* with SF_PARENT */
	__u64 ts_ns; /* CLOCK_MONOTONIC, when the syscall completed */
	__u64 link_conn; /* with H2F_CALLER or SF_PARENT */
};

/* The frames one send or receive on an HTTP/2 connection moved (h2.h). */
struct h2_event {
	struct io_head io; /* kind EV_H2 */
	__u8 data[H2_DATA_LEN];
};

/* The bytes one send or receive moved on a connection of a protocol that
 * is not HTTP (stream.h: databases, brokers): its first bytes, how many
 * went by unseen, its last; the protocol is user space's to tell. */
struct stream_event {
	struct io_head io; /* kind EV_STREAM */
	__u8 data[STREAM_DATA_LEN];
};

/* What every record of the `execs` ring starts with. */
struct proc_head {
	__u32 tgid;
	__u8 kind; /* PROC_* */
	__u8 flags;
	__u16 _pad;
	__u64 proc_start_ns; /* start_boottime of the process: pid-reuse guard */
};

/* A new process image (sched_process_exec): what the loader cannot read
 * from /proc once it has dropped CAP_SYS_PTRACE. */
struct exec_event {
	struct proc_head h; /* kind PROC_EXEC, flags EXECF_* */
	__u32 env_len;	     /* bytes of env filled (<= ENV_LEN) */
	__u16 cgroup_levels[2]; /* each path's depth (0: the root, or not read) */
	__u64 env_total; /* the whole environment's length */
	char path[EXEC_PATH_LEN]; /* as given to exec */
	char exe[EXE_NAME_LEN];	  /* the file's name (symlinks resolved) */
	char cgroups[CGROUP_NAMES][CGROUP_NAME_LEN]; /* NUL-terminated names, "" when unknown or past the depth */
	__u8 env[ENV_LEN];	  /* NUL-separated NAME=value strings */
};

/* A new process (sched_process_fork, not a thread): it runs its parent's
 * executable with its parent's environment until it execs. */
/* A record of the `tls_reports` ring: facts the kernel saw, each about
 * one process (never a request's bytes). */
struct tls_report {
	__u32 kind;	/* TLSR_* */
	__u32 tgid;
	__u64 proc_start_ns; /* start_boottime of the process: pid-reuse guard */
	__u32 parent_tgid;   /* TLSR_FORK: the parent; else 0 */
	__u32 flags;	     /* TLSRF_* */
	__u32 dev_major;     /* TLSR_EXEC, TLSR_MAP: the file's device and inode */
	__u32 dev_minor;
	__u64 ino;
	char path[EXEC_PATH_LEN]; /* TLSR_EXEC: the path given to exec (NUL-terminated) */
};

struct fork_event {
	struct proc_head h; /* kind PROC_FORK */
	__u32 parent_tgid;
	__u32 _pad;
	__u64 parent_start_ns;
};

#endif
