/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A process's file descriptor to its file or TCP socket, through the
 * current task's file table (CO-RE reads): the syscall hooks
 * (syscalls.bpf.c), whose tracepoints give an fd, the Go TLS uprobes
 * (go_tls.h), which read the fd from the Go connection, and the TLS
 * mapping hook (tls_files.bpf.c), which is given the mapped file's fd.
 */
#ifndef RINGTAIL_FDSOCK_H
#define RINGTAIL_FDSOCK_H

#define FD_IPPROTO_TCP 6
#define FD_SOCK_STREAM 1
#define S_IFMT 00170000
#define S_IFSOCK 0140000

/* The file behind this process's `fd`, or NULL (no such fd). */
static __always_inline struct file *fd_file(__s32 fd)
{
	if (fd < 0)
		return NULL;
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
	if (!fdt || (__u32)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = NULL;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		return NULL;
	return f;
}

/* The TCP socket behind this process's `fd`, or NULL (not a socket, not
 * TCP, no such fd). */
static __always_inline struct sock *fd_tcp_sock(__s32 fd)
{
	struct file *f = fd_file(fd);
	if (!f)
		return NULL;
	if ((BPF_CORE_READ(f, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return NULL;
	struct socket *so = BPF_CORE_READ(f, private_data);
	struct sock *sk = BPF_CORE_READ(so, sk);
	if (!sk || BPF_CORE_READ(sk, sk_protocol) != FD_IPPROTO_TCP || BPF_CORE_READ(sk, sk_type) != FD_SOCK_STREAM)
		return NULL;
	return sk;
}

#endif
