/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * HTTP/1 recognition, on the first PREFIX_LEN bytes of a send or receive:
 * is this a request line, what status does this status line carry. Parsing
 * in the kernel stops there; user space parses the captured head.
 */
#ifndef RINGTAIL_HTTP1_H
#define RINGTAIL_HTTP1_H

#include "maps.h"

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

#endif
