/* What the scan's BPF iterators write, shared by the programs
 * (kernel_scan.bpf.c, kernel_scan_compat.bpf.c) and their reader
 * (kernel_fds.cpp). Userspace includes <linux/types.h> first; the programs,
 * kernel_types.h. Every record starts with its kind, which fixes its size:
 * one iteration can interleave kinds. */
#ifndef GPUREAP_PROC_BPF_RECORDS_H
#define GPUREAP_PROC_BPF_RECORDS_H

enum gpureap_record_kind {
	GPUREAP_REC_FD = 1,    /* struct gpureap_fd_record */
	GPUREAP_REC_TABLE = 2, /* struct gpureap_table_record */
	GPUREAP_REC_TASK = 3,  /* struct gpureap_task_record */
	GPUREAP_REC_END = 4,   /* struct gpureap_end_record */
	GPUREAP_REC_CSS = 5,   /* struct gpureap_css_record */
	GPUREAP_REC_ARGS = 6,  /* struct gpureap_args_record, then its bytes */
	GPUREAP_REC_KTHREAD = 7, /* struct gpureap_kthread_record */
};

/* One descriptor: every one (task_file), or each GPU candidate of a table
 * (the table walk: character devices other than the terminals and nulls,
 * regular files with an inode number the reader named). */
struct gpureap_fd_record {
	__u32 kind;
	__u32 tgid;
	__u32 pid;
	__u32 fd;
	__u64 start_ns; /* task->start_boottime */
	__u32 mode;     /* inode->i_mode */
	__u32 rdev;     /* inode->i_rdev, kernel encoding */
	__u32 dev;      /* inode->i_sb->s_dev, kernel encoding */
	__u32 unused;
	__u64 ino;      /* inode->i_ino */
	/* The open file description (struct file) this descriptor refers to: the
	 * same value for every descriptor, in any process, that shares it. Only
	 * compared, never printed (it is a kernel address). */
	__u64 file;
};

/* The table walk closes each descriptor table with this, after its candidates. */
struct gpureap_table_record {
	__u32 kind;
	__u32 tgid;
	__u32 pid;
	__u32 open_fds; /* descriptors open in the table */
	__u64 start_ns;
	/* 1: every candidate was written; 0: the table had more than
	 * GPUREAP_MAX_CANDIDATES, or could not be read, and the reader walks
	 * /proc/PID/fd for that process instead. */
	__u32 complete;
	__u32 unused;
};

/* The iteration's end: our own tgid tells the reader which PID namespace
 * numbered the records (the initial one, or it declines). `tasks`: the tasks
 * the task iterator showed the program, threads and kernel threads included
 * (0 from the task_file form): matched against the kernel's count, it tells
 * the reader whether the iteration saw every process, so that its leaders
 * can stand for a listing of /proc. */
struct gpureap_end_record {
	__u32 kind;
	__u32 reader_tgid;
	__u32 tasks;
	__u32 unused;
};

/* What the css_set re-check reads of a thread-group leader (gpureap_scan
 * with gpureap_walk_tables cleared): task records' css_set, without the rest. */
struct gpureap_css_record {
	__u32 kind;
	__u32 tgid;
	__u64 css_set; /* 0: unreadable, or the task is exiting (PF_EXITING) */
};

/* A thread-group leader's argv, and for one whose table had GPU candidates
 * its environment, copied from its memory by the iterator (the direct-reads
 * build: a sleepable program, bpf_copy_from_user_task): what
 * /proc/PID/cmdline and environ read, without a process_vm_readv per process.
 * arg_len bytes of the argument area follow, then env_len bytes of the
 * environment area; the record is header and bytes, `size` in all (records
 * after it are not aligned: the reader copies each out). None where the areas
 * do not fit the iterator's buffer or could not be read: the reader copies
 * those itself. */
struct gpureap_args_record {
	__u32 kind;
	__u32 tgid;
	__u32 size;    /* sizeof(struct gpureap_args_record) + arg_len + env_len */
	__u32 arg_len;
	__u32 env_len;
	__u32 env_copied; /* 1: env_len bytes of the environment follow (perhaps 0) */
};

/* What /proc names a kernel thread by where comm alone does not say it
 * (fs/proc/array.c, proc_task_name), after its task record: a workqueue
 * worker's latest work (wq_worker_comm: comm, then "+" and the description
 * while it runs that work, "-" after), a rescuer's full name (6.18 names a
 * rescuer "kworker/R-" and its workqueue's name, which comm cuts; older
 * kernels, by the workqueue's name alone), or a kernel thread's full name
 * where comm cut it at 15 characters (get_kthread_comm). Read without the
 * locks /proc takes, so a worker that changes work meanwhile may show
 * either. */
struct gpureap_kthread_record {
	__u32 kind;
	__u32 tgid;
	__u32 worker_ok;    /* 1: a worker in a pool; current and desc were read */
	__u32 current;      /* 1: it is running that work now */
	__u32 full_name_ok; /* 1: full_name was read (empty: comm is the name) */
	__u32 rescuer_ok;   /* 1: a rescuer; full_name was read */
	char desc[32];      /* NUL-terminated */
	char full_name[64]; /* NUL-terminated; /proc shows at most 63 bytes */
};

/* The bytes one args record can carry: argv and environment together. With a
 * table's candidates and records, one task's output stays under the
 * iterator's 32 KiB buffer (records.h's other limits). */
#define GPUREAP_ARGS_BYTES 16384

/* The char devices every process has and no GPU ever is, by number: what
 * the /proc walk skips by path (/dev/null, random, urandom, tty*, console,
 * ptmx, pts). The table walk writes no record for them; the reader skips them
 * in the task_file form's records. */
static inline __attribute__((always_inline)) int gpureap_never_a_gpu(unsigned int maj,
								      unsigned int min)
{
	if (maj == 1)
		return min == 3 || min == 8 || min == 9;
	if (maj == 5)
		return min <= 2;
	return maj == 4 || (maj >= 136 && maj <= 143);
}

/* Candidates one table may write: an object's records must fit, with the
 * task's own, in the iterator's 32 KiB buffer (they never span two reads). */
#define GPUREAP_MAX_CANDIDATES 256
/* Regular files the walk can name by inode number (the simulated GPU's device
 * files); more, and the reader uses the task_file iterator. */
#define GPUREAP_MAX_MATCH_INODES 8
/* Tables up to 2^20 descriptors (the default fs.nr_open); larger, /proc. */
#define GPUREAP_MAX_FD_WORDS (1U << 14)

#define GPUREAP_MAX_NS_LEVELS 8 /* deeper nesting: /proc/PID/status is read instead */

/* Readers that can share one walk, each its part of the processes (more
 * threads, and the extra ones only read /proc). */
#define GPUREAP_MAX_SHARDS 16

/* One per thread-group leader: what /proc/PID/status and /proc/PID/stat would
 * give the scan, with the start time that ties it to the /proc entry. */
struct gpureap_task_record {
	__u32 kind;
	__u32 tgid;
	__u64 start_ns; /* start_boottime */
	__u32 uid;      /* real_cred->uid; all-ones when unreadable */
	__u32 level;    /* thread_pid->level; all-ones when unreadable */
	__u32 nspid[GPUREAP_MAX_NS_LEVELS];
	__u32 stat_ok;  /* 1 when every field below was read */
	__u32 ppid;     /* real_parent->tgid */
	__u32 pgrp;     /* signal->pids[PIDTYPE_PGID]->numbers[0].nr */
	__u32 session;  /* signal->pids[PIDTYPE_SID]->numbers[0].nr */
	__u32 flags;    /* PF_* */
	__u32 state;    /* __state (state before 5.14) */
	__u32 exit_state;
	char comm[16];
	__u32 areas_ok; /* 1 when the four areas below were read (the task has an mm) */
	/* task->cgroups: its css_set, the one object for a combination of
	 * cgroups on every hierarchy (v1 and v2): live tasks that share it have
	 * the same /proc/PID/cgroup (an exiting one shows "/" on v1). Only
	 * compared, never printed (a kernel address); 0 when unreadable. */
	__u64 css_set;
	/* mm->arg_start .. arg_end and env_start .. env_end: where argv and the
	 * initial environment lie in its memory, so the reader copies both with
	 * one process_vm_readv instead of opening /proc/PID/cmdline and environ. */
	__u64 arg_start;
	__u64 arg_end;
	__u64 env_start;
	__u64 env_end;
};

#endif
