/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * HTTP/1 recognition, on the first PREFIX_LEN bytes of a send or receive:
 * is this a request line, what status does this status line carry. Parsing
 * in the kernel stops there; user space parses the captured head.
 *
 * What servers accept, and what is followed here (anything else a server
 * answers is counted, CNT_UNRECOGNIZED or an orphan response, never lost):
 *  - empty lines (CR, LF) before the request line: skipped, as nginx, Node,
 *    Go and Python do (RFC 9112 2.2), up to PREFIX_LEN - 1 bytes of them;
 *  - the method: any RFC 9110 token of 1..MAX_METHOD characters, either
 *    case (Go serves "get", Python answers it); longer methods are counted;
 *  - SP or HTAB after the method (Python splits on any whitespace);
 *  - targets in origin form ("/x"), asterisk form ("*"), absolute form
 *    ("http://", "HTTP://"), and authority form after CONNECT;
 *  - bare LF line ends: the kernel never looks past the request line's
 *    start, user space accepts them.
 * "PRI * HTTP/2.0" (the HTTP/2 preface) is not HTTP/1.
 */
#ifndef RINGTAIL_HTTP1_H
#define RINGTAIL_HTTP1_H

#include "maps.h"

/* Longest method recognised: it, a separator and the target's first byte
 * fit in the PREFIX_LEN bytes looked at. */
#define MAX_METHOD (PREFIX_LEN - 2)
/* Index mask of the 2 * PREFIX_LEN byte views the helpers read. */
#define VIEW_MASK (PREFIX_LEN * 2 - 1)

/*
 * The scans below are branch-free: BPF has no conditional set, so every
 * comparison is a jump, and jumps in loops multiply the states the
 * verifier must walk (past its limit). 0/1 values combine with & | ^. The
 * loops are not unrolled (unrolled, they spill past the 512-byte stack);
 * the verifier walks each bounded loop once per iteration, on one path.
 */

/* 1 if a == b, else 0 (both below 2^63). */
static __always_inline __u64 eq(__u64 a, __u64 b)
{
	__u64 d = (a ^ b) - 1;
	barrier_var(d); /* or clang turns it back into a compare-and-jump */
	return d >> 63;
}

/* 1 if a < b, else 0 (both below 2^63). */
static __always_inline __u64 lt(__u64 a, __u64 b)
{
	__u64 d = a - b;
	barrier_var(d);
	return d >> 63;
}

/* tchar (RFC 9110 5.6.2), the characters of a method, as two bitmaps:
 * "!#$%&'*+-." and digits (0..63); letters and "^_`|~" (64..127). */
#define TCHAR_LO 0x03ff6cfa00000000ULL
#define TCHAR_HI 0x57ffffffc7fffffeULL

static __always_inline __u64 is_tchar(__u64 c)
{
	__u64 hi = (c >> 6) & 1;
	__u64 m = TCHAR_LO ^ ((TCHAR_LO ^ TCHAR_HI) & (0 - hi));
	return (m >> (c & 63)) & 1 & (((c >> 7) & 1) ^ 1);
}

static __always_inline __u64 is_sep(__u64 c)
{
	return eq(c, ' ') | eq(c, '\t');
}

/* Leading CR and LF bytes among the first n (at most PREFIX_LEN - 1). */
static __always_inline __u32 leading_newlines(const __u8 *p, __u32 n)
{
	__u64 k = 0, in = 1;
#pragma clang loop unroll(disable)
	for (int i = 0; i < PREFIX_LEN - 1; i++) {
		__u64 c = p[i];
		in &= lt(i, n) & (eq(c, '\r') | eq(c, '\n'));
		k += in;
	}
	return k;
}

/* Does a request line start at p[skip] (of n bytes)? p holds at least
 * 2 * PREFIX_LEN readable bytes; those from n on are never part of it. */
static __always_inline int is_request(const __u8 *p, __u32 skip, __u32 n)
{
	__u64 in = 1, len = 0, bad = 0;
	skip &= PREFIX_LEN - 1;
#pragma clang loop unroll(disable)
	for (int i = 0; i < MAX_METHOD + 1; i++) {
		__u64 c = p[(skip + i) & VIEW_MASK];
		__u64 sep = is_sep(c);
		bad |= in & (sep ^ 1) & (is_tchar(c) ^ 1);
		in &= sep ^ 1; /* 1 until the separator */
		len += in;     /* method characters */
	}
	/* no separator in reach, a non-token byte, or no target byte yet */
	if (bad | in | eq(len, 0) | (lt(skip + len + 1, n) ^ 1))
		return 0;
	const __u8 *m = &p[skip];
	if (len == 3 && m[0] == 'P' && m[1] == 'R' && m[2] == 'I')
		return 0;
	__u8 t = p[(skip + len + 1) & VIEW_MASK];
	if (t == '/' || t == '*')
		return 1;
	if (t == 'h' || t == 'H') {
		/* absolute form: "http:" or "https", any case. Not any word
		 * starting with h: the tail of a request the server answered
		 * early and drains ("aaaa HTTP/1.1") is no request. A target cut
		 * off by the read gets the benefit of the doubt. */
		__u32 q = skip + len + 2;
		if (q + 4 > n)
			return 1;
		__u8 a = p[q & VIEW_MASK] | 0x20, b = p[(q + 1) & VIEW_MASK] | 0x20;
		__u8 c = p[(q + 2) & VIEW_MASK] | 0x20, d = p[(q + 3) & VIEW_MASK];
		return a == 't' && b == 't' && c == 'p' && (d == ':' || (d | 0x20) == 's');
	}
	/* CONNECT host:port */
	return len == 7 && m[0] == 'C' && m[1] == 'O' && m[2] == 'N' && m[3] == 'N';
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

/* A final response: interim ones (1xx but 101) are followed by another. */
static __always_inline int is_final(__u16 status)
{
	return status >= 200 || status == 101;
}

/* Could these n bytes (past `skip` empty-line bytes) be the start of a
 * request line that the next read completes ("G", "GET", "GET ")? */
static __always_inline int request_prefix(const __u8 *p, __u32 skip, __u32 n)
{
	__u64 in = 1, bad;
	skip &= PREFIX_LEN - 1;
	bad = is_sep(p[skip]); /* a method has at least one character */
#pragma clang loop unroll(disable)
	for (int i = 0; i < PREFIX_LEN; i++) {
		__u64 c = p[(skip + i) & VIEW_MASK];
		__u64 live = in & lt(skip + i, n);
		__u64 sep = is_sep(c);
		bad |= live & (sep ^ 1) & (is_tchar(c) ^ 1);
		in &= (live & sep) ^ 1;
	}
	return (bad ^ 1) & lt(skip, n) & lt(n, PREFIX_LEN);
}

#endif
