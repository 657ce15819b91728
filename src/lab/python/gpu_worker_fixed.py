"""The plan's fixed GPU worker (gpureap lab, --workload torch, scenario S4):
on SIGTERM or SIGINT it drops its tensors, empties PyTorch's cache,
synchronises and exits 0, so the driver frees the memory at once. Prints one
JSON line when ready, and {"event": "sigterm"} / {"event": "released"} lines
when it shuts down."""
import argparse
import json
import os
import signal
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--tensors", type=int, default=8, help="1024x1024x64 float32 tensors (256 MiB each)")
    args = ap.parse_args()

    import torch

    device = torch.device(f"cuda:{args.device}")
    tensors = [torch.randn(1024, 1024, 64, device=device) for _ in range(args.tensors)]
    torch.cuda.synchronize(device)

    def graceful_shutdown(signum, _frame):
        print(json.dumps({"event": "sigterm", "pid": os.getpid(), "signal": signum}), flush=True)
        tensors.clear()
        torch.cuda.empty_cache()
        torch.cuda.synchronize(device)
        print(json.dumps({"event": "released", "pid": os.getpid(),
                          "allocated": torch.cuda.memory_allocated(device)}), flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, graceful_shutdown)
    signal.signal(signal.SIGINT, graceful_shutdown)
    print(json.dumps({"mode": "hold", "pid": os.getpid(), "gpu": "torch", "device": args.device,
                      "bytes": torch.cuda.memory_allocated(device), "sigterm": "cleanup"}), flush=True)
    while True:
        time.sleep(5)
        print(f"[Worker] alive, PID={os.getpid()}, PPID={os.getppid()}, "
              f"GPU={torch.cuda.memory_allocated(device) / 1024**3:.2f} GiB", file=sys.stderr, flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # said on stdout too: the lab waits there for the ready line
        print(json.dumps({"event": "error", "pid": os.getpid(), "message": f"{type(e).__name__}: {e}"}), flush=True)
        raise
