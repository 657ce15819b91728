#!/usr/bin/env python3
"""Alternates builds of `gpureap trace --json` (one thread) and the library scan
on the bench fleet, each run pinned to one CPU, and prints medians, quartiles,
the best run, CPU time and minor page faults per build. Run it inside the fleet:

  bench_scan_run --bench-scan B/bench_scan --gpureap B/gpureap --repeat 1 \\
    --extra 'python3 bench/scan/ab_pinned.py 31 base=DIR1 new=DIR2'

Each DIR holds a `gpureap` and a `bench_scan`; NAME=DIR@PINDIR runs both with
`--bpf-pin-dir PINDIR` (programs pinned by the first run, taken by the rest;
PINDIR on a bpffs). PIN (default "taskset -c 1")
prefixes every run: on the 2-vCPU dev VM, unpinned runs were bimodal (the
quartiles of one build 20 ms apart), pinned ones within 2 ms.

PROG_STATS=1 also reports the time the kernel spent in the scan's programs
(every program named gpureap_scan) during each run, from the kernel's own
BPF statistics (kernel.bpf_stats_enabled, on for the runs, restored after):
the walk alone, without process start, load, or what user space does. Pinned
builds only: an unpinned run's programs are gone before they can be read.
SCAN_ARGS adds arguments to the library scan's (e.g. "--reads probe").
"""
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import time


def commands(build, devices, pin):
    build_dir, _, pin_dir = build.partition("@")
    scan_args = os.environ.get("SCAN_ARGS", "").split()
    kept = ["--bpf-pin-dir", pin_dir] if pin_dir else []
    return {
        "trace": pin + [build_dir + "/gpureap", "trace", "--gpu", "sim", "--json", "--threads", "1"] + kept,
        "scan": pin + [build_dir + "/bench_scan", "--fd-source", "bpf"] + kept + scan_args + devices,
    }


BPF_PROG_GET_NEXT_ID, BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD = 11, 13, 15
SYS_BPF = 321  # x86_64
libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd, attr):
    return libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))


def scan_prog_ns():
    """Run time (ns) of every loaded program named gpureap_scan, summed."""
    total, prog_id = 0, 0
    while True:
        attr = (ctypes.c_uint32 * 4)(prog_id, 0, 0, 0)
        if bpf(BPF_PROG_GET_NEXT_ID, attr) != 0:
            return total
        prog_id = attr[1]
        attr = (ctypes.c_uint32 * 4)(prog_id, 0, 0, 0)
        fd = bpf(BPF_PROG_GET_FD_BY_ID, attr)
        if fd < 0:
            continue
        # struct bpf_prog_info: name at 64 (16 bytes), run_time_ns at 192.
        info = ctypes.create_string_buffer(208)
        attr = (ctypes.c_uint64 * 2)(fd | (208 << 32), ctypes.addressof(info))
        if bpf(BPF_OBJ_GET_INFO_BY_FD, attr) == 0 and info.raw[64:80].split(b"\0")[0] == b"gpureap_scan":
            total += int.from_bytes(info.raw[192:200], "little")
        os.close(fd)


def timed(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = (time.perf_counter() - start) * 1e3
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3
    faults = after.ru_minflt - before.ru_minflt
    return wall, cpu, faults


def main():
    if len(sys.argv) < 3 or "DEVS" not in os.environ:
        sys.exit("usage (inside bench_scan_run --extra): ab_pinned.py RUNS NAME=DIR...")
    runs = int(sys.argv[1])
    builds = [a.split("=", 1) for a in sys.argv[2:]]
    devices = os.environ["DEVS"].split()
    pin = os.environ.get("PIN", "taskset -c 1").split()
    stats = os.environ.get("PROG_STATS") == "1"
    stats_file = "/proc/sys/kernel/bpf_stats_enabled"
    if stats:
        with open(stats_file) as f:
            stats_before = f.read().strip()
        with open(stats_file, "w") as f:
            f.write("1")
    results, prog_ms = {}, {}
    # One untimed run of each first: a pinned build pins its programs there,
    # so that every timed run takes them (and the statistics see them).
    for name, build_dir in builds:
        for cmd in commands(build_dir, devices, pin).values():
            timed(cmd)
    try:
        for _ in range(runs):
            for name, build_dir in builds:
                for tool, cmd in commands(build_dir, devices, pin).items():
                    before = scan_prog_ns() if stats else 0
                    results.setdefault((tool, name), []).append(timed(cmd))
                    if stats and "@" in build_dir:  # unpinned ones are gone when read
                        prog_ms.setdefault((tool, name), []).append((scan_prog_ns() - before) / 1e6)
    finally:
        if stats:
            with open(stats_file, "w") as f:
                f.write(stats_before)
    for (tool, name), samples in sorted(results.items()):
        wall = sorted(s[0] for s in samples)
        cpu = sorted(s[1] for s in samples)
        faults = statistics.median(s[2] for s in samples)
        q = statistics.quantiles(wall, n=4)
        print(f"{tool:5s} {name:8s} wall median {statistics.median(wall):6.1f}  q1 {q[0]:6.1f}  "
              f"q3 {q[2]:6.1f}  min {wall[0]:6.1f}  cpu median {statistics.median(cpu):6.1f} ms  "
              f"minor faults {faults:.0f}")
    for (tool, name), samples in sorted(prog_ms.items()):
        samples.sort()
        q = statistics.quantiles(samples, n=4)
        print(f"{tool:5s} {name:8s} programs median {statistics.median(samples):6.2f}  q1 {q[0]:6.2f}  "
              f"q3 {q[2]:6.2f}  min {samples[0]:6.2f} ms")


if __name__ == "__main__":
    main()
