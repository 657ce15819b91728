#!/usr/bin/env python3
"""What a fresh page and a process start cost on this machine, next to what
trace and the library scan pay in them (issue 12: their fixed costs).

Run it inside bench_scan_run's --extra ($DEVS, $BENCH_SCAN set; GPUREAP names
the gpureap binary), or alone for the first two parts. Prints a short table last.
  1. anonymous pages: first touch, one write per 4 KiB page (a page fault
     each), against madvise(MADV_POPULATE_WRITE) over the same size (one call);
  2. exec: /bin/true against `gpureap --version`;
  3. the fleet: trace --json and the scan on one thread, their minor faults.
"""
import ctypes
import mmap
import os
import resource
import statistics
import subprocess
import sys
import time

PAGE = 4096
MADV_POPULATE_WRITE = 23  # Linux 5.14+
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def touch_us_per_page(size):
    m = mmap.mmap(-1, size)
    t = time.perf_counter_ns()
    for off in range(0, size, PAGE):
        m[off] = 1
    dt = time.perf_counter_ns() - t
    m.close()
    return dt / 1000 / (size // PAGE)


def loop_us_per_page(size):
    # The loop alone over pages already present: what the first number includes besides faults.
    m = mmap.mmap(-1, size)
    for off in range(0, size, PAGE):
        m[off] = 1
    t = time.perf_counter_ns()
    for off in range(0, size, PAGE):
        m[off] = 2
    dt = time.perf_counter_ns() - t
    m.close()
    return dt / 1000 / (size // PAGE)


def populate_us_per_page(size):
    m = mmap.mmap(-1, size)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    t = time.perf_counter_ns()
    rc = libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(size), MADV_POPULATE_WRITE)
    dt = time.perf_counter_ns() - t
    err = ctypes.get_errno()
    m.close()
    if rc != 0:
        return float("nan"), os.strerror(err)
    return dt / 1000 / (size // PAGE), ""


def run_child(argv):
    """Wall ms and minor faults of one child (rusage of children, before/after)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter_ns()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = (time.perf_counter_ns() - t) / 1e6
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_minflt - before.ru_minflt


def medians(argv, n):
    runs = [run_child(argv) for _ in range(n)]
    return statistics.median(w for w, _ in runs), min(w for w, _ in runs), statistics.median(f for _, f in runs)


def main():
    rows = []
    size = 8 << 20
    touch = [touch_us_per_page(size) for _ in range(7)]
    loop = [loop_us_per_page(size) for _ in range(7)]
    pop = [populate_us_per_page(size) for _ in range(7)]
    pop_ok = [p for p, why in pop if not why]
    rows.append(("page: first write (fault)", f"{statistics.median(touch):.3f} us/page", f"loop alone {statistics.median(loop):.3f}"))
    rows.append(("page: MADV_POPULATE_WRITE", f"{statistics.median(pop_ok):.3f} us/page" if pop_ok else pop[0][1], "8 MiB per call"))

    here = os.path.dirname(os.path.abspath(__file__))
    gpureap = os.environ.get("GPUREAP", os.path.join(here, "../../.devbin/gpureap"))
    bench_scan = os.environ.get("BENCH_SCAN", os.path.join(here, "../../.devbin/bench_scan"))
    for name, argv in (("exec /bin/true", ["/bin/true"]), ("exec gpureap --version", [gpureap, "--version"])):
        med, best, flt = medians(argv, 41)
        rows.append((name, f"{med:.2f} ms (best {best:.2f})", f"{flt:.0f} minor faults"))
    devs = os.environ.get("DEVS", "").split()
    if devs:
        trace = [gpureap, "trace", "--gpu", "sim", "--json", "--fd-source", "bpf", "--threads", "1"]
        scan = [bench_scan, "--threads", "1"] + devs
        for name, argv in (("trace --json 1 thread", trace), ("scan bpf 1 thread", scan)):
            med, best, flt = medians(argv, 15)
            rows.append((name, f"{med:.2f} ms (best {best:.2f})", f"{flt:.0f} minor faults"))
    print()
    print(f"{'what':28} {'cost':26} note")
    for r in rows:
        print(f"{r[0]:28} {r[1]:26} {r[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
