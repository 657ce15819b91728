#!/usr/bin/env python3
"""Issue 13 on a real GPU: gpureap exporter's series for real CUDA processes.

Starts, and ends, only its own processes:
  idle   gpureap-worker on CUDA's driver API holding 2.5 GiB, running nothing;
  busy   a PyTorch loop of matrix multiplies on the same GPU (near 100 % SM);
  the exporter (NVML) on loopback, a scan every 2 s, utilization sampled
  every second, idle_holder after 15 s at 0 % SM.
Meanwhile `nvidia-smi pmon -s u` reads per-process SM utilization the
driver's way. Checks: both processes' memory series, the idle worker's
idle_holder finding (and how long it took), the busy process not flagged, and
the exporter's SM ratio for each against pmon's mean over the same seconds.
Binaries from tests/device/stage.sh ($BIN). Prints a short table last; exit 0
all pass, 1 a check failed, 2 could not run.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

BIN = os.environ.get("BIN", os.path.join(os.path.dirname(__file__), "..", "..", ".devbin"))
GPUREAP = os.path.join(BIN, "gpureap")
WORKER = os.path.join(BIN, "gpureap-worker-dynamic")
MIB = 1024 * 1024
# gpureap's own shared libraries (stage.sh); only for our binaries, not torch's python.
OUR_ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.join(BIN, "lib"))
IDLE_MINUTES = 0.25  # 15 s at 0 % SM makes an idle holder
BUSY_SECONDS = 120

BUSY_PROGRAM = f"""
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")
torch.cuda.synchronize()
print('{{"event":"ready"}}', flush=True)
end = time.monotonic() + {BUSY_SECONDS}
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""

started = []
results = []


def record(check, ok, evidence):
    results.append((check, "PASS" if ok else "FAIL", evidence))
    print(f"[{'PASS' if ok else 'FAIL'}] {check}: {evidence}", flush=True)


def spawn(argv, **kw):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)
    started.append(p)
    return p


def first_line(p, pattern, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"process {p.pid} exited before its ready line (rc={p.poll()})")
        if re.search(pattern, line):
            return line.strip()
    raise RuntimeError(f"process {p.pid}: no ready line in {timeout} s")


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def series(text, name, pid=None):
    """Values of `name` (with labels), optionally only those whose pid label is `pid`."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels, value = line.rsplit(" ", 1)
        if pid is not None and f'pid="{pid}"' not in labels:
            continue
        out.append((labels, float(value)))
    return out


def main():
    if shutil.which("nvidia-smi") is None or not os.path.exists(GPUREAP):
        print("exporter_checks.py: needs nvidia-smi and a staged gpureap", file=sys.stderr)
        return 2
    info = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True, check=True).stdout.strip().splitlines()[0]
    print(f"GPU: {info}; kernel {os.uname().release}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")

    idle = spawn([WORKER, "hold", "--gpu", "cuda", "--device", "0", "--bytes", str(2560 * MIB)], env=OUR_ENV)
    first_line(idle, r"^\{")
    busy = spawn([sys.executable, "-c", BUSY_PROGRAM])
    first_line(busy, r'"ready"')
    exporter = spawn([GPUREAP, "exporter", "--listen", "127.0.0.1:0", "--gpu", "nvml", "--interval", "2",
                      "--sample-period", "1", "--idle-minutes", str(IDLE_MINUTES), "--idle-min-mib", "512"],
                     stderr=open(os.path.join(os.environ.get("OUT", "/tmp"), "exporter.log"), "w"), env=OUR_ENV)
    port = int(re.search(r"listening on port (\d+)", first_line(exporter, r"listening on port")).group(1))
    t0 = time.monotonic()
    pmon = spawn(["nvidia-smi", "pmon", "-s", "u", "-d", "1", "-c", "40"])

    found_after = None
    last = ""
    while time.monotonic() - t0 < 60:
        time.sleep(1)  # polling a remote view: no event to wait on
        last = scrape(port)
        flagged = [l for l, _ in series(last, "gpureap_finding_info") if 'kind="idle_holder"' in l]
        if any(f'pid="{idle.pid}"' in l for l in flagged):
            found_after = time.monotonic() - t0
            break
    # The utilization window's reading at (about) the same time as pmon's tail.
    time.sleep(4)
    last = scrape(port)
    pmon.send_signal(signal.SIGINT)
    pmon_out, _ = pmon.communicate(timeout=10)

    pmon_sm = {}
    for line in pmon_out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[1].isdigit() and f[0].isdigit():
            pmon_sm.setdefault(int(f[1]), []).append(0.0 if f[3] == "-" else float(f[3]))

    def pmon_mean(pid, last_n=10):
        v = pmon_sm.get(pid, [])[-last_n:]
        return sum(v) / len(v) if v else None

    for name, p in (("idle worker", idle), ("busy torch", busy)):
        mem = series(last, "gpureap_gpu_process_memory_bytes", p.pid)
        record(f"{name}: memory series", bool(mem) and mem[0][1] > 1024 * MIB,
               f"{mem[0][1] / MIB:.0f} MiB" if mem else "absent")
    idle_sm = series(last, "gpureap_gpu_process_sm_utilization_ratio", idle.pid)
    busy_sm = series(last, "gpureap_gpu_process_sm_utilization_ratio", busy.pid)
    idle_secs = series(last, "gpureap_gpu_process_idle_seconds", idle.pid)
    record("idle worker: idle_holder finding", found_after is not None,
           f"after {found_after:.1f} s (threshold {IDLE_MINUTES * 60:.0f} s)" if found_after else "not found in 60 s")
    busy_flagged = [l for l, _ in series(last, "gpureap_finding_info")
                    if 'kind="idle_holder"' in l and f'pid="{busy.pid}"' in l]
    record("busy torch: not an idle holder", not busy_flagged, f"{len(busy_flagged)} idle_holder series")
    pm_idle, pm_busy = pmon_mean(idle.pid), pmon_mean(busy.pid)
    ex_idle = idle_sm[0][1] * 100 if idle_sm else None
    ex_busy = busy_sm[0][1] * 100 if busy_sm else None
    record("idle worker: SM % agrees with pmon", ex_idle is not None and ex_idle <= 1 and (pm_idle or 0) <= 1,
           f"exporter {ex_idle}, pmon {pm_idle}, idle {idle_secs[0][1] if idle_secs else None} s")
    record("busy torch: SM % agrees with pmon (within 15 points)",
           ex_busy is not None and pm_busy is not None and abs(ex_busy - pm_busy) <= 15,
           f"exporter {ex_busy}, pmon {pm_busy}")
    sampled = series(last, "gpureap_gpu_utilization_sampled")
    record("per-process utilization sampled on this GPU", bool(sampled) and sampled[0][1] == 1,
           str(sampled[0][1]) if sampled else "absent")

    with open(os.path.join(os.environ.get("OUT", "/tmp"), "exporter-metrics.txt"), "w") as f:
        f.write(last)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "exporter-pmon.txt"), "w") as f:
        f.write(pmon_out)

    print()
    print(f"{'check':52} {'verdict':7} evidence")
    for check, verdict, evidence in results:
        print(f"{check:52} {verdict:7} {evidence}")
    return 0 if all(v == "PASS" for _, v, _ in results) else 1


if __name__ == "__main__":
    try:
        rc = main()
    except Exception as e:  # a failed start is "could not run", with its reason
        print(f"exporter_checks.py: {e}", file=sys.stderr)
        rc = 2
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
            p.wait()
    sys.exit(rc)
