/* What the scan's task programs write per thread-group leader, shared by
 * kernel_scan.bpf.c and kernel_scan_compat.bpf.c (each includes it once). */
#ifndef GPUREAP_PROC_BPF_KERNEL_TASKS_BPF_H
#define GPUREAP_PROC_BPF_KERNEL_TASKS_BPF_H

#include "kernel_types.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "records.h"

/* How the programs read kernel memory: READ_AT(dst, addr) reads dst's size at
 * kernel address addr, READ_FIELD(dst, ptr, member) a member (a CO-RE
 * relocation); 0 when read. GPUREAP_DIRECT_READS (the build tried first):
 * plain loads from read-only untrusted memory made by bpf_rdonly_cast(addr, 0)
 * (Linux 6.17+), which the JIT guards with an exception table (a bad address
 * reads as 0, so every pointer is checked before use). The verifier then walks
 * no BTF pointer (each such walk searched the kernel's type names). Else each
 * read is a bpf_probe_read_kernel call, which every kernel with iterators has. */
#ifdef GPUREAP_DIRECT_READS
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;
#define READ_AT(dst, addr) ((dst) = *(const typeof(dst) *)bpf_rdonly_cast((const void *)(addr), 0), 0)
#else
#define READ_AT(dst, addr) bpf_probe_read_kernel(&(dst), sizeof(dst), (const void *)(addr))
#endif
#define READ_FIELD(dst, ptr, member) READ_AT(dst, __builtin_preserve_access_index(&(ptr)->member))

/* A pid's number at one level of PID namespaces: numbers[] is a flexible
 * array of struct upid, stepped by that struct's size in this kernel. */
static __always_inline int read_upid_nr(__u32 *dst, const struct pid *pid, __u32 level)
{
	const char *numbers = (const char *)pid + bpf_core_field_offset(struct pid, numbers);
	const char *nr = numbers + level * bpf_core_type_size(struct upid) +
			 bpf_core_field_offset(struct upid, nr);
	return READ_AT(*dst, nr);
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

	failed |= READ_FIELD(r->flags, task, flags);
	if (bpf_core_field_exists(task->__state)) {
		failed |= READ_FIELD(r->state, task, __state);
	} else {
		struct task_struct___pre_5_14 *old = (void *)task;
		long state = 0;
		failed |= READ_FIELD(state, old, state);
		r->state = (__u32)state;
	}
	failed |= READ_FIELD(r->exit_state, task, exit_state);
	failed |= bpf_core_read(&r->comm, sizeof(r->comm), &task->comm); /* an array: one helper call */
	failed |= READ_FIELD(parent, task, real_parent);
	if (failed || !parent)
		return 0;
	failed |= READ_FIELD(r->ppid, parent, tgid);
	failed |= READ_FIELD(signal, task, signal);
	if (failed || !signal)
		return 0;
	failed |= READ_FIELD(group, signal, pids[GPUREAP_PIDTYPE_PGID]);
	failed |= READ_FIELD(session, signal, pids[GPUREAP_PIDTYPE_SID]);
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

	if (READ_FIELD(cset, task, cgroups))
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

	if (READ_FIELD(mm, task, mm) || !mm)
		return 0;
	failed |= READ_FIELD(r->arg_start, mm, arg_start);
	failed |= READ_FIELD(r->arg_end, mm, arg_end);
	failed |= READ_FIELD(r->env_start, mm, env_start);
	failed |= READ_FIELD(r->env_end, mm, env_end);
	return failed ? 0 : 1;
}

/* The task record of a thread-group leader. `areas`, when not NULL, gets
 * its argument and environment areas (areas->areas_ok 0: none). */
static __always_inline void write_task_record(struct seq_file *seq, struct task_struct *task,
					      struct gpureap_task_record *areas)
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
	if (READ_FIELD(cred, task, real_cred) == 0 && cred) {
		__u32 uid = 0;
		/* Not straight into r.uid: a failed read zeroes its target (root). */
		if (READ_FIELD(uid, cred, uid.val) == 0)
			r.uid = uid;
	}
	r.stat_ok = read_stat(&r, task);
	r.css_set = read_css_set(task);
	r.areas_ok = read_areas(&r, task);
	if (READ_FIELD(pid, task, thread_pid) == 0 && pid &&
	    READ_FIELD(level, pid, level) == 0) {
		r.level = level;
#pragma unroll
		for (__u32 i = 0; i < GPUREAP_MAX_NS_LEVELS; i++) {
			/* A failed read leaves 0, never a pid: the reader then reads status. */
			if (i <= level)
				read_upid_nr(&r.nspid[i], pid, i);
		}
	}
	bpf_seq_write(seq, &r, sizeof(r));
	if (areas) {
		areas->areas_ok = r.areas_ok;
		areas->arg_start = r.arg_start;
		areas->arg_end = r.arg_end;
		areas->env_start = r.env_start;
		areas->env_end = r.env_end;
	}
}

/* The iteration's end, with the reader's tgid as the initial PID namespace
 * numbers it and the count of tasks shown before it. */
static __always_inline void write_end_record(struct seq_file *seq, __u64 tasks)
{
	struct gpureap_end_record r = {};

	r.kind = GPUREAP_REC_END;
	r.reader_tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
	r.tasks = (__u32)tasks;
	bpf_seq_write(seq, &r, sizeof(r));
}

#endif
