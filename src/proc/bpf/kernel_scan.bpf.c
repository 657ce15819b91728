// SPDX-License-Identifier: GPL-2.0
/* The process scan's two BPF iterators, compiled with clang at build time and
 * loaded through a libbpf skeleton (kernel_scan_loaders.c). Every member read
 * is a CO-RE relocation (kernel_types.h), resolved against the running
 * kernel's BTF at load time.
 *
 * gpureap_fds: one record per open descriptor of every task (task_file).
 * gpureap_tasks: one record per thread-group leader with what status and
 * stat hold (task), so the scan opens two files less per process, and its
 * css_set, so it reads /proc/PID/cgroup once per css_set. */
#include "kernel_types.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "records.h"

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
		/* The iteration's end: our own tgid tells the reader which PID
		 * namespace numbered the records (the initial one, or it declines). */
		r.tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
		r.fd = ~0U;
		bpf_seq_write(seq, &r, sizeof(r));
		return 0;
	}
	if (!task)
		return 0;
	/* Direct loads from the iterator's trusted pointers: a handful per
	 * descriptor, cheaper than a helper call each. */
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

/* A pid's number at one level of PID namespaces: numbers[] is a flexible
 * array of struct upid, stepped by that struct's size in this kernel. */
static __always_inline int read_upid_nr(__u32 *dst, const struct pid *pid, __u32 level)
{
	const char *numbers = (const char *)pid + bpf_core_field_offset(struct pid, numbers);
	const char *nr = numbers + level * bpf_core_type_size(struct upid) +
			 bpf_core_field_offset(struct upid, nr);
	return bpf_probe_read_kernel(dst, sizeof(*dst), nr);
}

/* What stat holds, as do_task_stat computes it for the initial PID namespace.
 * Read through bpf_probe_read_kernel: values land on the stack as scalars, so
 * the verifier walks no BTF pointer (each such walk searched vmlinux BTF, ~1 ms,
 * on 6.x). Returns 1 when every read succeeded. */
static __always_inline __u32 read_stat(struct gpureap_task_record *r, struct task_struct *task)
{
	struct task_struct *parent = 0;
	struct signal_struct *signal = 0;
	struct pid *group = 0, *session = 0;
	int failed = 0;

	failed |= bpf_core_read(&r->flags, sizeof(r->flags), &task->flags);
	if (bpf_core_field_exists(task->__state)) {
		failed |= bpf_core_read(&r->state, sizeof(r->state), &task->__state);
	} else {
		struct task_struct___pre_5_14 *old = (void *)task;
		long state = 0;
		failed |= bpf_core_read(&state, sizeof(state), &old->state);
		r->state = (__u32)state;
	}
	failed |= bpf_core_read(&r->exit_state, sizeof(r->exit_state), &task->exit_state);
	failed |= bpf_core_read(&r->comm, sizeof(r->comm), &task->comm);
	failed |= bpf_core_read(&parent, sizeof(parent), &task->real_parent);
	if (failed || !parent)
		return 0;
	failed |= bpf_core_read(&r->ppid, sizeof(r->ppid), &parent->tgid);
	failed |= bpf_core_read(&signal, sizeof(signal), &task->signal);
	if (failed || !signal)
		return 0;
	failed |= bpf_core_read(&group, sizeof(group), &signal->pids[GPUREAP_PIDTYPE_PGID]);
	failed |= bpf_core_read(&session, sizeof(session), &signal->pids[GPUREAP_PIDTYPE_SID]);
	if (failed || !group || !session)
		return 0;
	/* Level 0: the reader is in the initial PID namespace (checked by the
	 * descriptor iterator's end marker). */
	failed |= read_upid_nr(&r->pgrp, group, 0);
	failed |= read_upid_nr(&r->session, session, 0);
	return failed ? 0 : 1;
}

/* The task's css_set: the reader reads /proc/PID/cgroup once per css_set,
 * not once per process. 0 when the read fails. */
static __always_inline __u64 read_css_set(struct task_struct *task)
{
	struct css_set *cset = 0;

	if (bpf_core_read(&cset, sizeof(cset), &task->cgroups))
		return 0;
	return (__u64)(unsigned long)cset;
}

SEC("iter/task")
int gpureap_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct gpureap_task_record r = {};
	const struct cred *cred = 0;
	struct pid *pid = 0;
	__u32 level = 0;

	if (!task)
		return 0;
	if (task->tgid != task->pid)
		return 0; /* threads: their leader speaks for the process */
	r.tgid = (__u32)task->tgid;
	r.start_ns = task->start_boottime;
	r.uid = ~0U;
	r.level = ~0U;
	if (bpf_core_read(&cred, sizeof(cred), &task->real_cred) == 0 && cred) {
		__u32 uid = 0;
		/* Not straight into r.uid: a failed read zeroes its target (root). */
		if (bpf_core_read(&uid, sizeof(uid), &cred->uid.val) == 0)
			r.uid = uid;
	}
	r.stat_ok = read_stat(&r, task);
	r.css_set = read_css_set(task);
	if (bpf_core_read(&pid, sizeof(pid), &task->thread_pid) == 0 && pid &&
	    bpf_core_read(&level, sizeof(level), &pid->level) == 0) {
		r.level = level;
#pragma unroll
		for (__u32 i = 0; i < GPUREAP_MAX_NS_LEVELS; i++) {
			/* A failed read leaves 0, never a pid: the reader then reads status. */
			if (i <= level)
				read_upid_nr(&r.nspid[i], pid, i);
		}
	}
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
