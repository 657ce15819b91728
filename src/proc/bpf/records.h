/* What the scan's BPF iterators write, one fixed-size record each, shared by
 * the programs (kernel_scan.bpf.c) and their reader (kernel_fds.cpp). Userspace
 * includes <linux/types.h> first; the programs, kernel_types.h. */
#ifndef GPUREAP_PROC_BPF_RECORDS_H
#define GPUREAP_PROC_BPF_RECORDS_H

/* One per open descriptor of every task. A record with pid 0 ends the
 * iteration and carries the reader's own tgid as the kernel's initial PID
 * namespace numbers it. */
struct gpureap_fd_record {
	__u32 tgid;
	__u32 pid;
	__u64 start_ns; /* task->start_boottime */
	__u32 fd;
	__u32 mode;     /* inode->i_mode */
	__u32 rdev;     /* inode->i_rdev, kernel encoding */
	__u32 dev;      /* inode->i_sb->s_dev, kernel encoding */
	__u64 ino;      /* inode->i_ino */
	/* The open file description (struct file) this descriptor refers to: the
	 * same value for every descriptor, in any process, that shares it. Only
	 * compared, never printed (it is a kernel address). */
	__u64 file;
};

#define GPUREAP_MAX_NS_LEVELS 8 /* deeper nesting: /proc/PID/status is read instead */

/* One per thread-group leader: what /proc/PID/status and /proc/PID/stat would
 * give the scan, with the start time that ties it to the /proc entry. */
struct gpureap_task_record {
	__u32 tgid;
	__u32 uid;      /* real_cred->uid; all-ones when unreadable */
	__u64 start_ns; /* start_boottime */
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
	/* task->cgroups: its css_set, the one object for a combination of
	 * cgroups on every hierarchy (v1 and v2): live tasks that share it have
	 * the same /proc/PID/cgroup (an exiting one shows "/" on v1). Only
	 * compared, never printed (a kernel address); 0 when unreadable. */
	__u64 css_set;
};

#endif
