#!/usr/bin/env python3
"""Where one `gpureap trace --json` run spends its wall time, by stage, on the
bench/scan fleet: run it inside bench_scan_run's --extra ($DEVS set). Each
build named must be a gpureap built with tests/device/trace_stages.patch
applied (stage marks on stderr: "STAGE name monotonic-ns"; not in main).
  python3 trace_stages.py RUNS THREADS NAME=GPUREAP[@PIN_DIR] [NAME=GPUREAP[@PIN_DIR]...]
@PIN_DIR (a directory on a bpffs): that build runs with --bpf-pin-dir, after one
untimed run that pins its programs there. Builds alternate run by run. Prints the median milliseconds of each stage per
build last, from the fork before exec to the parent's wait returning.
"""
import os
import statistics
import sys
import time


def one_run(argv):
    r, w = os.pipe()
    t0 = time.monotonic_ns()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        devnull = os.open("/dev/null", os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(w, 2)
        os.execv(argv[0], argv)
    os.close(w)
    err = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        err += chunk
    os.waitpid(pid, 0)
    t1 = time.monotonic_ns()
    os.close(r)
    marks = [("fork", t0)]
    for line in err.decode(errors="replace").splitlines():
        if line.startswith("STAGE "):
            _, name, ns = line.split()
            marks.append((name, int(ns)))
    marks.append(("reaped", t1))
    return [(f"{a[0]} -> {b[0]}", (b[1] - a[1]) / 1e6) for a, b in zip(marks, marks[1:])]


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: trace_stages.py RUNS THREADS NAME=GPUREAP[@PIN_DIR] [NAME=GPUREAP[@PIN_DIR]...]")
    runs = int(sys.argv[1])
    threads = sys.argv[2]
    builds = [a.split("=", 1) for a in sys.argv[3:]]
    argvs = {}
    for name, build in builds:
        gpureap, _, pin_dir = build.partition("@")
        argvs[name] = [gpureap, "trace", "--gpu", "sim", "--json", "--fd-source", "bpf", "--threads", threads]
        if pin_dir:
            argvs[name] += ["--bpf-pin-dir", pin_dir]
            one_run(argvs[name])  # pins the programs; not timed
    table = {}  # (build, stage) -> ms per run
    order = []
    for _ in range(runs):
        for name, _ in builds:
            total = 0.0
            for stage, ms in one_run(argvs[name]):
                if stage not in order:
                    order.append(stage)
                table.setdefault((name, stage), []).append(ms)
                total += ms
            table.setdefault((name, "total"), []).append(total)
    order.append("total")
    print(f"trace --json, {threads} thread(s), {runs} runs per build: median ms per stage")
    print(f"  {'stage':32}" + "".join(f" {name:>9}" for name, _ in builds))
    for stage in order:
        cells = [statistics.median(table.get((name, stage), [0.0])) for name, _ in builds]
        print(f"  {stage:32}" + "".join(f" {c:9.2f}" for c in cells))
    print(f"  {'total, best run':32}" + "".join(f" {min(table[(name, 'total')]):9.2f}" for name, _ in builds))


if __name__ == "__main__":
    sys.exit(main())
