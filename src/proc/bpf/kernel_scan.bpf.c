// SPDX-License-Identifier: GPL-2.0
/* The process scan's BPF iterator, compiled with clang at build time and
 * loaded through a libbpf skeleton (kernel_scan_loaders.c). Every member read
 * is a CO-RE relocation (kernel_types.h), resolved against the running
 * kernel's BTF at load time.
 *
 * One task iterator program, gpureap_scan: per thread-group leader what
 * status and stat hold, so the scan opens two files less per process, and its
 * css_set, so it reads /proc/PID/cgroup once per css_set (kernel_tasks.bpf.h);
 * then per descriptor table its GPU candidates and its count of open
 * descriptors, read from the table itself (no file reference taken per
 * descriptor, as the task_file iterator takes). One program: each costs its
 * load a search of the kernel's BTF for its attach point.
 * kernel_scan_compat.bpf.c is the task_file form, for kernels before 5.17. */
#include "kernel_tasks.bpf.h"

/* bpf_seq_write is GPL-only, like every iterator helper. */
char LICENSE[] SEC("license") = "GPL";

/* The regular files the reader names by inode number (read-only data, set
 * before load: the simulated GPU's device files; none on a real node). */
const volatile __u32 gpureap_match_inode_count = 0;
const volatile __u64 gpureap_match_inodes[GPUREAP_MAX_MATCH_INODES] = {};

/* 0: css_set records only. The reader clears it to run the program again
 * for the css_set re-check (proc/scan.cpp), which needs nothing else. */
volatile __u32 gpureap_walk_tables = 1;

/* A walk shared by readers on several threads, set before they read: reader
 * i (its thread id in gpureap_shard_readers[i]) writes the processes whose
 * tgid modulo gpureap_shard_count is i. The walk is bound by memory latency,
 * one core's misses at a time; shares run on as many cores at once. 0 or 1:
 * one reader writes every process. In .data with the switch above: the
 * reader sets them all in one map update. */
volatile __u32 gpureap_shard_count SEC(".data") = 0;
volatile __u32 gpureap_shard_readers[GPUREAP_MAX_SHARDS] SEC(".data") = {};

/* One table's walk, shared by its loops' callbacks (on the program's stack). */
struct walk {
	struct seq_file *seq;
	struct file **fd;
	unsigned long *open_fds;
	__u64 word;  /* open_fds bits of the 64 descriptors from `base` */
	__u32 base;
	__u32 open;  /* descriptors open */
	__u32 written;
	__u32 complete;
	__u32 tgid;
	__u32 pid;
	__u64 start_ns;
};

static __always_inline __u32 popcount64(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (__u32)((x * 0x0101010101010101ULL) >> 56);
}

/* Whether the open file at `file` (a kernel address) may be a GPU's: a
 * character device other than the terminals and nulls, or a regular file the
 * reader named by inode number. Fills r's mode, rdev, dev and ino; 1 when it
 * may. A global function, on purpose: the verifier checks it once, by itself,
 * where a static one is checked again on each pass the verifier makes over
 * the bpf_loop callbacks that call it (their loads measured ~2.8 ms of the
 * program's ~4 ms). */
__noinline int gpureap_candidate(__u64 file, struct gpureap_fd_record *r)
{
	struct file *f = (struct file *)(unsigned long)file;
	struct inode *inode = 0;
	__u16 mode = 0;

	if (!r || !file)
		return 0;
	if (READ_FIELD(inode, f, f_inode) || !inode)
		return 0;
	if (READ_FIELD(mode, inode, i_mode))
		return 0;
	r->mode = mode;
	r->rdev = 0;
	r->dev = 0;
	r->ino = 0;
	if ((mode & 0170000) == 0020000) { /* S_ISCHR */
		__u32 rdev = 0;

		if (READ_FIELD(rdev, inode, i_rdev) ||
		    gpureap_never_a_gpu(rdev >> 20, rdev & 0xfffff))
			return 0;
		r->rdev = rdev;
		return 1;
	}
	if ((mode & 0170000) == 0100000 && gpureap_match_inode_count) { /* S_ISREG */
		unsigned long ino = 0;
		struct super_block *sb = 0;
		__u32 dev = 0;
		int named = 0;

		if (READ_FIELD(ino, inode, i_ino))
			return 0;
#pragma unroll
		for (__u32 i = 0; i < GPUREAP_MAX_MATCH_INODES; i++) {
			if (i < gpureap_match_inode_count && gpureap_match_inodes[i] == ino)
				named = 1;
		}
		if (!named)
			return 0;
		if (READ_FIELD(sb, inode, i_sb) || !sb || READ_FIELD(dev, sb, s_dev))
			return 0;
		r->dev = dev;
		r->ino = ino;
		return 1;
	}
	return 0;
}

/* Descriptor base + bit of the table, when open: written when it may be a
 * GPU's. 1 ends this word (none open above `bit`, or the cap reached, which
 * clears `complete` and so ends the walk). */
static long walk_descriptor(__u64 bit, void *ctx)
{
	struct walk *w = ctx;
	struct gpureap_fd_record r = {};
	struct file *file = 0;
	const __u32 fd = w->base + (__u32)(bit & 63);

	if (!(w->word >> (bit & 63)))
		return 1; /* no open descriptor left in this word */
	if (!(w->word & (1ULL << (bit & 63))))
		return 0;
	if (READ_AT(file, w->fd + fd) || !file)
		return 0;
	if (!gpureap_candidate((__u64)(unsigned long)file, &r))
		return 0;
	if (w->written >= GPUREAP_MAX_CANDIDATES) {
		w->complete = 0;
		return 1;
	}
	r.kind = GPUREAP_REC_FD;
	r.unused = 0;
	r.tgid = w->tgid;
	r.pid = w->pid;
	r.start_ns = w->start_ns;
	r.fd = fd;
	r.file = (__u64)(unsigned long)file;
	bpf_seq_write(w->seq, &r, sizeof(r));
	w->written++;
	return 0;
}

/* 64 descriptors from index * 64: their open_fds word, then each open one.
 * Empty words cost one read: a table of 2^20 slots may hold a dozen. */
static long walk_word(__u64 index, void *ctx)
{
	struct walk *w = ctx;

	if (READ_AT(w->word, w->open_fds + index)) {
		w->complete = 0;
		return 1;
	}
	if (!w->word)
		return 0;
	w->open += popcount64(w->word);
	w->base = (__u32)index * 64;
	bpf_loop(64, walk_descriptor, w, 0);
	return w->complete ? 0 : 1;
}

/* Each descriptor table once: a thread-group leader's, and a thread's that
 * has its own (unshare(CLONE_FILES)); threads sharing the leader's are
 * skipped, as the task_file iterator skips them. The table is read under
 * the iterator's RCU read lock, as the kernel's own lockless lookups read it. */
static __always_inline void walk_table(struct seq_file *seq, struct task_struct *task,
				       struct files_struct *files)
{
	struct fdtable *fdt = 0;
	unsigned int max_fds = 0;
	struct walk w = {};
	struct gpureap_table_record end = {};

	w.seq = seq;
	w.tgid = (__u32)task->tgid;
	w.pid = (__u32)task->pid;
	w.start_ns = task->start_boottime;
	w.complete = 1;
	if (READ_FIELD(fdt, files, fdt) || !fdt ||
	    READ_FIELD(max_fds, fdt, max_fds) ||
	    READ_FIELD(w.fd, fdt, fd) ||
	    READ_FIELD(w.open_fds, fdt, open_fds) ||
	    max_fds > GPUREAP_MAX_FD_WORDS * 64)
		w.complete = 0;
	else
		bpf_loop((max_fds + 63) / 64, walk_word, &w, 0);

	end.kind = GPUREAP_REC_TABLE;
	end.tgid = w.tgid;
	end.pid = w.pid;
	end.open_fds = w.open;
	end.start_ns = w.start_ns;
	end.complete = w.complete;
	bpf_seq_write(seq, &end, sizeof(end));
}

/* Whether this reader writes the task's process. A reader not named (none
 * should read while shares are set) writes nothing: a process written by two
 * readers would count twice; one written by none is read from /proc. */
static __always_inline int in_share(const struct task_struct *task)
{
	const __u32 count = gpureap_shard_count;
	const __u32 me = (__u32)bpf_get_current_pid_tgid();

	if (count <= 1)
		return 1;
	for (__u32 i = 0; i < GPUREAP_MAX_SHARDS && i < count; i++) {
		if (gpureap_shard_readers[i] == me)
			return (__u32)task->tgid % count == i;
	}
	return 0;
}

SEC("iter/task")
int gpureap_scan(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct files_struct *files = 0;
	const int leader = task && task->tgid == task->pid;

	if (!task) {
		write_end_record(seq);
		return 0;
	}
	if (!gpureap_walk_tables) {
		if (leader) {
			struct gpureap_css_record r = {};

			r.kind = GPUREAP_REC_CSS;
			r.tgid = (__u32)task->tgid;
			r.css_set = (task->flags & GPUREAP_PF_EXITING) ? 0 : read_css_set(task);
			bpf_seq_write(seq, &r, sizeof(r));
		}
		return 0;
	}
	if (!in_share(task))
		return 0;
	if (leader)
		write_task_record(seq, task);
	if (READ_FIELD(files, task, files) || !files)
		return 0;
	if (!leader) {
		struct task_struct *group_leader = 0;
		struct files_struct *leader_files = 0;

		if (READ_FIELD(group_leader, task, group_leader) ||
		    !group_leader ||
		    READ_FIELD(leader_files, group_leader, files) ||
		    leader_files == files)
			return 0;
	}
	walk_table(seq, task, files);
	return 0;
}
