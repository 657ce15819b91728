/* The few kernel types the scan's BPF programs read, declared by hand instead
 * of a vmlinux.h dumped from the build machine: with preserve_access_index
 * every member access is a CO-RE relocation, resolved against the running
 * kernel's BTF when the program loads, so only the names must match the
 * kernel's; offsets, sizes and layout come from the kernel itself. */
#ifndef GPUREAP_PROC_BPF_KERNEL_TYPES_H
#define GPUREAP_PROC_BPF_KERNEL_TYPES_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)


struct upid {
	int nr;
};

struct pid {
	unsigned int level;
	struct upid numbers[1]; /* a flexible array since 5.x: indexed by size, not by this bound */
};

struct cred {
	struct {
		unsigned int val;
	} uid;
};

struct css_set;

/* The tree of an mm's areas (include/linux/maple_tree.h): its root node,
 * tagged in its low bits. */
struct maple_tree {
	void *ma_root;
};

/* Where argv and the initial environment lie in the process's memory: what
 * /proc/PID/cmdline and environ read (fs/proc/base.c); the area tree and the
 * page table that copying them walks. */
struct mm_struct {
	struct maple_tree mm_mt;
	void *pgd;
	unsigned long arg_start;
	unsigned long arg_end;
	unsigned long env_start;
	unsigned long env_end;
};

struct signal_struct {
	struct pid *pids[4]; /* indexed by enum pid_type */
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;        /* __rcu: read under the iterator's RCU read lock */
	unsigned long *open_fds; /* bitmap of max_fds bits */
};

struct files_struct {
	struct fdtable *fdt; /* __rcu */
};

struct task_struct {
	unsigned int flags;
	unsigned int __state; /* `long state` before Linux 5.14: see task_struct___pre_5_14 */
	int exit_state;
	int pid;
	int tgid;
	struct task_struct *real_parent;
	struct pid *thread_pid;
	__u64 start_boottime;
	const struct cred *real_cred;
	char comm[16];
	struct signal_struct *signal;
	struct css_set *cgroups;
	struct files_struct *files;
	struct task_struct *group_leader;
	struct mm_struct *mm;
	void *worker_private; /* a kernel thread's struct kthread */
};

/* kernel/kthread.c */
struct kthread {
	void *data;      /* a workqueue worker's struct worker */
	char *full_name; /* the name comm cut at 15 characters; NULL when it did not */
};

/* kernel/workqueue_internal.h */
struct worker {
	void *current_work;
	void *pool;
	char desc[32]; /* WORKER_DESC_LEN bytes: read as many as the kernel has, up to 32 */
	void *rescue_wq; /* a rescuer's workqueue; NULL for the others */
};

/* The flavour CO-RE matches on kernels before 5.14 (the suffix after ___ is ignored). */
struct task_struct___pre_5_14 {
	long state;
};

struct super_block {
	unsigned int s_dev;
};

struct inode {
	unsigned short i_mode;
	struct super_block *i_sb;
	unsigned long i_ino;
	unsigned int i_rdev;
};

struct file {
	struct inode *f_inode;
};

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

/* The iterators' contexts: their programs' argument lists, one 8-byte slot each. */
struct bpf_iter__task {
	union {
		struct bpf_iter_meta *meta;
	};
	union {
		struct task_struct *task;
	};
};

struct bpf_iter__task_file {
	union {
		struct bpf_iter_meta *meta;
	};
	union {
		struct task_struct *task;
	};
	__u32 fd;
	union {
		struct file *file;
	};
};

#pragma clang attribute pop

#define GPUREAP_PF_EXITING 0x00000004 /* include/linux/sched.h */
#define GPUREAP_PF_WQ_WORKER 0x00000020
#define GPUREAP_PF_KTHREAD 0x00200000

/* include/linux/pid.h: enum pid_type since Linux 4.19 (iterators need 5.8). */
enum {
	GPUREAP_PIDTYPE_PGID = 2,
	GPUREAP_PIDTYPE_SID = 3,
};

#endif
