/* Loading the scan's BPF iterators (kernel_scan.bpf.c) from the skeletons
 * bpftool generated at build time. C, because the generated skeletons are C;
 * kernel_fds.cpp is the only caller. */
#ifndef GPUREAP_PROC_BPF_KERNEL_SCAN_LOADERS_H
#define GPUREAP_PROC_BPF_KERNEL_SCAN_LOADERS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The two loaded programs. Both descriptors are the caller's to close. */
struct gpureap_scan_progs {
	int fds_prog;   /* iter/task_file */
	int tasks_prog; /* iter/task */
};

/* The light skeleton: the kernel runs a loader program (BPF_PROG_TYPE_SYSCALL,
 * Linux 5.14+) that loads both programs and resolves their CO-RE relocations
 * against its own BTF (5.17+); no libbpf, nothing parsed here. Returns 0, or a
 * negative errno with `why` (NUL-terminated, at most why_len bytes) saying
 * which step failed and how. */
int gpureap_load_scan_light(struct gpureap_scan_progs *out, char *why, size_t why_len);

/* The regular skeleton through libbpf (linked statically): libbpf reads
 * /sys/kernel/btf/vmlinux and relocates here. Same contract. */
int gpureap_load_scan_libbpf(struct gpureap_scan_progs *out, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
