/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The user buffers of a socket syscall (x86_64), from its arguments: the
 * syscall tracepoints give them directly; the socket hooks fire inside
 * read/write/sendmsg/..., and bpf_task_pt_regs gives that syscall's.
 */
#ifndef RINGTAIL_IO_H
#define RINGTAIL_IO_H

#include "segs.h"

/* x86_64 syscall numbers of the calls whose buffers we can find. */
#define NR_READ 0
#define NR_WRITE 1
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_SENDFILE 40

/* The user buffers a send/receive of `len` bytes used: syscall `nr` with
 * its second and third arguments (the buffer, iovec array or msghdr; the
 * count). */
static __always_inline int syscall_segs(long nr, __u64 arg, __u64 arg3, long len, struct segs *sg)
{
	__u64 left = len;
	sg->n = 0;
	sg->total = len > 0xffffffff ? 0xffffffff : len;
	sg->iov = NULL;
	sg->iovcnt = 0;
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
		iovcnt = arg3;
	} else if (nr == NR_RECVMSG || nr == NR_SENDMSG) {
		struct user_msghdr m;
		if (bpf_probe_read_user(&m, sizeof(m), (const void *)arg))
			return -1;
		iovp = m.msg_iov;
		iovcnt = m.msg_iovlen;
	} else {
		return -1; /* sendfile, splice, io_uring: no user buffer to read */
	}
	sg->iov = iovp;
	sg->iovcnt = iovcnt;
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

#ifndef RINGTAIL_PORTABLE
/* The fd argument of the syscall that is running (the socket hooks fire
 * inside it). */
static __always_inline __s32 syscall_fd(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	return regs->di;
}

/* The same, from the registers of the syscall that is running (the socket
 * hooks fire inside it). */
static __always_inline int user_segs(long len, __s32 *fd, struct segs *sg)
{
	/* bpf_task_pt_regs gives a BTF pointer: plain loads, no helper calls */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	*fd = regs->di;
	return syscall_segs(regs->orig_ax, regs->si, regs->dx, len, sg);
}
#endif

#endif
