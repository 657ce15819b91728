#include "kernel_scan_loaders.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernel_scan.lskel.h"
#include "kernel_scan_direct.lskel.h"
#include "kernel_scan.skel.h"
#include "kernel_scan_compat.skel.h"

/* A descriptor of our own, so the skeleton can be destroyed at once: a
 * program or map lives as long as some descriptor refers to it. */
static int keep_fd(int fd)
{
	return fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

static int fail(int err, char *why, size_t why_len, const char *step)
{
	if (err > 0)
		err = -err;
	if (err == 0)
		err = -EINVAL;
	snprintf(why, why_len, "%s: %s", step, strerror(-err));
	return err;
}

static void close_all(struct gpureap_scan_progs *out)
{
	int *fds[] = {&out->scan_prog, &out->data_map, &out->fds_prog, &out->tasks_prog};

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

/* Every wanted descriptor kept, or none: `err` is errno from the keep_fd calls. */
static int kept(struct gpureap_scan_progs *out, int a, int b, int err, char *why, size_t why_len)
{
	if (a >= 0 && b >= 0)
		return 0;
	close_all(out);
	return fail(err, why, why_len, "keep the programs");
}

#define SET_MATCH(rodata, match)                                                   \
	do {                                                                       \
		(rodata)->gpureap_match_inode_count = (match)->count;              \
		(rodata)->gpureap_copy_env = (match)->copy_env;                    \
		for (unsigned i_ = 0; i_ < (match)->count && i_ < 8; i_++) {       \
			(rodata)->gpureap_match_inodes[i_] = (match)->inodes[i_]; \
			(rodata)->gpureap_match_inode_bits |=                      \
				1ULL << ((match)->inodes[i_] & 63);                \
		}                                                          \
	} while (0)

/* The light skeleton `prefix` (gpureap_kernel_scan_lskel or its direct-reads
 * build): opened, matched, loaded, its descriptors kept. `needs`: the kernel
 * it needs, for the note when its loader program fails. */
#define LOAD_LIGHT(prefix, needs, match, out, why, why_len)                                   \
	do {                                                                                  \
		struct prefix *skel_ = prefix##__open();                                      \
		int err_;                                                                     \
		if (!skel_)                                                                   \
			return fail(errno, why, why_len, "open");                             \
		SET_MATCH(skel_->rodata, match);                                              \
		err_ = prefix##__load(skel_);                                                 \
		if (err_) {                                                                   \
			err_ = fail(err_, why, why_len, "the kernel's loader program " needs); \
			prefix##__destroy(skel_);                                             \
			return err_;                                                          \
		}                                                                             \
		(out)->scan_prog = keep_fd(skel_->progs.gpureap_scan.prog_fd);                \
		(out)->data_map = keep_fd(skel_->maps.data.map_fd);                           \
		err_ = errno;                                                                 \
		prefix##__destroy(skel_);                                                     \
		return kept(out, (out)->scan_prog, (out)->data_map, err_, why, why_len);      \
	} while (0)

int gpureap_load_scan_light(const struct gpureap_scan_match *match, struct gpureap_scan_progs *out,
			    char *why, size_t why_len)
{
	LOAD_LIGHT(gpureap_kernel_scan_lskel, "(Linux 5.14+; CO-RE in the kernel 5.17+)", match, out,
		   why, why_len);
}

int gpureap_load_scan_light_direct(const struct gpureap_scan_match *match,
				   struct gpureap_scan_progs *out, char *why, size_t why_len)
{
	LOAD_LIGHT(gpureap_kernel_scan_direct_lskel,
		   "(Linux 5.14+; CO-RE in the kernel 5.17+; bpf_rdonly_cast to memory 6.17+)", match,
		   out, why, why_len);
}

/* libbpf prints to stderr by default; its errors come back as return codes
 * and the verifier's log through each program's log buffer instead. */
static int quiet(enum libbpf_print_level level, const char *format, va_list args)
{
	(void)level;
	(void)format;
	(void)args;
	return 0;
}

static int starts_with(const char *line, size_t len, const char *prefix)
{
	const size_t n = strlen(prefix);

	return len >= n && memcmp(line, prefix, n) == 0;
}

size_t gpureap_verifier_reason(char *log, size_t log_size, char *reason, size_t reason_len)
{
	const char *stats[] = {"verification time", "stack depth", "processed ", "-- END"};
	size_t end;

	if (reason_len == 0)
		return 0;
	reason[0] = '\0';
	if (!log || log_size == 0)
		return 0;
	log[log_size - 1] = '\0';
	end = strlen(log);
	while (end > 0) {
		size_t start = end, len;
		int stat = 0;

		while (start > 0 && log[start - 1] != '\n')
			start--;
		len = end - start;
		for (size_t i = 0; i < sizeof(stats) / sizeof(stats[0]); i++)
			stat |= starts_with(log + start, len, stats[i]);
		if (len > 0 && !stat) {
			size_t n = 0;

			while (n < len && n + 1 < reason_len && log[start + n] >= 0x20 && log[start + n] < 0x7f)
				n++;
			memcpy(reason, log + start, n);
			reason[n] = '\0';
			return n;
		}
		end = start > 0 ? start - 1 : 0;
	}
	return 0;
}

/* The verifier's log on a failed load: 64 KiB, so that a kernel before 6.4,
 * which keeps a log's beginning where it is cut, still reaches the reason on
 * most failures (later ones keep its end). On the heap: not on a thread's
 * stack, not shared by threads. */
#define VERIFIER_LOG_SIZE ((size_t)1 << 16)

/* "load", with the verifier's reason (gpureap_verifier_reason). The kernel
 * answers ENOSPC, not the verifier's own errno, when the log filled its
 * buffer: said so, where strerror would name a full disk. */
static int load_failed(int err, char *log, size_t log_size, char *why, size_t why_len)
{
	char step[200], reason[121];
	const size_t n = gpureap_verifier_reason(log, log_size, reason, sizeof(reason));

	if (err > 0)
		err = -err;
	if (n && err == -ENOSPC) {
		snprintf(why, why_len, "load (verifier: %s): its log was longer than %zu bytes", reason,
			 log_size);
		return err;
	}
	snprintf(step, sizeof(step), "load%s%s%s", n ? " (verifier: " : "", reason, n ? ")" : "");
	return fail(err, why, why_len, step);
}

int gpureap_load_scan_libbpf(const struct gpureap_scan_match *match, struct gpureap_scan_progs *out,
			     char *why, size_t why_len)
{
	char *log;
	struct gpureap_kernel_scan *skel;
	int err;

	libbpf_set_print(quiet);
	skel = gpureap_kernel_scan__open();
	if (!skel)
		return fail(errno, why, why_len, "open");
	SET_MATCH(skel->rodata, match);
	/* Only on failure does libbpf load again with the verifier's log here. */
	log = calloc(1, VERIFIER_LOG_SIZE);
	if (log)
		bpf_program__set_log_buf(skel->progs.gpureap_scan, log, VERIFIER_LOG_SIZE);
	err = gpureap_kernel_scan__load(skel);
	if (err) {
		err = load_failed(err, log, log ? VERIFIER_LOG_SIZE : 0, why, why_len);
		free(log);
		gpureap_kernel_scan__destroy(skel);
		return err;
	}
	free(log);
	out->scan_prog = keep_fd(bpf_program__fd(skel->progs.gpureap_scan));
	out->data_map = keep_fd(bpf_map__fd(skel->maps.data));
	err = errno;
	gpureap_kernel_scan__destroy(skel);
	return kept(out, out->scan_prog, out->data_map, err, why, why_len);
}

int gpureap_load_scan_compat(struct gpureap_scan_progs *out, char *why, size_t why_len)
{
	char *log;
	struct gpureap_kernel_scan_compat *skel;
	int err;

	libbpf_set_print(quiet);
	skel = gpureap_kernel_scan_compat__open();
	if (!skel)
		return fail(errno, why, why_len, "open");
	log = calloc(1, VERIFIER_LOG_SIZE);
	if (log)
		bpf_program__set_log_buf(skel->progs.gpureap_fds, log, VERIFIER_LOG_SIZE);
	err = gpureap_kernel_scan_compat__load(skel);
	if (err) {
		err = load_failed(err, log, log ? VERIFIER_LOG_SIZE : 0, why, why_len);
		free(log);
		gpureap_kernel_scan_compat__destroy(skel);
		return err;
	}
	free(log);
	out->fds_prog = keep_fd(bpf_program__fd(skel->progs.gpureap_fds));
	out->tasks_prog = keep_fd(bpf_program__fd(skel->progs.gpureap_tasks));
	err = errno;
	gpureap_kernel_scan_compat__destroy(skel);
	return kept(out, out->fds_prog, out->tasks_prog, err, why, why_len);
}

size_t gpureap_scan_data_size(void)
{
	return sizeof(struct gpureap_kernel_scan_lskel__data);
}

int gpureap_scan_set_data(int data_map, int walk, unsigned shards, const unsigned *readers,
			  char *why, size_t why_len)
{
	/* The light skeletons and the regular one lay .data out alike: one section. */
	struct gpureap_kernel_scan_lskel__data data;
	const unsigned key = 0;
	const unsigned max_shards = sizeof(data.gpureap_shard_readers) / sizeof(data.gpureap_shard_readers[0]);

	_Static_assert(sizeof(data) == sizeof(*((struct gpureap_kernel_scan *)0)->data) &&
			       sizeof(data) == sizeof(struct gpureap_kernel_scan_direct_lskel__data),
		       "one .data layout");
	if (shards > max_shards || (shards > 1 && !readers))
		return fail(EINVAL, why, why_len, "share the BPF scan's table walk");
	memset(&data, 0, sizeof(data));
	data.gpureap_walk_tables = walk ? 1 : 0;
	data.gpureap_shard_count = shards > 1 ? shards : 0;
	for (unsigned i = 0; shards > 1 && i < shards; i++)
		data.gpureap_shard_readers[i] = readers[i];
	if (bpf_map_update_elem(data_map, &key, &data, BPF_ANY))
		return fail(errno, why, why_len, "switch the BPF scan's table walk");
	return 0;
}
