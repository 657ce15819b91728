#include "kernel_scan_loaders.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kernel_scan.lskel.h"
#include "kernel_scan.skel.h"

/* A program descriptor of our own, so the skeleton can be destroyed at once:
 * the program lives as long as some descriptor refers to it. */
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

/* Both programs kept, or neither: `err` is errno from the keep_fd calls. */
static int kept_both(struct gpureap_scan_progs *out, int err, char *why, size_t why_len)
{
	if (out->fds_prog >= 0 && out->tasks_prog >= 0)
		return 0;
	if (out->fds_prog >= 0)
		close(out->fds_prog);
	if (out->tasks_prog >= 0)
		close(out->tasks_prog);
	out->fds_prog = -1;
	out->tasks_prog = -1;
	return fail(err, why, why_len, "keep the programs");
}

int gpureap_load_scan_light(struct gpureap_scan_progs *out, char *why, size_t why_len)
{
	struct gpureap_kernel_scan_lskel *skel = gpureap_kernel_scan_lskel__open();
	int err;

	if (!skel)
		return fail(errno, why, why_len, "open");
	err = gpureap_kernel_scan_lskel__load(skel);
	if (err) {
		err = fail(err, why, why_len,
			   "the kernel's loader program (Linux 5.14+; CO-RE in the kernel 5.17+)");
		gpureap_kernel_scan_lskel__destroy(skel);
		return err;
	}
	out->fds_prog = keep_fd(skel->progs.gpureap_fds.prog_fd);
	out->tasks_prog = keep_fd(skel->progs.gpureap_tasks.prog_fd);
	err = errno;
	gpureap_kernel_scan_lskel__destroy(skel);
	return kept_both(out, err, why, why_len);
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

int gpureap_load_scan_libbpf(struct gpureap_scan_progs *out, char *why, size_t why_len)
{
	char log[4096];
	struct gpureap_kernel_scan *skel;
	int err;

	libbpf_set_print(quiet);
	skel = gpureap_kernel_scan__open();
	if (!skel)
		return fail(errno, why, why_len, "open");
	log[0] = '\0';
	/* Only on failure does libbpf load again with the verifier's log here. */
	bpf_program__set_log_buf(skel->progs.gpureap_fds, log, sizeof(log));
	err = gpureap_kernel_scan__load(skel);
	if (err) {
		char step[200];
		/* The log's last line says why the verifier refused. */
		size_t n = strlen(log);
		while (n > 0 && log[n - 1] == '\n')
			log[--n] = '\0';
		const char *last = strrchr(log, '\n');
		snprintf(step, sizeof(step), "load%s%.120s", n ? " (verifier: " : "",
			 n ? (last ? last + 1 : log) : "");
		if (n)
			strncat(step, ")", sizeof(step) - strlen(step) - 1);
		err = fail(err, why, why_len, step);
		gpureap_kernel_scan__destroy(skel);
		return err;
	}
	out->fds_prog = keep_fd(bpf_program__fd(skel->progs.gpureap_fds));
	out->tasks_prog = keep_fd(bpf_program__fd(skel->progs.gpureap_tasks));
	err = errno;
	gpureap_kernel_scan__destroy(skel);
	return kept_both(out, err, why, why_len);
}
