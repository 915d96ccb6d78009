/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * HTTP/2 framing in the kernel: recognise the connection, then per send or
 * receive walk its frames and ship one record (struct h2_event) with every
 * frame header and the first bytes of the payloads user space needs (header
 * blocks, SETTINGS, RST_STREAM, GOAWAY). HPACK, streams and spans are user
 * space's (span-actor/src/h2): the kernel only keeps the frame boundaries.
 *
 * Recognised: prior-knowledge h2c, the 24-byte client preface
 * ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") received (server) or sent (client)
 * as a connection's first bytes. http1_conn.h asks (h2_is_preface) only where it
 * looks for an HTTP/1 request line on a connection without one, so HTTP/1
 * pays nothing more. Also `Upgrade: h2c` (RFC 7540 3.2): a 101 whose head
 * names h2c switches an HTTP/1 connection (h2_upgrade; the 101 is looked
 * at only when one goes by). A connection that was running before tracing began
 * has no preface to see: it is not followed (HTTP/1 finds nothing in its
 * frames either).
 *
 * Per direction the state is where the next frame header begins (payload
 * bytes left of the current frame; a frame header split across syscalls is
 * held), so frames may straddle syscalls and iovecs. The walk is bounded:
 * with the socket backend it runs in bpf_loop (H2_LOOP_STEPS steps per
 * syscall) and reads every iovec of a vectored call; the syscall backend
 * (kernels before bpf_loop) walks H2_STEPS steps and MAX_SEGS iovecs. Bytes
 * it cannot account for at a frame boundary (iovecs past MAX_SEGS on the
 * syscall backend, more frames than steps, a record full) lose the
 * framing: the connection is given up (PIECE_LOST outside a frame tells user
 * space; counted). The entry point is segment-based (struct segs), so a
 * TLS hook that hands over plaintext segments works the same way.
 */
#ifndef RINGTAIL_H2_H
#define RINGTAIL_H2_H

#include "conn.h"
#include "maps.h"
#include "segs.h"
#include "join.h"

#define H2_PREFACE_LEN 24
#define H2_FRAME_HDR 9
/* Steps of the walk per syscall: a frame header (with its payload, as
 * far as the segment holds it, when that is not captured), a payload
 * part, a preface skip or a segment change each take one. */
#define H2_STEPS 64
#define H2_DATA_MASK (H2_DATA_LEN - 1)
/* What the walk keeps free at the end of a record: one PIECE_LOST piece. */
#define H2_RESERVE 8
#if !defined(RINGTAIL_PORTABLE) || defined(RINGTAIL_BPF_LOOP)
/* bpf_loop (Linux 5.17+: the socket backend, which needs 6.3, and the
 * syscall backend's object for 5.17+): the step is verified once, so the
 * walk may be long, and a full record goes and the walk goes on in the
 * next, up to H2_RECORDS: a frame
 * takes a step (its payload, when not captured, passed over with its
 * header) and some 10 bytes of a record, so 16 records hold some 6,500
 * frames: a 1 MiB write of frames of 160 bytes or more. */
#define H2_WALK_LOOP 1
#define H2_LOOP_STEPS 8192
#define H2_RECORDS 16
#else
/* Older kernels: H2_STEPS steps, one record a call. */
#define H2_WALK_LOOP 0
#endif

/* "PRI * HTTP/2.0\r\n": the first PREFIX_LEN bytes of the client preface
 * (the rest, "\r\nSM\r\n\r\n", is skipped without a look: nothing else
 * starts this way). */
static __always_inline int h2_is_preface(const __u8 *p, __u32 n)
{
	if (n < PREFIX_LEN)
		return 0;
	return p[0] == 'P' && p[1] == 'R' && p[2] == 'I' && p[3] == ' ' && p[4] == '*' && p[5] == ' ' &&
	       p[6] == 'H' && p[7] == 'T' && p[8] == 'T' && p[9] == 'P' && p[10] == '/' && p[11] == '2' &&
	       p[12] == '.' && p[13] == '0' && p[14] == '\r' && p[15] == '\n';
}

static __always_inline void h2_put(__u8 *data, __u32 off, __u8 b)
{
	data[off & H2_DATA_MASK] = b;
}

/* Appends an PIECE_LOST piece (room for it is always kept). */
static __always_inline __u32 h2_lost(__u8 *data, __u32 off, __u64 bytes)
{
	__u32 n = bytes > 0xffffffff ? 0xffffffff : bytes;
	/* the masks stay, whatever clang knows of off: a bound it proved may
	 * live only in a register whose spill Linux 6.1's verifier reloads
	 * without it */
	barrier_var(off);
	h2_put(data, off, PIECE_LOST);
	h2_put(data, off + 1, n);
	h2_put(data, off + 2, n >> 8);
	h2_put(data, off + 3, n >> 16);
	h2_put(data, off + 4, n >> 24);
	return off + 5;
}

/* Submits an h2 record of data_len bytes of pieces (`caller`: its
 * link_conn, with H2F_CALLER). Returns non-zero when the ring had no room:
 * the connection is then given up (counted), user space would miss frames
 * it cannot do without. */
static __always_inline int h2_submit(struct h2_event *ev, struct conn_state *st, struct sock *sk, __u32 tid,
				     __s32 fd, __u8 dir, __u8 flags, __u32 data_len, __u64 caller)
{
	if (io_submit(&ev->io, EV_H2, flags, st, sk, tid, fd, dir, data_len, caller, 0, H2_DATA_LEN)) {
		count(CNT_H2_LOST);
		st->h2 = H2_DEAD;
		return 1;
	}
	count(CNT_H2_EVENTS);
	return 0;
}

/* A record of the walk of a call, `off` bytes of pieces (the first record
 * of the call carries `flags`, naming its caller if H2F_CALLER); 0 when it
 * went into the ring. */
static __always_inline int h2_submit_walk(struct h2_event *ev, struct conn_state *st, const struct conn_io *io,
					  __u8 dir, __u8 flags, __u32 off)
{
	return h2_submit(ev, st, io->sk, io->tid, io->fd, dir, flags, off, flags & H2F_CALLER ? st->parent_conn : 0);
}

/* One step of the walk on segment w->seg; 0 when the segments are done. */
static __always_inline int h2_step(struct h2_walk *w, struct h2_dir *d, const struct segs *sg, __u8 *data)
{
	/* Everything is read again from the map: nothing the verifier could
	 * tell apart is carried from one step to the next in a register. */
	asm volatile("" ::: "memory");
	__u32 seg = w->seg;
	if (w->iov_seg != seg + 1) {
		/* a new segment: where it is goes to the map (one step) */
		if (seg < sg->n && seg < MAX_SEGS) {
			w->iov_len = sg->len[seg & (MAX_SEGS - 1)];
			w->iov_base = (__u64)sg->base[seg & (MAX_SEGS - 1)];
#ifndef RINGTAIL_PORTABLE
		} else if (sg->iov && seg < sg->iovcnt && w->seen < sg->total) {
			/* an iovec past MAX_SEGS: read it from the process */
			struct iovec v;
			if (bpf_probe_read_user(&v, sizeof(v), (const struct iovec *)sg->iov + seg))
				return 0;
			__u64 remain = sg->total - w->seen;
			w->iov_base = (__u64)v.iov_base;
			w->iov_len = v.iov_len < remain ? v.iov_len : remain;
#endif
		} else {
			return 0;
		}
		w->iov_seg = seg + 1;
		return 1;
	}
	__u64 slen = w->iov_len;
	const __u8 *base = (const __u8 *)w->iov_base;
	if (w->pos >= slen) {
		w->seen += slen;
		w->seg = seg + 1;
		w->pos = 0;
		return 1;
	}
	__u64 avail = slen - w->pos;
	const __u8 *p = base + w->pos;
	if (d->skip) {
		__u64 n = d->skip < avail ? d->skip : avail;
		d->skip -= n;
		w->pos += n;
		return 1;
	}
	if (d->left) {
		__u64 n = d->left < avail ? d->left : avail;
		__u32 off = w->off;
		if (d->want && off + 3 + H2_RESERVE >= H2_DATA_LEN) {
			d->want = 0; /* the record is full: the rest is not captured */
			count(CNT_H2_PARTIAL);
		}
		if (d->want) {
			__u64 c = n < d->want ? n : d->want;
			__u64 room = H2_DATA_LEN - H2_RESERVE - 3 - off;
			if (c > room) {
				c = room;
				count(CNT_H2_PARTIAL);
			}
			/* off < H2_DATA_LEN and c < H2_DATA_LEN: the masks make the
			 * read provably inside data and its spill */
			barrier_var(c);
			if (!bpf_probe_read_user(&data[(off + 3) & H2_DATA_MASK], c & H2_DATA_MASK, p)) {
				h2_put(data, off, PIECE_MORE);
				h2_put(data, off + 1, c);
				h2_put(data, off + 2, c >> 8);
				w->off = off + 3 + (c & H2_DATA_MASK);
			}
			d->want -= c;
		}
		d->left -= n;
		w->pos += n;
		return 1;
	}
	/* a frame header: what is held of it, then the rest */
	__u8 h[24] = {};
	/* (not "& 7": clang would turn h + held into h | held, which the
	 * verifier refuses on a stack pointer) */
	__u32 held = d->hlen;
	if (held > 8)
		held = 8;
	__builtin_memcpy(h, d->hdr, 8);
	__u32 need = H2_FRAME_HDR - held;
	if (avail < need) {
		/* the header straddles: hold what is here. avail < need <= 9, so
		 * up to 8 bytes, and held + n <= 8: the mask keeps every value
		 * (with "& 7" a segment ending 8 bytes into a header held none of
		 * them, the walk read the 9th byte on as a frame header, and a
		 * gRPC C-core client, whose writes are 23-byte iovecs, lost every
		 * frame after it inside a "frame" megabytes long, uncounted) */
		__u32 n = avail & 15;
		barrier_var(n);
		barrier_var(held);
		if (held > 8)
			held = 8;
		if (bpf_probe_read_user(&d->hdr[held], n, p)) {
			w->bad = 1;
			return 0;
		}
		d->hlen = held + n;
		w->pos += avail;
		return 1;
	}
	barrier_var(need);
	/* bounded again where it is used: held may come back from a spill,
	 * and Linux 6.1's verifier does not carry the bound above to it */
	barrier_var(held);
	if (held > 8)
		held = 8;
	__u32 off = w->off;
	if (off + 1 + H2_FRAME_HDR + H2_RESERVE > H2_DATA_LEN) {
		/* the record is full: this frame begins the next one (h2_on_data),
		 * its header read again from where it is */
		w->full = 1;
		return 0;
	}
	if (bpf_probe_read_user(&h[held], need & 15, p)) {
		w->bad = 1;
		return 0;
	}
	__u32 len = ((__u32)h[0] << 16) | ((__u32)h[1] << 8) | h[2];
	__u8 typ = h[3];
	/* HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, GOAWAY, CONTINUATION */
	int wanted = typ == 1 || typ == 3 || typ == 4 || typ == 5 || typ == 7 || typ == 9;
	__u32 want = wanted ? (len < H2_FRAME_CAP ? len : H2_FRAME_CAP) : 0;
#if H2_WALK_LOOP
	/* A frame whose payload is captured begins in a record with room for
	 * all of it: a header block cut short at a record's end would put the
	 * HPACK table out of step (want <= H2_FRAME_CAP: an empty record has
	 * room). Without bpf_loop there is no next record: it is cut short,
	 * counted. */
	if (want && off + 1 + H2_FRAME_HDR + 3 + want + H2_RESERVE > H2_DATA_LEN) {
		w->full = 1;
		return 0;
	}
#endif
	d->hlen = 0;
	w->pos += need;
	h2_put(data, off, PIECE_FRAME);
#pragma unroll
	for (int i = 0; i < H2_FRAME_HDR; i++)
		h2_put(data, off + 1 + i, h[i]);
	w->off = off + 1 + H2_FRAME_HDR;
	d->left = len;
	d->want = want;
	if (!want) {
		/* a payload not captured (DATA, WINDOW_UPDATE, PING) is passed
		 * over in this step, as much of it as this segment holds: a
		 * frame costs one step, not two */
		__u64 here = avail - need;
		__u64 n = len < here ? len : here;
		d->left = len - n;
		w->pos += n;
	}
	return 1;
}

#if H2_WALK_LOOP

struct h2_loop_ctx {
	struct h2_walk *w;
	struct h2_dir *d;
	const struct segs *sg;
	struct h2_event *ev;
	struct conn_state *st;
	const struct conn_io *io;
	__u32 records; /* submitted before the one being built */
	__u8 dir;
	__u8 flags; /* the next record's */
};

/* A step; a full record is submitted and the walk goes on in the next (one
 * call site of h2_submit, in here, verified with the step). */
static long h2_loop_cb(__u64 i, void *ctx)
{
	struct h2_loop_ctx *c = ctx;
	struct h2_walk *w = c->w;
	if (h2_step(w, c->d, c->sg, c->ev->data))
		return 0;
	if (!w->full || w->bad || c->records >= H2_RECORDS - 1)
		return 1; /* done, lost, or out of records: h2_on_data says */
	if (h2_submit_walk(c->ev, c->st, c->io, c->dir, c->flags, w->off))
		return 1; /* the ring is full: the connection is given up (counted) */
	c->records += 1;
	c->flags = 0;
	w->off = 0;
	w->full = 0;
	return 0;
}
#endif

/* The bytes of one send or receive on an HTTP/2 connection: walk them and
 * submit their records. `dir` is IO_RECV or IO_SEND. A record holds
 * H2_DATA_LEN bytes of pieces (some 400 frames); a call moving more frames
 * (a Go server's 1 MiB answer in one write: 256 DATA frames of 4 KiB,
 * or, when flow control hands out the window in small parts, some 2,700
 * frames of ~380 bytes, seen on a loaded machine) fills it, and the walk
 * goes on in the next, up to H2_RECORDS records and H2_LOOP_STEPS steps;
 * beyond, or past H2_STEPS steps and one record on kernels without
 * bpf_loop, the connection is given up (counted). */
static __always_inline void h2_on_data(struct conn_state *st, const struct conn_io *io,
				       const struct segs *sg, __u8 dir)
{
	if (st->h2 != H2_LIVE)
		return;
	__u8 flags = st->first;
	st->first = 0;
	/* (the first record names the caller: a stream it ends is joined) */
	if (dir == IO_SEND && st->role == ROLE_SERVER)
		flags |= join_take_h2(st, io->sk);
	__u32 zero = 0;
	struct h2_scratch *s = bpf_map_lookup_elem(&h2_scratch, &zero);
	if (!s)
		return;
	struct h2_dir *d = dir == IO_SEND ? &st->h2d[1] : &st->h2d[0];
	/* The walk's position lives in the map value, not on the stack: the
	 * verifier does not track values in map memory, so every step starts
	 * from the same (unknown) state and is verified once, not once per
	 * path that led to it. */
	struct h2_walk *w = &s->walk;
	__builtin_memset(w, 0, sizeof(*w));
	__u8 *data = s->ev.data;
#if H2_WALK_LOOP
	struct h2_loop_ctx c = { .w = w, .d = d, .sg = sg, .ev = &s->ev, .st = st, .io = io, .dir = dir, .flags = flags };
	bpf_loop(H2_LOOP_STEPS, h2_loop_cb, &c, 0);
	if (st->h2 != H2_LIVE)
		return; /* a record found the ring full */
	flags = c.flags;
#else
#pragma clang loop unroll(disable)
	for (int i = 0; i < H2_STEPS; i++) {
		if (!h2_step(w, d, sg, data))
			break;
	}
#endif
	/* Bytes not walked: iovecs past MAX_SEGS, a walk out of steps or of
	 * records. */
	__u64 done = w->seen + w->pos;
	__u64 rest = sg->total > done ? sg->total - done : 0;
	__u32 bad = w->bad;
	if (!bad && rest) {
		if (rest <= d->left && !d->skip && !d->hlen) {
			/* inside the current frame's payload: framing holds */
			d->left -= rest;
			d->want = 0;
			count(CNT_H2_PARTIAL);
		} else {
			count(CNT_H2_CUT);
			bad = 1;
		}
	}
	__u32 off = w->off;
	if (off > H2_DATA_LEN - H2_RESERVE)
		off = H2_DATA_LEN - H2_RESERVE;
	if (rest || bad)
		off = h2_lost(data, off, rest ? rest : 1);
	if (bad)
		st->h2 = H2_DEAD;
	if (off || flags)
		h2_submit_walk(&s->ev, st, io, dir, flags, off);
}

/* The connection is HTTP/2 from now on, its first record flagged `first`;
 * the caller sets what each direction skips before its first frame. */
static __always_inline void h2_begin(struct conn_state *st, __u8 first)
{
	st->h2 = H2_LIVE;
	st->phase = PHASE_IDLE;
	st->pend_len = 0;
	__builtin_memset(st->h2d, 0, sizeof(st->h2d));
	st->first = first;
	count(CNT_H2_CONNS);
}

/* The client preface went by as a connection's first bytes: from now on it
 * is HTTP/2 (the caller walks these bytes: capture.h). `pend` bytes of the
 * preface came in an earlier read (held as the start of a possible request
 * line). */
static __always_inline void h2_start(struct conn_state *st, __u8 dir, __u32 pend)
{
	h2_begin(st, IOF_START);
	struct h2_dir *d = dir == IO_SEND ? &st->h2d[1] : &st->h2d[0];
	d->skip = H2_PREFACE_LEN - (pend & (PREFIX_LEN - 1));
}

/* The longest 101 head looked at for an `Upgrade: h2c` switch. */
#define H2C_HEAD_MAX 255

/* The length of the 101 response head at the start of the first segment,
 * through its empty line, if it names "h2c" (the `Upgrade` token: a 101
 * to a WebSocket or other upgrade does not) and ends in the first
 * H2C_HEAD_MAX bytes; else 0 (the connection is then left alone, as after
 * any other 101: counted as upgraded). */
static __always_inline __u32 h2c_head_len(const struct segs *sg)
{
	if (!sg->n)
		return 0;
	__u32 zero = 0;
	struct h2_scratch *s = bpf_map_lookup_elem(&h2_scratch, &zero);
	if (!s)
		return 0;
	__u64 len = sg->len[0];
	if (len > H2C_HEAD_MAX)
		len = H2C_HEAD_MAX;
	if (len < 4)
		return 0;
	__u8 *b = s->ev.data;
	barrier_var(len);
	if (bpf_probe_read_user(b, len & H2C_HEAD_MAX, sg->base[0]))
		return 0;
	/* The last four bytes in one word: one compare per byte for each of
	 * "\r\n\r\n" and "h2c". */
	__u32 w = 0;
	int h2c = 0;
	s->walk.pos = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < H2C_HEAD_MAX; i++) {
		if (i >= len)
			return 0;
		w = (w << 8) | b[i];
		if ((w & 0xffffff) == 0x683263) /* "h2c" */
			h2c = 1;
		if (w == 0x0d0a0d0a) { /* "\r\n\r\n" */
			if (!h2c)
				return 0;
			s->walk.pos = i + 1;
			break;
		}
	}
	/* The length goes through the map: the verifier sees an unknown
	 * value, so the code after this is verified once, not once per
	 * length. */
	asm volatile("" ::: "memory");
	__u64 head = s->walk.pos;
	return head <= H2C_HEAD_MAX ? head : 0;
}

/* A 101 (in direction `dir`, its head `head` bytes from the start of `sg`)
 * answered an `Upgrade: h2c` request (RFC 7540 3.2): the connection goes
 * on as HTTP/2 with that request as stream 1 (its HTTP/1 event, EVF_H2C,
 * was just emitted). Towards the client come the rest of the head, then
 * the server's frames; towards the server the client preface, then the
 * client's frames. The caller walks these bytes (capture.h). */
static __always_inline void h2_upgrade(struct conn_state *st, __u8 dir, __u32 head)
{
	h2_begin(st, IOF_START | H2F_UPGRADE);
	struct h2_dir *to_client = dir == IO_SEND ? &st->h2d[1] : &st->h2d[0];
	struct h2_dir *to_server = dir == IO_SEND ? &st->h2d[0] : &st->h2d[1];
	to_client->skip = head;
	to_server->skip = H2_PREFACE_LEN;
}

/* The connection closed: user space ends its open streams (a record built
 * in the ring: io_close). */
static __always_inline void h2_close(struct conn_state *st, struct sock *sk)
{
	st->h2 = H2_LIVE; /* (a dead one's close is reported too) */
	if (io_close(EV_H2, st, sk)) {
		count(CNT_H2_LOST);
		st->h2 = H2_DEAD;
		return;
	}
	count(CNT_H2_EVENTS);
}

#endif
