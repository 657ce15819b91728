"""The plan's GPU worker (gpureap lab, --workload torch): SIGTERM is ignored,
as in badly written code; ~2 GiB on the GPU (eight 1024x1024x64 float32
tensors); then it idles forever. With --fork-children N it forks N children
after CUDA is initialised and without exec, as a preforking server does: they
inherit the CUDA context and never touch the GPU. Prints one JSON line when
ready."""
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
    ap.add_argument("--fork-children", type=int, default=0)
    args = ap.parse_args()

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import torch  # after SIG_IGN: a SIGTERM during the slow import is ignored too

    device = torch.device(f"cuda:{args.device}")
    tensors = [torch.randn(1024, 1024, 64, device=device) for _ in range(args.tensors)]
    torch.cuda.synchronize(device)
    children = []
    for _ in range(args.fork_children):
        pid = os.fork()
        if pid == 0:
            while True:  # holds the inherited descriptors, and with them the context
                time.sleep(3600)
        children.append(pid)
    ready = {"mode": "fork-after-init" if children else "hold", "pid": os.getpid(), "gpu": "torch",
             "device": args.device, "bytes": torch.cuda.memory_allocated(device), "sigterm": "ignore"}
    if children:
        ready.update(child=children[0], children=children)
    print(json.dumps(ready), flush=True)
    while True:
        time.sleep(5)
        print(f"[Worker] alive, PID={os.getpid()}, PPID={os.getppid()}, tensors={len(tensors)}",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # said on stdout too: the lab waits there for the ready line
        print(json.dumps({"event": "error", "pid": os.getpid(), "message": f"{type(e).__name__}: {e}"}), flush=True)
        raise
