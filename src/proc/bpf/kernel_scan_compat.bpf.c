// SPDX-License-Identifier: GPL-2.0
/* The scan's BPF iterators for kernels where the table walk (kernel_scan.bpf.c)
 * cannot load: bpf_loop came in Linux 5.17, iterators in 5.8. Loaded through
 * libbpf only (the light skeleton needs 5.17 too), and where the reader names
 * more regular files than the walk takes.
 *
 * gpureap_fds: one record per open descriptor of every task (task_file).
 * gpureap_tasks: one record per thread-group leader (kernel_tasks.bpf.h). */
#include "kernel_tasks.bpf.h"

/* bpf_seq_write is GPL-only, like every iterator helper. */
char LICENSE[] SEC("license") = "GPL";

SEC("iter/task_file")
int gpureap_fds(struct bpf_iter__task_file *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct gpureap_fd_record r = {};

	if (!file) {
		write_end_record(seq, 0);
		return 0;
	}
	if (!task)
		return 0;
	/* Direct loads from the iterator's trusted pointers: a handful per
	 * descriptor, cheaper than a helper call each. */
	r.kind = GPUREAP_REC_FD;
	r.tgid = (__u32)task->tgid;
	r.pid = (__u32)task->pid;
	r.start_ns = task->start_boottime;
	r.fd = ctx->fd;
	r.file = (__u64)(unsigned long)file;
	struct inode *inode = file->f_inode;
	if (inode) {
		r.mode = inode->i_mode;
		r.rdev = inode->i_rdev;
		r.ino = inode->i_ino;
		struct super_block *sb = inode->i_sb;
		if (sb)
			r.dev = sb->s_dev;
	}
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}

SEC("iter/task")
int gpureap_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (!task) {
		write_end_record(ctx->meta->seq, 0);
		return 0;
	}
	if (task->tgid != task->pid)
		return 0; /* threads: their leader speaks for the process */
	write_task_record(ctx->meta->seq, task, 0);
	return 0;
}
