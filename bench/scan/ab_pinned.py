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
"""
import os
import resource
import statistics
import subprocess
import sys
import time


def commands(build, devices, pin):
    build_dir, _, pin_dir = build.partition("@")
    kept = ["--bpf-pin-dir", pin_dir] if pin_dir else []
    return {
        "trace": pin + [build_dir + "/gpureap", "trace", "--gpu", "sim", "--json", "--threads", "1"] + kept,
        "scan": pin + [build_dir + "/bench_scan", "--fd-source", "bpf"] + kept + devices,
    }


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
    results = {}
    for _ in range(runs):
        for name, build_dir in builds:
            for tool, cmd in commands(build_dir, devices, pin).items():
                results.setdefault((tool, name), []).append(timed(cmd))
    for (tool, name), samples in sorted(results.items()):
        wall = sorted(s[0] for s in samples)
        cpu = sorted(s[1] for s in samples)
        faults = statistics.median(s[2] for s in samples)
        q = statistics.quantiles(wall, n=4)
        print(f"{tool:5s} {name:8s} wall median {statistics.median(wall):6.1f}  q1 {q[0]:6.1f}  "
              f"q3 {q[2]:6.1f}  min {wall[0]:6.1f}  cpu median {statistics.median(cpu):6.1f} ms  "
              f"minor faults {faults:.0f}")


if __name__ == "__main__":
    main()
