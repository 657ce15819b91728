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
 * kernel_scan_compat.bpf.c is the task_file form, for kernels before 5.17.
 *
 * The direct-reads build (GPUREAP_DIRECT_READS, Linux 6.17+) is sleepable:
 * after a leader's table it copies the leader's argv (and, asked for, the
 * environment of one whose table had candidates) from its memory with
 * bpf_copy_from_user_task, which the reader would otherwise copy with a
 * process_vm_readv each (that one pins the pages, and so gives a forked
 * worker its own copy of a page it shared with its parent; this one reads
 * them as /proc/PID/cmdline does). A sleepable program runs without the RCU
 * read lock, and taking it (bpf_rcu_read_lock) would cost each load two more
 * searches of the kernel's BTF for the kfuncs' names (0.8 ms measured on the
 * dev VM): the walk reads with loads that cannot fault (a bad address reads
 * as 0), and a table the task replaced while it was walked (its descriptors
 * grew past the table; the old one is freed after a grace period, which
 * may pass while this program sleeps) is reported incomplete, and the reader
 * walks /proc/PID/fd instead. */
#include "kernel_tasks.bpf.h"

/* bpf_seq_write is GPL-only, like every iterator helper. */
char LICENSE[] SEC("license") = "GPL";

/* The regular files the reader names by inode number (read-only data, set
 * before load: the simulated GPU's device files; none on a real node). */
const volatile __u32 gpureap_match_inode_count = 0;
const volatile __u64 gpureap_match_inodes[GPUREAP_MAX_MATCH_INODES] = {};
/* Bit (ino & 63) set for each of those inode numbers: the touch's sieve, so
 * that only a regular file whose bit is set goes to gpureap_candidate. */
const volatile __u64 gpureap_match_inode_bits = 0;

/* 1: copy the environment too, for a leader whose table had candidates
 * (read-only data, set before load). */
const volatile __u32 gpureap_copy_env = 0;

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

#ifdef GPUREAP_DIRECT_READS
/* Where the argument and environment areas are copied before they are
 * written: one buffer per reader (a sleepable program can be preempted while
 * it copies, and another reader run on the same CPU). */
struct {
	__uint(type, 2); /* BPF_MAP_TYPE_ARRAY */
	__uint(max_entries, GPUREAP_MAX_SHARDS);
	__type(key, __u32);
	__type(value, char[GPUREAP_ARGS_BYTES]);
} gpureap_args_buf SEC(".maps");
#endif

/* One table's walk, shared by its loops' callbacks (on the program's stack). */
struct walk {
	struct seq_file *seq;
	struct file **fd;
	unsigned long *open_fds;
	__u64 word;  /* open_fds bits of the 64 descriptors from `base` */
	__u64 maybe; /* those of them that may be a GPU's (the touch's sieve) */
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

/* Descriptor base + bit of the table, when the touch left it in w->maybe:
 * written when it may be a GPU's. 1 ends this word (none left above `bit`,
 * or the cap reached, which clears `complete` and so ends the walk). */
static long walk_descriptor(__u64 bit, void *ctx)
{
	struct walk *w = ctx;
	struct gpureap_fd_record r = {};
	struct file *file = 0;
	const __u32 fd = w->base + (__u32)(bit & 63);

	if (!(w->maybe >> (bit & 63)))
		return 1; /* none left in this word */
	if (!(w->maybe & (1ULL << (bit & 63))))
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

#ifdef GPUREAP_DIRECT_READS
/* Which of 16 open descriptors may be a GPU's, from their struct file and
 * inode lines, loaded before walk_descriptor looks at any: a character
 * device, or a regular file whose inode number's bit is in
 * gpureap_match_inode_bits; gpureap_candidate decides for each of those.
 * These loads depend on none of each other, so the CPU overlaps their cache
 * misses; walk_descriptor's each decide what it does next, one bpf_loop
 * callback call per descriptor, and its misses were paid one after another
 * (in one plain loop, 19 % less time in the programs). The sieve spares the
 * walk its calls for the rest (pipes, sockets, other files): a bench process,
 * with descriptors at 0-23 and 1000-1001, took 68 calls and now takes 9. One
 * loop up to the last open descriptor, with no other branch inside: the
 * verifier walks it step by step (a branch that also skipped closed ones
 * multiplied its paths: ~85 ms more of load measured). A closed slot holds
 * NULL, which reads as 0, touches nothing and is no candidate, and a table's
 * size is a multiple of 64 (fs/file.c rounds it so), so every slot read is in
 * the table. */
static __always_inline __u64 touch_and_sieve(__u64 slots, __u64 word, const __u64 inode_bits)
{
	struct file **slot = (struct file **)(unsigned long)slots;
	__u64 maybe = 0;

	for (__u32 i = 0; i < 16; i++) {
		struct file *file = 0;
		struct inode *inode = 0;
		__u16 mode = 0;
		__u64 type, chr, reg = 0;

		if (!(word >> i))
			break;
		READ_AT(file, slot + i);
		READ_FIELD(inode, file, f_inode);
		READ_FIELD(mode, inode, i_mode);
		/* 1 where the type is S_IFCHR (S_IFREG): (t - 1) >> 63 is 1 for
		 * t == 0 only, t below 2^16. Arithmetic, not a compare, so that
		 * the step has no branch. */
		type = mode & 0170000;
		chr = ((type ^ 0020000) - 1) >> 63;
		if (inode_bits) {
			unsigned long ino = 0;

			READ_FIELD(ino, inode, i_ino);
			reg = (((type ^ 0100000) - 1) >> 63) & (inode_bits >> (ino & 63));
		}
		maybe |= ((chr | reg) & 1) << i;
	}
	return maybe & word;
}

/* The touch and sieve, a global function like gpureap_candidate, so that its
 * steps are verified once, not on each of the verifier's passes over
 * walk_word. The sieve for regular files (the simulated GPU's) only where the
 * reader named some: the verifier, which knows this read-only value at load,
 * then walks one of the two loops, each without a branch on it. */
__noinline __u64 gpureap_touch(__u64 slots, __u64 word)
{
	const __u64 inode_bits = gpureap_match_inode_bits;

	if (inode_bits)
		return touch_and_sieve(slots, word, inode_bits);
	return touch_and_sieve(slots, word, 0);
}

/* The touch, a quarter of the word at a time: the verifier walks its loop
 * step by step, so 16 steps cost it a quarter of 64 (the sieve's 64 steps
 * had cost it more instructions than the touch before it). All four always
 * (one with no open descriptor returns at its first step): a branch here
 * would be walked again on each of the verifier's passes over walk_word. */
static __always_inline __u64 sieve_word(struct walk *w)
{
	const __u64 slots = (__u64)(unsigned long)(w->fd + w->base);
	const __u64 step = 16 * sizeof(struct file *);

	return gpureap_touch(slots, w->word & 0xffff) |
	       gpureap_touch(slots + step, (w->word >> 16) & 0xffff) << 16 |
	       gpureap_touch(slots + 2 * step, (w->word >> 32) & 0xffff) << 32 |
	       gpureap_touch(slots + 3 * step, w->word >> 48) << 48;
}
#else
/* Each read of the probe build is a helper call: touching first measured
 * 28 -> 47 ms of program time for the bench fleet (dev VM), not less. Every
 * open descriptor goes to gpureap_candidate. */
static __always_inline __u64 sieve_word(struct walk *w)
{
	return w->word;
}
#endif

/* 64 descriptors from index * 64: their open_fds word, then each the touch left.
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
	w->maybe = sieve_word(w);
	bpf_loop(64, walk_descriptor, w, 0);
	return w->complete ? 0 : 1;
}

/* Each descriptor table once: a thread-group leader's, and a thread's that
 * has its own (unshare(CLONE_FILES)); threads sharing the leader's are
 * skipped, as the task_file iterator skips them. The table is read under
 * the iterator's RCU read lock, as the kernel's own lockless lookups read it
 * (the probe build; the direct-reads build checks the table is still the
 * task's once walked). */
static __always_inline __u32 walk_table(struct seq_file *seq, struct task_struct *task,
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
	/* Replaced meanwhile: what was read may be a freed table's. */
	if (w.complete) {
		struct fdtable *now = 0;

		if (READ_FIELD(now, files, fdt) || now != fdt)
			w.complete = 0;
	}

	end.kind = GPUREAP_REC_TABLE;
	end.tgid = w.tgid;
	end.pid = w.pid;
	end.open_fds = w.open;
	end.start_ns = w.start_ns;
	end.complete = w.complete;
	bpf_seq_write(seq, &end, sizeof(end));
	return w.written;
}

#ifdef GPUREAP_DIRECT_READS
/* The lines a leader's records read next, one level apart: its struct pid,
 * signal_struct, mm_struct and files_struct, then its descriptor table and
 * the first word of each of that table's arrays. Loaded together first, for
 * the reason gpureap_touch gives: the reads that use them each wait for their
 * own pointer. The sum is stored so that the compiler keeps the loads. */
static __always_inline void touch_task(struct task_struct *task)
{
	struct files_struct *files = 0;
	struct mm_struct *mm = 0;
	struct signal_struct *signal = 0;
	struct pid *pid = 0;
	struct fdtable *fdt = 0;
	struct pid *group = 0;
	unsigned long arg_start = 0;
	unsigned int level = 0;
	struct file **fd = 0;
	unsigned long *open_fds = 0;
	unsigned long word = 0;
	struct file *first = 0;
	void *root = 0, *pgd = 0;
	__u64 line = 0;
	volatile __u64 sink;

	READ_FIELD(files, task, files);
	READ_FIELD(mm, task, mm);
	READ_FIELD(signal, task, signal);
	READ_FIELD(pid, task, thread_pid);
	READ_FIELD(fdt, files, fdt);
	READ_FIELD(arg_start, mm, arg_start);
	READ_FIELD(group, signal, pids[GPUREAP_PIDTYPE_PGID]);
	READ_FIELD(level, pid, level);
	READ_FIELD(fd, fdt, fd);
	READ_FIELD(open_fds, fdt, open_fds);
	READ_AT(word, open_fds);
	READ_AT(first, fd);
	sink = (__u64)(unsigned long)group + arg_start + level + word + (__u64)(unsigned long)first;
	/* What copying its argv (gpureap_args, after the table's walk) finds
	 * first: the top of its area tree (a node's lines, the root tagged in its
	 * low byte; 2 in the low bits: a node, not a lone area) and the top of
	 * its page table, at the entry for arg_start (x86-64's and arm64's
	 * 4-level split; elsewhere a line of no use). */
	if (bpf_core_field_exists(mm->mm_mt))
		READ_FIELD(root, mm, mm_mt.ma_root);
	READ_FIELD(pgd, mm, pgd);
	if (((unsigned long)root & 3) == 2) {
		const char *node = (const char *)((unsigned long)root & ~255UL);

		READ_AT(line, node);
		sink += line;
		READ_AT(line, node + 64);
		sink += line;
		READ_AT(line, node + 128);
		sink += line;
	}
	READ_AT(line, (const char *)pgd + ((arg_start >> 39) & 511) * 8);
	sink += line;
	(void)sink;
}
#else
static __always_inline void touch_task(struct task_struct *task)
{
	(void)task;
}
#endif

#ifdef GPUREAP_DIRECT_READS
/* A kthread's full name into r (empty where comm holds it whole); non-zero
 * where this kernel has none or it cannot be read. */
static __always_inline int read_full_name(struct gpureap_kthread_record *r, struct kthread *kthread)
{
	char *name = 0;

	if (!bpf_core_field_exists(kthread->full_name) || READ_FIELD(name, kthread, full_name))
		return 1;
	if (name && bpf_probe_read_kernel_str(r->full_name, sizeof(r->full_name), name) <= 0)
		return 1;
	r->full_name_ok = 1;
	return 0;
}

/* For a kernel thread whose /proc name comm alone does not give, the record
 * that does (records.h: a workqueue worker's latest work, a rescuer's full
 * name, or the full name of one whose comm fills its 15 characters), which
 * saves the reader an open, read and close of /proc/PID/comm for each: a
 * hundred and more on a node with many CPUs. None where this kernel keeps
 * them elsewhere: the reader then reads that file. A global function, like
 * gpureap_args (and direct-reads only, like it: its context argument needs
 * Linux 6.8+): the verifier checks it once, by itself. */
__noinline int gpureap_kthread(struct bpf_iter__task *ctx __attribute__((btf_decl_tag("arg:ctx"))))
{
	struct gpureap_kthread_record r = {};
	struct kthread *kthread = 0;
	struct task_struct *task;
	struct seq_file *seq;
	__u32 flags = 0;
	char last = 0; /* comm's 15th character: not NUL when comm fills it */

	if (!ctx)
		return 0;
	task = ctx->task;
	seq = ctx->meta->seq;
	if (!task || READ_FIELD(flags, task, flags) || !(flags & GPUREAP_PF_KTHREAD) ||
	    READ_FIELD(last, task, comm[14]))
		return 0;
	if (!(flags & GPUREAP_PF_WQ_WORKER) && !last)
		return 0;
	if (!bpf_core_field_exists(task->worker_private) ||
	    READ_FIELD(kthread, task, worker_private) || !kthread)
		return 0;
	r.kind = GPUREAP_REC_KTHREAD;
	r.tgid = (__u32)task->tgid;
	if (flags & GPUREAP_PF_WQ_WORKER) {
		struct worker *worker = 0;
		void *pool = 0, *ptr = 0; /* ptr: rescue_wq, then current_work */
		__u32 size = bpf_core_field_size(worker->desc);

		if (size > sizeof(r.desc))
			size = sizeof(r.desc);
		/* A rescuer's full name starts its /proc name ("kworker/R-" and its
		 * workqueue's name); other workers have none. Read first, so that
		 * kthread is dead after: read later, it took one stack slot more than
		 * the 512 bytes this function shares with gpureap_scan. No full name
		 * on this kernel: /proc names a rescuer. */
		(void)read_full_name(&r, kthread);
		if (READ_FIELD(worker, kthread, data) || !worker || READ_FIELD(pool, worker, pool))
			return 0;
		/* A rescuer is in a pool only while it rescues. */
		if (r.full_name_ok && bpf_core_field_exists(worker->rescue_wq)) {
			if (READ_FIELD(ptr, worker, rescue_wq))
				return 0;
			r.rescuer_ok = ptr ? 1 : 0;
		}
		/* Neither: a dying worker, which /proc names otherwise. */
		if (!pool && !r.rescuer_ok)
			return 0;
		if (pool) {
			if (READ_FIELD(ptr, worker, current_work) ||
			    bpf_probe_read_kernel(r.desc, size, __builtin_preserve_access_index(&worker->desc)))
				return 0;
			r.desc[sizeof(r.desc) - 1] = '\0';
			r.worker_ok = 1;
			r.current = ptr ? 1 : 0;
		}
	} else if (read_full_name(&r, kthread)) {
		return 0;
	}
	bpf_seq_write(seq, &r, sizeof(r));
	return 1;
}
#endif

/* This reader's share (0 when one reader writes every process), or -1 when
 * the task's process is not in it. A reader not named (none should read
 * while shares are set) writes nothing: a process written by two readers
 * would count twice; one written by none is read from /proc. */
static __always_inline int share_of(const struct task_struct *task)
{
	const __u32 count = gpureap_shard_count;
	const __u32 me = (__u32)bpf_get_current_pid_tgid();

	if (count <= 1)
		return 0;
	for (__u32 i = 0; i < GPUREAP_MAX_SHARDS && i < count; i++) {
		if (gpureap_shard_readers[i] == me)
			return (__u32)task->tgid % count == i ? (int)i : -1;
	}
	return -1;
}

#ifdef GPUREAP_DIRECT_READS
/* A leader's argv, and with `env` its environment when that area follows
 * the argument area (as exec lays them out) and both fit: one copy. None
 * where they do not fit or cannot be read; the reader copies those. A global
 * function, like gpureap_candidate: the verifier checks it once, not once for
 * each state the table walk can end in. */
__noinline int gpureap_args(struct bpf_iter__task *ctx __attribute__((btf_decl_tag("arg:ctx"))),
			    const struct gpureap_task_record *areas, __u32 share, int env)
{
	struct gpureap_args_record r = {};
	struct task_struct *task;
	struct seq_file *seq;
	__u64 arg_len, env_len, len;
	char *buf;

	if (!ctx || !areas || !areas->areas_ok || areas->arg_end < areas->arg_start)
		return 0;
	task = ctx->task;
	seq = ctx->meta->seq;
	if (!task)
		return 0;
	arg_len = areas->arg_end - areas->arg_start;
	env_len = areas->env_end - areas->env_start;
	len = arg_len;
	if (env && areas->env_start == areas->arg_end && areas->env_end >= areas->env_start &&
	    arg_len + env_len <= GPUREAP_ARGS_BYTES) {
		len = arg_len + env_len;
		r.env_copied = 1;
		r.env_len = (__u32)env_len;
	}
	if (len > GPUREAP_ARGS_BYTES)
		return 0;
	buf = bpf_map_lookup_elem(&gpureap_args_buf, &share);
	if (!buf)
		return 0;
	if (len && bpf_copy_from_user_task(buf, (__u32)len, (const void *)(unsigned long)areas->arg_start,
					   task, 0))
		return 0;
	r.kind = GPUREAP_REC_ARGS;
	r.tgid = (__u32)task->tgid;
	r.arg_len = (__u32)arg_len;
	r.size = (__u32)(sizeof(r) + len);
	bpf_seq_write(seq, &r, sizeof(r));
	if (len)
		bpf_seq_write(seq, buf, (__u32)len);
	return 1;
}

SEC("iter.s/task")
#else
SEC("iter/task")
#endif
int gpureap_scan(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct files_struct *files = 0;
	const int leader = task && task->tgid == task->pid;

	if (!task) {
		/* seq_num: the index of the last task shown (counted from 0); the
		 * reader is a task itself, so there was one. */
		write_end_record(seq, ctx->meta->seq_num + 1);
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
	const int share = share_of(task);
	struct gpureap_task_record areas;
	__u32 candidates = 0;

	if (share < 0)
		return 0;
	areas.areas_ok = 0;
	if (leader) {
		touch_task(task);
		write_task_record(seq, task, &areas);
#ifdef GPUREAP_DIRECT_READS
		gpureap_kthread(ctx);
#endif
	}
	if (READ_FIELD(files, task, files) || !files)
		goto args;
	if (!leader) {
		struct task_struct *group_leader = 0;
		struct files_struct *leader_files = 0;

		if (READ_FIELD(group_leader, task, group_leader) ||
		    !group_leader ||
		    READ_FIELD(leader_files, group_leader, files) ||
		    leader_files == files)
			return 0;
	}
	candidates = walk_table(seq, task, files);
args:
#ifdef GPUREAP_DIRECT_READS
	if (leader)
		gpureap_args(ctx, &areas, (__u32)share, gpureap_copy_env && candidates);
#endif
	(void)candidates;
	return 0;
}
