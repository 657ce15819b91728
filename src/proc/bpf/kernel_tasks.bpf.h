/* What the scan's task programs write per thread-group leader, shared by
 * kernel_scan.bpf.c and kernel_scan_compat.bpf.c (each includes it once). */
#ifndef GPUREAP_PROC_BPF_KERNEL_TASKS_BPF_H
#define GPUREAP_PROC_BPF_KERNEL_TASKS_BPF_H

#include "kernel_types.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "records.h"

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

/* Its argument and environment areas (mm->arg_start .. env_end). Returns 1
 * when all four were read; 0 without an mm (a kernel thread, a zombie) or
 * when a read fails, and the reader opens /proc/PID/cmdline and environ. */
static __always_inline __u32 read_areas(struct gpureap_task_record *r, struct task_struct *task)
{
	struct mm_struct *mm = 0;
	int failed = 0;

	if (bpf_core_read(&mm, sizeof(mm), &task->mm) || !mm)
		return 0;
	failed |= bpf_core_read(&r->arg_start, sizeof(r->arg_start), &mm->arg_start);
	failed |= bpf_core_read(&r->arg_end, sizeof(r->arg_end), &mm->arg_end);
	failed |= bpf_core_read(&r->env_start, sizeof(r->env_start), &mm->env_start);
	failed |= bpf_core_read(&r->env_end, sizeof(r->env_end), &mm->env_end);
	return failed ? 0 : 1;
}

/* The task record of a thread-group leader. */
static __always_inline void write_task_record(struct seq_file *seq, struct task_struct *task)
{
	struct gpureap_task_record r = {};
	const struct cred *cred = 0;
	struct pid *pid = 0;
	__u32 level = 0;

	r.kind = GPUREAP_REC_TASK;
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
	r.areas_ok = read_areas(&r, task);
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
	bpf_seq_write(seq, &r, sizeof(r));
}

/* The iteration's end, with the reader's tgid as the initial PID namespace numbers it. */
static __always_inline void write_end_record(struct seq_file *seq)
{
	struct gpureap_end_record r = {};

	r.kind = GPUREAP_REC_END;
	r.reader_tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
	bpf_seq_write(seq, &r, sizeof(r));
}

#endif
