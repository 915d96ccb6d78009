/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * User memory a send or receive moved, as segments: what every hook family
 * hands the connection state machine (io.h finds them in a syscall's
 * registers; a TLS uprobe would find them in the library's arguments).
 */
#ifndef RINGTAIL_SEGS_H
#define RINGTAIL_SEGS_H

#include "maps.h"

/* With vectored I/O only the first MAX_SEGS iovecs are looked at: request
 * heads and status lines come first, and the capture is bounded anyway. */
#define MAX_SEGS 4

struct segs {
	const __u8 *base[MAX_SEGS];
	__u64 len[MAX_SEGS];
	__u32 n;
	__u32 total;
	/* The user iovec array and its count when the bytes came from one
	 * (else NULL): HTTP/2 framing (h2.h) reads the iovecs past MAX_SEGS
	 * from it, since it must account for every byte. */
	const void *iov;
	__u64 iovcnt;
};

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

#endif
