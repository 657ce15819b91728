/* Loading the scan's BPF iterators from the skeletons bpftool generated at
 * build time: the table walk (kernel_scan.bpf.c) through the light or the
 * regular skeleton, and its task_file form (kernel_scan_compat.bpf.c)
 * through the regular one. C, because the generated skeletons are C;
 * kernel_fds.cpp is the only caller. */
#ifndef GPUREAP_PROC_BPF_KERNEL_SCAN_LOADERS_H
#define GPUREAP_PROC_BPF_KERNEL_SCAN_LOADERS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What loaded; every descriptor that is not -1 is the caller's to close. */
struct gpureap_scan_progs {
	int scan_prog;   /* gpureap_scan (iter/task, with the table walk) */
	int data_map;    /* its .data: gpureap_walk_tables, one __u32 */
	int fds_prog;    /* compat: gpureap_fds (iter/task_file) */
	int tasks_prog;  /* compat: gpureap_tasks (iter/task) */
};

/* What the table walk matches regular files by: inode numbers
 * (count <= GPUREAP_MAX_MATCH_INODES), set as read-only data before load;
 * and copy_env (1: the direct-reads build copies the environment of leaders
 * whose tables had candidates, with their argv). */
struct gpureap_scan_match {
	unsigned count;
	unsigned long long inodes[8];
	unsigned copy_env;
};

/* The light skeleton: the kernel runs a loader program (BPF_PROG_TYPE_SYSCALL,
 * Linux 5.14+) that loads gpureap_scan and resolves its CO-RE relocations
 * against its own BTF (5.17+); no libbpf, nothing parsed here. Returns 0, or a
 * negative errno with `why` (NUL-terminated, at most why_len bytes) saying
 * which step failed and how. */
int gpureap_load_scan_light(const struct gpureap_scan_match *match, struct gpureap_scan_progs *out,
			    char *why, size_t why_len);

/* The light skeleton of the direct-reads build (kernel_scan.bpf.c with
 * GPUREAP_DIRECT_READS): tasks, descriptor tables, files and inodes read with
 * plain loads through bpf_rdonly_cast(addr, 0) (a kfunc; its cast to untrusted
 * memory, Linux 6.17+), not a helper call each. Same contract; an older kernel
 * refuses it. */
int gpureap_load_scan_light_direct(const struct gpureap_scan_match *match,
				   struct gpureap_scan_progs *out, char *why, size_t why_len);

/* The regular skeleton through libbpf (linked statically): libbpf reads
 * /sys/kernel/btf/vmlinux and relocates here. Same contract. */
int gpureap_load_scan_libbpf(const struct gpureap_scan_match *match, struct gpureap_scan_progs *out,
			     char *why, size_t why_len);

/* Sets gpureap_scan's .data map. walk: 0, and its later runs write css_set
 * records only (the re-check's); 1, a whole scan (again, for kept programs).
 * shards (at most GPUREAP_MAX_SHARDS) and readers: the threads that share the
 * walk, by thread id; 0 or 1 and NULL, one reader writes it all. Same
 * contract. */
int gpureap_scan_set_data(int data_map, int walk, unsigned shards, const unsigned *readers,
			  char *why, size_t why_len);

/* The size of gpureap_scan's .data (one value of its map): what a pinned
 * map must have to be this build's. */
size_t gpureap_scan_data_size(void);

/* The task_file form through libbpf: fds_prog and tasks_prog. Same contract. */
int gpureap_load_scan_compat(struct gpureap_scan_progs *out, char *why, size_t why_len);

/* The line of a verifier log (log_size bytes at `log`, as libbpf left it
 * after a failed load) that says why the program was refused: the last line
 * before the verifier's own statistics ("verification time", "stack depth",
 * "processed N insns"), cut at its first byte that is not printable text, at
 * most reason_len - 1 bytes. libbpf may leave a full buffer without its NUL
 * (its fixups of the log shift text to the end): the last byte is made one.
 * Returns the reason's length (0: none). */
size_t gpureap_verifier_reason(char *log, size_t log_size, char *reason, size_t reason_len);

#ifdef __cplusplus
}
#endif

#endif
