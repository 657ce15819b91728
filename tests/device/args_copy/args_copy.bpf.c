// SPDX-License-Identifier: GPL-2.0
/* Experiment (issue 12): what copying each process's argv costs inside a
 * sleepable task iterator (bpf_copy_from_user_task) against the scan's
 * process_vm_readv per process. copy_argv 0: one header per process only. */
#include "kernel_types.h"

#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 copy_argv = 0;

#define ARGS_CAP 4096

struct {
	__uint(type, 2); /* BPF_MAP_TYPE_ARRAY */
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, char[ARGS_CAP]);
} args_buf SEC(".maps");

struct args_header {
	__u32 tgid;
	__u32 len;
	__u64 arg_start;
	__u64 arg_end;
};

SEC("iter.s/task")
int args_copy(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct args_header h = {};
	struct mm_struct *mm;
	__u32 key = 0;
	__u64 len;
	char *buf;

	if (!task || task->tgid != task->pid)
		return 0;
	mm = task->mm;
	if (!mm)
		return 0;
	h.tgid = (__u32)task->tgid;
	h.arg_start = mm->arg_start;
	h.arg_end = mm->arg_end;
	len = h.arg_end - h.arg_start;
	if (len > ARGS_CAP)
		len = ARGS_CAP;
	buf = bpf_map_lookup_elem(&args_buf, &key);
	if (!buf)
		return 0;
	if (!copy_argv || !len || bpf_copy_from_user_task(buf, (__u32)len, (void *)h.arg_start, task, 0))
		len = 0;
	h.len = (__u32)len;
	bpf_seq_write(ctx->meta->seq, &h, sizeof(h));
	if (len)
		bpf_seq_write(ctx->meta->seq, buf, (__u32)len);
	return 0;
}
