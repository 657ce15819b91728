#!/usr/bin/env python3
"""Scenario S7 (issue 6): an NCCL job loses a rank; how long do the others hold the GPU?

One process per GPU, started by this driver (no torchrun) with the
torch.distributed environment set in each rank's *initial* environment
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_RUN_ID): /proc/PID/environ shows only that block, which is what
`gpureap trace` reads (a value set later in os.environ is invisible to it).

Each rank allocates ~2 GiB on its GPU and loops all_reduce. The driver SIGKILLs
rank 0, then samples every rank's GPU memory with
`nvidia-smi --query-compute-apps` every 0.5 s until the survivors' memory is
released or a cap passes, runs `gpureap trace --json` once during the hang and
checks for an nccl_missing_rank finding naming this job, then (if the survivors
still hold memory at the cap) sends them SIGTERM, as a pod deletion would, and
measures that release too. It prints one JSON result line and a short table last.

Variants:
  baseline  PyTorch defaults: no SIGTERM handler, TORCH_NCCL_ASYNC_ERROR_HANDLING
            unset (3 on PyTorch >= 2.2; pass --baseline-aeh 0 for the issue's
            never-ending hang), the default collective timeout (10 min for NCCL).
  --fixed   a SIGTERM handler calling dist.destroy_process_group(),
            TORCH_NCCL_ASYNC_ERROR_HANDLING=1, init_process_group(timeout=10 s),
            and a loop that polls the collective so Python can run the handler.

Shared-host safety rule: every rank runs with NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1.

Exit: 0 measured and the finding was reported, 1 measured but the finding was
missing (or a rank failed), 2 could not run (no PyTorch, no nvidia-smi, < 2 GPUs).
"""
import argparse
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

SAFETY_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
FIXED_TIMEOUT_S = 10


# ---------------------------------------------------------------- the rank ---

def rank_main(args):
    """One rank: its identity comes from the environment the driver gave it."""
    import datetime

    import torch
    import torch.distributed as dist

    for k, v in SAFETY_ENV.items():
        if os.environ.get(k) != v:
            print(f"rank refuses to start: {k} must be {v}", file=sys.stderr, flush=True)
            return 2
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    # Before anything touches CUDA: no stray context on GPU 0.
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    if args.fixed:
        def on_term(signum, frame):
            # Tear the communicators down so peers and the driver see a clean exit;
            # a communicator stuck on a dead peer may not come down: exit anyway.
            guard = threading.Timer(5.0, os._exit, args=(128 + signum,))
            guard.daemon = True
            guard.start()
            try:
                dist.destroy_process_group()
            finally:
                os._exit(128 + signum)
        signal.signal(signal.SIGTERM, on_term)
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=FIXED_TIMEOUT_S))
    else:
        dist.init_process_group("nccl")

    hold = torch.empty(int(args.gib * (1 << 30)), dtype=torch.uint8, device=device)
    hold.fill_(1)
    x = torch.ones(1 << 20, device=device)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"READY {rank} {os.getpid()}", flush=True)

    while True:
        if args.fixed:
            # Poll: the main thread returns to Python between checks, so the
            # SIGTERM handler can run while a collective is stuck.
            work = dist.all_reduce(x, async_op=True)
            while not work.is_completed():
                time.sleep(0.01)
        else:
            dist.all_reduce(x)
            torch.cuda.synchronize()  # blocks for good once a peer is gone
        x.fill_(1.0)


# -------------------------------------------------------------- the driver ---

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_count():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return 0
    return len([line for line in out.stdout.splitlines() if line.strip()])


def compute_apps():
    """{pid: MiB summed over GPUs, as nvidia-smi lists them}, or None on failure."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return None
    apps = {}
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        try:
            mib = int(parts[1])
        except ValueError:
            mib = 0  # "[N/A]"
        apps[int(parts[0])] = apps.get(int(parts[0]), 0) + mib
    return apps


def run_trace(gpureap, run_id):
    """One `gpureap trace --json`: did it report nccl_missing_rank for this job?"""
    t = time.monotonic()
    try:
        out = subprocess.run([gpureap, "trace", "--gpu", "auto", "--json"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"ran": False, "error": str(e)}
    result = {"ran": True, "exit": out.returncode, "seconds": round(time.monotonic() - t, 3),
              "reported": False}
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        result["error"] = "not JSON: " + out.stderr[-400:]
        return result
    for f in doc.get("findings", []):
        g = f.get("group") or {}
        if f.get("kind") == "nccl_missing_rank" and g.get("run_id") == run_id:
            result.update(reported=True, severity=f.get("severity"), watchdog=g.get("watchdog"),
                          missing_local_ranks=g.get("missing_local_ranks"),
                          survivor_memory=g.get("survivor_memory"),
                          survivors=[s.get("pid") for s in g.get("survivors", [])])
    return result


def wait_ready(procs, timeout_s):
    """Reads each rank's READY line; returns None on success, else what failed."""
    sel = selectors.DefaultSelector()
    for r, p in enumerate(procs):
        sel.register(p.stdout, selectors.EVENT_READ, r)
    pending = set(range(len(procs)))
    deadline = time.monotonic() + timeout_s
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"ranks {sorted(pending)} not ready after {timeout_s} s"
        for key, _ in sel.select(timeout=left):
            r = key.data
            line = key.fileobj.readline()
            if not line:
                sel.unregister(key.fileobj)
                if r in pending:
                    return f"rank {r} exited before it was ready (code {procs[r].wait()})"
                continue
            if line.startswith("READY "):
                pending.discard(r)
                sel.unregister(key.fileobj)
    return None


def stop(procs):
    """SIGKILL and reap every rank this driver started that is still alive."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def measure_release(pids, procs, cap_s, interval_s, on_sample=None):
    """Samples until none of `pids` holds memory (or has exited) or cap_s passes.
    Returns (seconds until released or None, samples)."""
    t0 = time.monotonic()
    samples = []
    while True:
        now = time.monotonic() - t0
        apps = compute_apps() or {}
        held = {pid: apps.get(pid, 0) for pid in pids}
        samples.append({"t": round(now, 2), "mib": held})
        if on_sample:
            on_sample(now, held)
        if sum(held.values()) == 0:
            return round(now, 2), samples
        if now >= cap_s:
            return None, samples
        next_at = t0 + (len(samples)) * interval_s
        for p in procs:  # waiting on exits doubles as the sampling interval
            left = next_at - time.monotonic()
            if left <= 0:
                break
            try:
                p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                pass


def driver_main(args):
    variant = "fixed" if args.fixed else "baseline"
    try:
        import torch  # noqa: F401  (only checks that the ranks can run)
    except ImportError:
        print("S7 needs PyTorch (import torch failed)", file=sys.stderr)
        return 2
    try:
        ngpu = gpu_count()
    except (OSError, subprocess.TimeoutExpired):
        ngpu = 0
    ranks = args.ranks or min(ngpu, 3)
    if ranks < 2 or ngpu < ranks:
        asked = f", asked {args.ranks}" if args.ranks else ""
        print(f"S7 needs >= 2 GPUs: NCCL refuses two ranks on one GPU (found {ngpu}{asked})",
              file=sys.stderr)
        return 2

    run_id = f"s7-{variant}-{uuid.uuid4().hex[:8]}"
    port = free_port()
    procs = []
    try:
        for r in range(ranks):
            env = dict(os.environ)
            for k in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING",
                      "TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"):
                env.pop(k, None)
            env.update(SAFETY_ENV)
            env.update({"RANK": str(r), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(r),
                        "LOCAL_WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": run_id,
                        "PYTHONUNBUFFERED": "1"})
            if args.fixed:
                env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
            elif args.baseline_aeh is not None:
                env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = args.baseline_aeh
            cmd = [sys.executable, os.path.abspath(__file__), "--rank-worker", "--gib", str(args.gib)]
            if args.fixed:
                cmd.append("--fixed")
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
        failed = wait_ready(procs, args.startup_s)
        if failed:
            print(f"S7 {variant}: {failed}", file=sys.stderr)
            return 1

        before = compute_apps() or {}
        per_rank_mib = {r: before.get(p.pid, 0) for r, p in enumerate(procs)}
        survivors = procs[1:]
        spids = [p.pid for p in survivors]

        procs[0].send_signal(signal.SIGKILL)  # rank 0 dies
        procs[0].wait()
        trace = {"ran": False}

        def during(now, held):
            # Once, during the hang: the survivors still hold memory.
            if not trace["ran"] and now >= args.trace_after_s and sum(held.values()) > 0:
                trace.clear()
                trace.update(run_trace(args.gpureap, run_id))

        hold_s, samples = measure_release(spids, survivors, args.cap_s, args.interval_s, during)
        held_at_kill = sum(samples[0]["mib"].values()) if samples else 0

        term_s = None
        if hold_s is None:
            # Still held at the cap: what a pod deletion (SIGTERM) would free, and when.
            for p in survivors:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            term_s, _ = measure_release(spids, survivors, args.term_cap_s, args.interval_s)

        exits = {r: p.poll() for r, p in enumerate(procs)}
        result = {
            "scenario": "S7", "variant": variant, "run_id": run_id, "ranks": ranks,
            "gib_per_rank": args.gib, "per_rank_mib_before_kill": per_rank_mib,
            "survivor_pids": spids, "held_mib_after_kill": held_at_kill,
            "hold_s_after_kill": hold_s, "cap_s": args.cap_s,
            "release_s_after_sigterm": term_s, "exit_codes": exits, "trace": trace,
            "samples": samples,
        }
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(result, f, indent=2)
        brief = {k: v for k, v in result.items() if k != "samples"}
        print(json.dumps(brief), flush=True)

        hold_txt = f"{hold_s:.1f} s" if hold_s is not None else f"> {args.cap_s:.0f} s (cap)"
        if term_s is not None:
            hold_txt += f"; SIGTERM freed it in {term_s:.1f} s"
        reported = "yes" if trace.get("reported") else "no"
        if trace.get("reported"):
            reported += f" ({trace.get('severity')}, {trace.get('watchdog')})"
        elif not trace.get("ran"):
            reported += " (not run: memory already released)"
        print()
        print(f"{'variant':<9} {'ranks':>5}  {'hold after kill':<40} {'memory held':>12}  finding")
        print(f"{variant:<9} {ranks:>5}  {hold_txt:<40} {held_at_kill:>8} MiB  {reported}")
        return 0 if trace.get("reported") else 1
    finally:
        stop(procs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixed", action="store_true", help="the fix: handler, async error handling, 10 s timeout")
    ap.add_argument("--ranks", type=int, default=0, help="ranks = GPUs used (default: min(GPUs, 3))")
    ap.add_argument("--gib", type=float, default=2.0, help="memory each rank holds")
    ap.add_argument("--cap-s", type=float, default=120.0, help="stop sampling after this long")
    ap.add_argument("--term-cap-s", type=float, default=30.0, help="cap after the SIGTERM")
    ap.add_argument("--interval-s", type=float, default=0.5)
    ap.add_argument("--trace-after-s", type=float, default=1.0, help="run gpureap trace this long after the kill")
    ap.add_argument("--startup-s", type=float, default=300.0)
    ap.add_argument("--baseline-aeh", default=None, help="baseline TORCH_NCCL_ASYNC_ERROR_HANDLING (default: unset)")
    ap.add_argument("--gpureap", default=os.environ.get("GPUREAP", "gpureap"))
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_worker:
        return rank_main(args)
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
