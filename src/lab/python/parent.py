"""The plan's parent (gpureap lab, --workload torch): spawn the GPU worker(s),
sleep, and exit without wait(), so the workers are orphaned and re-parented to
the container's PID 1. Prints one JSON line when they are started."""
import argparse
import json
import os
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exit-after", type=float, default=5.0, help="seconds before exiting (the plan: 5)")
    ap.add_argument("--count", type=int, default=1, help="workers to start (the plan's variant: 10)")
    ap.add_argument("worker", nargs=argparse.REMAINDER, help="-- WORKER ARGV")
    args = ap.parse_args()
    worker = args.worker[1:] if args.worker[:1] == ["--"] else args.worker
    if not worker:
        ap.error("missing -- WORKER ARGV")
    kids = [subprocess.Popen(worker) for _ in range(max(args.count, 1))]
    print(json.dumps({"mode": "parent", "pid": os.getpid(), "child": kids[0].pid,
                      "children": [k.pid for k in kids], "waits": False}), flush=True)
    time.sleep(args.exit_after)
    print(f"[Parent] PID {os.getpid()}: exiting without wait()", file=sys.stderr, flush=True)
    os._exit(0)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # said on stdout too: the lab waits there for the ready line
        print(json.dumps({"event": "error", "pid": os.getpid(), "message": f"{type(e).__name__}: {e}"}), flush=True)
        raise
