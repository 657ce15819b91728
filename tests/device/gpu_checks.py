#!/usr/bin/env python3
"""gpureap on a real NVIDIA GPU: the checks of issues 3, 4, 5 and 12, in one run.

Run by tests/device/run.sh on the GPU machine with the binaries built here
(gpureap, gpureap-worker-dynamic, gpureap-init) and tini-static in $BIN.
Every process this script starts is recorded and killed by its own pid at
the end, also on failure. GPU settings are never changed.

Each check prints its evidence; the last thing printed is a short table.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import traceback

import pynvml

BIN = os.environ["BIN"]
GPUREAP = os.path.join(BIN, "gpureap")
WORKER = os.path.join(BIN, "gpureap-worker-dynamic")
INIT = os.path.join(BIN, "gpureap-init")
TINI = os.path.join(BIN, "tini-static")
MIB = 1024 * 1024
WORKER_BYTES = 2560 * MIB  # the plan's ~2.5 GiB worker
RELEASE_SLACK = 64 * MIB   # "back to baseline" tolerance

started = []  # Popen objects of everything this script started
results = []  # (check, verdict, evidence)


def record(check, ok, evidence):
    verdict = "PASS" if ok else "FAIL"
    results.append((check, verdict, evidence))
    print(f"[{verdict}] {check}: {evidence}", flush=True)


def spawn(argv, **kw):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)
    started.append(p)
    return p


def ready(p, timeout=60):
    """First JSON line of a worker's stdout: it is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"process {p.pid} exited before it was ready (rc={p.poll()})")
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("not ready in time")


def nvml_used(handle):
    """Used memory by v2 accounting when the driver has it (reserved excluded)."""
    try:
        m = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return m.used
    except Exception:
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used


def nvml_pids(handle):
    return {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}


def wait_release(handle, baseline, cap=30.0):
    """Seconds until used memory is back within slack of the baseline (None past the cap)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < cap:
        if nvml_used(handle) <= baseline + RELEASE_SLACK:
            return time.monotonic() - t0
        time.sleep(0.005)
    return None


def wait_held(handle, baseline, nbytes, cap=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < cap:
        if nvml_used(handle) >= baseline + nbytes:
            return True
        time.sleep(0.01)
    return False


def trace(*extra):
    r = subprocess.run([GPUREAP, "trace", "--gpu", "nvml", "--json", *extra],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}, r.stderr


def proc_in(doc, pid):
    return next((p for p in doc.get("processes", []) if p["pid"] == pid), None)


def reap_pid(pid):
    """Reaps a process reparented to this subreaper (a killed creator's child)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def host_child_of(parent_pid):
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("PPid:") and int(line.split()[1]) == parent_pid:
                        return int(name)
        except OSError:
            pass
    return None


def kill(p_or_pid, sig=signal.SIGKILL):
    pid = p_or_pid if isinstance(p_or_pid, int) else p_or_pid.pid
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def reap_exited():
    """Reaps this subreaper's children that have already exited: a zombie an
    earlier check left must not show up as a finding in the next one."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def reap(p):
    try:
        p.wait(timeout=10)
    except Exception:
        pass


TORCH_WORKER_PATH = "/tmp/gpureap_torch_worker.py"
TORCH_WORKER = r"""
import os, signal, sys, time, json, torch
if sys.argv[1] == "ignore": signal.signal(signal.SIGTERM, signal.SIG_IGN)
x = torch.empty(int(sys.argv[2]), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(json.dumps({"pid": os.getpid(), "bytes": x.numel()}), flush=True)
while True: time.sleep(3600)
"""


# Issue 12: a pynvml monitoring agent (init, memory info, process list,
# utilization; no CUDA context) and a preforking PyTorch server (the master puts
# the memory on the GPU, forks workers without exec).
NVML_MONITOR_PATH = "/tmp/gpureap_nvml_monitor.py"
NVML_MONITOR = r"""
import json, os, time, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
def poll():
    pynvml.nvmlDeviceGetMemoryInfo(h)
    pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    pynvml.nvmlDeviceGetUtilizationRates(h)
poll()
print(json.dumps({"pid": os.getpid()}), flush=True)
while True:
    time.sleep(1)
    poll()
"""
PREFORK_SERVER_PATH = "/tmp/gpureap_prefork_server.py"
PREFORK_SERVER = r"""
import json, os, sys, time, torch
x = torch.empty(int(sys.argv[2]), dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
children = []
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:  # a worker: keeps the inherited context, never touches CUDA
        while True: time.sleep(3600)
    children.append(pid)
print(json.dumps({"pid": os.getpid(), "children": children}), flush=True)
while True: time.sleep(3600)
"""


def device_mappings(pid):
    """/dev/nvidia* files a process has mapped, with how many mappings each."""
    out = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/dev/nvidia"):
                    path = parts[5].strip()
                    out[path] = out.get(path, 0) + 1
    except OSError as e:
        return {"error": str(e)}
    return out


def device_fds(pid):
    """/dev/nvidia* descriptors of a process, counted per node."""
    out = {}
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                out[target] = out.get(target, 0) + 1
    except OSError as e:
        return {"error": str(e)}
    return out


def finding(doc, kind, pid):
    return next((f for f in doc.get("findings", []) if f["kind"] == kind and f.get("pid") == pid), None)


def about(doc, pid):
    """Top-level findings whose subject is pid."""
    return [f for f in doc.get("findings", []) if f.get("pid") == pid]


def root_causes_about(doc, pids):
    """Top-level findings (root causes) that are not info and whose subject or
    named holders are among pids: what trace's summary counts, for this check's
    processes only."""
    def concerns(f):
        return f.get("pid") in pids or any(h.get("pid") in pids for h in f.get("holders", []))
    return sum(1 for f in doc.get("findings", []) if f.get("severity") != "info" and concerns(f))


def start_nvml_monitor():
    m = spawn([sys.executable, NVML_MONITOR_PATH])
    ready(m, timeout=60)
    return m


def start_prefork_server(handle, baseline, workers):
    p = spawn([sys.executable, PREFORK_SERVER_PATH, str(workers), str(WORKER_BYTES)])
    children = ready(p, timeout=120)["children"]
    wait_held(handle, baseline, WORKER_BYTES)
    return p, children


# The rule trace applies (findings::ContextEvidenceRule::mapped_nodes):
# "nvidia#" is the GPU's own node. Printed next to what was measured.
RULE_MAPPED_NODES = ["nvidia#", "nvidia-uvm"]


def rule_matches(mapped, minor=0):
    names = {os.path.basename(p) for p in mapped if not p.startswith("error")}
    wanted = {f"nvidia{minor}" if n == "nvidia#" else n for n in RULE_MAPPED_NODES}
    return sorted(names & wanted)


def check_context_evidence(handle, baseline):
    # What tells an NVML-only client from a context holder on this driver: the
    # /dev/nvidia* files each maps and holds. Printed in full: docs/contexts.md
    # says to set the rule from this.
    monitor = start_nvml_monitor()
    p, children = start_prefork_server(handle, baseline, 1)
    child = children[0]
    rows = {"nvml monitor": monitor.pid, "creator (alive)": p.pid, "forked child (creator alive)": child}
    seen = {}
    for label, pid in rows.items():
        seen[label] = (device_mappings(pid), device_fds(pid))
    kill(p)
    reap(p)  # the measured question: what the child keeps once its creator is gone
    seen["forked child (creator dead)"] = (device_mappings(child), device_fds(child))
    for label, (maps, fds) in seen.items():
        print(f"  evidence {label}: maps {json.dumps(maps, sort_keys=True)}; "
              f"fds {json.dumps(fds, sort_keys=True)} ({sum(v for v in fds.values() if isinstance(v, int))})",
              flush=True)
    matched = {label: rule_matches(maps) for label, (maps, _) in seen.items()}
    # The other candidate evidence: descriptors on the GPU's own node
    # (ContextEvidenceRule::min_gpu_node_fds).
    on_gpu = {label: fds.get("/dev/nvidia0", 0) for label, (_, fds) in seen.items()}
    holders_min = min(v for k, v in on_gpu.items() if k != "nvml monitor")
    print(f"  descriptors on /dev/nvidia0: {on_gpu}; min_gpu_node_fds in "
          f"({on_gpu['nvml monitor']}, {holders_min}] would separate them"
          if on_gpu["nvml monitor"] < holders_min else
          f"  descriptors on /dev/nvidia0: {on_gpu}; no count separates them", flush=True)
    kill(child)
    reap_pid(child)
    kill(monitor)
    reap(monitor)
    wait_release(handle, baseline)
    separates = (not matched["nvml monitor"] and all(matched[k] for k in matched if k != "nvml monitor"))
    record("context evidence: the mapping rule tells the NVML monitor from holders", separates,
           f"rule {RULE_MAPPED_NODES}: " + "; ".join(f"{k} matches {v}" for k, v in matched.items()))


def check_nvml_monitor_is_info(handle, baseline):
    monitor = start_nvml_monitor()
    w = spawn([WORKER, "hold", "--gpu", "cuda", "--device", "0", "--bytes", str(WORKER_BYTES)])
    ready(w)
    wait_held(handle, baseline, WORKER_BYTES)
    rc, doc, err = trace()
    f = finding(doc, "hidden_holder", monitor.pid)
    failing = [x for x in about(doc, monitor.pid) if x["severity"] != "info"]
    # Only this check's processes: the node may hold other findings (a zombie
    # of the machine's own), which would fail trace's exit code for nothing.
    ours = [x for p in (monitor.pid, w.pid) for x in about(doc, p) if x["severity"] != "info"]
    ok = f is not None and f["severity"] == "info" and not failing and not ours
    record("pynvml monitor next to a CUDA worker: info, trace exit 0", ok,
           f"monitor {monitor.pid} fds {sum(device_fds(monitor.pid).values())}: "
           f"{f and f['severity']} {f and f['message'][-60:]!r}; trace exit {rc}; "
           f"findings {[(x['kind'], x['severity']) for x in doc.get('findings', [])]}")
    for x in (w, monitor):
        kill(x)
        reap(x)
    wait_release(handle, baseline)


def check_prefork_server(handle, baseline):
    # A preforking PyTorch server: while the master lives its workers are a
    # latent orphaned context naming it; once it is SIGKILLed, one
    # orphaned_context names both workers, whose orphan / hidden_holder
    # findings are related to it instead of findings of their own.
    monitor = start_nvml_monitor()
    p, children = start_prefork_server(handle, baseline, 2)
    rc, doc, err = trace()
    latent = finding(doc, "latent_orphaned_context", p.pid)
    latent_holders = sorted(h["pid"] for h in (latent or {}).get("holders", []))
    latent_ok = latent is not None and latent["severity"] == "warning" and latent_holders == sorted(children)
    record("preforking PyTorch server, master alive: a latent orphaned context naming it", latent_ok,
           f"master {p.pid}, workers {children}: {latent and latent['kind']} {latent and latent['severity']}, "
           f"holders {latent_holders}, related {[(r['kind'], r['pid']) for r in (latent or {}).get('related', [])]}")
    kill(p)
    reap(p)
    still_held = nvml_used(handle) >= baseline + WORKER_BYTES // 2
    listed_dead = p.pid in nvml_pids(handle)
    rc, doc, err = trace()
    ctx = [f for f in doc.get("findings", []) if f["kind"] == "orphaned_context"]
    mine = finding(doc, "orphaned_context", p.pid)
    holders = sorted(h["pid"] for h in (mine or {}).get("holders", []))
    related = (mine or {}).get("related", [])
    related_ok = (bool(related) and {r["pid"] for r in related} == set(children)
                  and {r["kind"] for r in related} <= {"orphan", "hidden_holder"})
    own = [f for c in children for f in about(doc, c)]
    monitor_f = finding(doc, "hidden_holder", monitor.pid)
    ok = (still_held and listed_dead and len(ctx) == 1 and mine is not None and holders == sorted(children) and related_ok
          and not own and monitor_f is not None and monitor_f["severity"] == "info"
          and root_causes_about(doc, [p.pid, monitor.pid, *children]) == 1)
    record("preforking PyTorch server, master SIGKILLed: one orphaned_context naming both workers", ok,
           f"held after the master's death {still_held}, dead master listed {listed_dead}; orphaned contexts {len(ctx)}; holders {holders} "
           f"reasons {[h['reason'] for h in (mine or {}).get('holders', [])]}; "
           f"related {[(r['kind'], r['pid']) for r in related]}; workers' own findings {len(own)}; "
           f"monitor {monitor_f and monitor_f['severity']}; root causes about its processes "
           f"{root_causes_about(doc, [p.pid, monitor.pid, *children])}; summary findings {doc.get('summary', {}).get('findings')} "
           f"related {doc.get('summary', {}).get('related')}; exit {rc}")
    for c in children:
        kill(c)
    t = wait_release(handle, baseline)
    for c in children:
        reap_pid(c)
    kill(monitor)
    reap(monitor)
    print(f"  released {t and round(t, 3)} s after the workers' kill", flush=True)


def check_memory_matches(handle, baseline):
    cuda = spawn([WORKER, "hold", "--gpu", "cuda", "--device", "0", "--bytes", str(WORKER_BYTES)])
    ready(cuda)
    torch_p = spawn([sys.executable, TORCH_WORKER_PATH, "default", str(WORKER_BYTES)])
    ready(torch_p, timeout=120)
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    smi_mem = {int(a): int(b) * MIB for a, b in (l.split(",") for l in smi.strip().splitlines() if l)}
    rc, doc, err = trace()
    ok = True
    ev = []
    for name, p in (("cuda", cuda), ("torch", torch_p)):
        entry = proc_in(doc, p.pid)
        got = entry["gpu_memory"] if entry else None
        want = smi_mem.get(p.pid)
        same = got is not None and want is not None and abs(got - want) < MIB
        ok = ok and same and entry["listed"]
        ev.append(f"{name} pid {p.pid}: trace {got and got // MIB} MiB, nvidia-smi {want and want // MIB} MiB")
    # For the ghost-memory rule: does the listed processes' memory explain v2's used?
    used_v2 = nvml_used(handle)
    listed_sum = sum(nvml_pids(handle).values())
    ghosts = [f for f in doc.get("findings", []) if f["kind"] == "ghost_memory"]
    ev.append(f"device used {used_v2 // MIB} MiB vs listed sum {listed_sum // MIB} MiB "
              f"(baseline {baseline // MIB} MiB), ghost findings {len(ghosts)}")
    ok = ok and not ghosts
    record("per-process memory matches nvidia-smi", ok, "; ".join(ev))
    for p in (cuda, torch_p):
        t0 = time.monotonic()
        kill(p)
        reap(p)
    t = wait_release(handle, baseline)
    return t


def check_pid_namespace(handle, baseline):
    # --mount-proc: CUDA's cuInit fails with 304 (OPERATING_SYSTEM) in a PID
    # namespace that still sees the host's /proc (measured on driver 580).
    un = spawn(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", WORKER, "hold", "--gpu", "cuda",
                "--device", "0", "--bytes", str(WORKER_BYTES)])
    ready(un)
    host_pid = host_child_of(un.pid)
    rc, doc, err = trace()
    entry = proc_in(doc, host_pid) if host_pid else None
    ok = bool(entry) and entry["ns_pid"] == 1 and entry["listed"]
    record("PID-namespace worker shown with host and local PIDs", ok,
           f"host pid {host_pid}, ns_pid {entry and entry['ns_pid']}, listed {entry and entry['listed']}, "
           f"match {entry and entry['listings'] and entry['listings'][0]['pid_match']}")
    kill(un)
    reap(un)
    wait_release(handle, baseline)


def check_sigkill_release(handle, baseline):
    times = []
    for _ in range(3):
        w = spawn([WORKER, "hold", "--gpu", "cuda", "--device", "0", "--bytes", str(WORKER_BYTES)])
        ready(w)
        wait_held(handle, baseline, WORKER_BYTES)
        t0 = time.monotonic()
        kill(w)
        t = wait_release(handle, baseline)
        reap(w)
        gone = w.pid not in nvml_pids(handle)
        times.append((t, gone))
    ok = all(t is not None and g for t, g in times)
    record("SIGKILLed worker disappears, memory released", ok,
           "release s: " + ", ".join(f"{t:.3f}" if t is not None else "never" for t, _ in times))
    return [t for t, _ in times if t is not None]


def check_zombie(handle, baseline):
    # A parent that never reaps: the killed worker becomes its zombie.
    parent = spawn([sys.executable, "-c",
                    "import subprocess,sys,time,json\n"
                    f"c=subprocess.Popen([{WORKER!r},'hold','--gpu','cuda','--bytes','{WORKER_BYTES}'],stdout=subprocess.PIPE,text=True)\n"
                    "l=c.stdout.readline()\nprint(json.dumps({'child':c.pid}),flush=True)\n"
                    "time.sleep(3600)\n"])
    child = ready(parent)["child"]
    wait_held(handle, baseline, WORKER_BYTES)
    kill(child)
    t = wait_release(handle, baseline)
    with open(f"/proc/{child}/status") as f:
        state = next(l.split()[1] for l in f if l.startswith("State:"))
    listed = child in nvml_pids(handle)
    rc, doc, err = trace()
    zombie_finding = any(f["kind"] == "zombie" and child in f.get("pids", [f["pid"]])
                         for f in doc.get("findings", []))
    ok = state == "Z" and not listed and t is not None and zombie_finding
    record("a zombie holds nothing and is reported", ok,
           f"state {state}, listed by NVML {listed}, released in {t and round(t, 3)} s, zombie finding {zombie_finding}")
    kill(parent)
    reap(parent)


def start_forked_context(handle, baseline):
    """A CUDA worker that forked after cuInit (the child inherits its
    descriptors), once its memory is held: (worker Popen, child pid)."""
    p = spawn([WORKER, "fork-after-init", "--gpu", "cuda", "--device", "0", "--bytes", str(WORKER_BYTES)])
    child = ready(p)["child"]
    wait_held(handle, baseline, WORKER_BYTES)
    return p, child


def check_fork_orphaned_context(handle, baseline):
    p, child = start_forked_context(handle, baseline)
    kill(p)
    reap(p)
    time.sleep(2.0)  # the measured question: is it still held after the creator died?
    still = nvml_used(handle) >= baseline + WORKER_BYTES // 2
    listed_dead = p.pid in nvml_pids(handle)
    rc, doc, err = trace()
    ctx = [f for f in doc.get("findings", []) if f["kind"] == "orphaned_context" and f["pid"] == p.pid]
    named = bool(ctx) and any(h["pid"] == child for h in ctx[0].get("holders", []))
    t0 = time.monotonic()
    kill(child)
    t = wait_release(handle, baseline)
    reap_pid(child)
    ok = still and listed_dead and named and t is not None
    record("fork-inherited context: orphaned_context names the child", ok,
           f"held 2 s after creator's death {still}, dead pid listed {listed_dead}, finding names child {named}, "
           f"released {t and round(t, 3)} s after the child's death")


def check_zombie_creator_of_inherited_context(handle, baseline):
    # The creator dies but is not reaped (its parent, this script, waits with
    # WNOWAIT): does the driver keep listing the zombie's PID while the forked
    # child holds the context? Either way trace must point at the child:
    # listed -> orphaned_context (pid_match "stale", the zombie holds no
    # descriptor) naming it; not listed -> the child is a hidden_holder.
    p, child = start_forked_context(handle, baseline)
    kill(p)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, not reaped
    listed = p.pid in nvml_pids(handle)
    rc, doc, err = trace()
    stale = [d for d in doc.get("dead_listed", []) if d.get("pid") == p.pid]
    ctx = [f for f in doc.get("findings", []) if f["kind"] == "orphaned_context" and f["pid"] == p.pid]
    hidden = [f for f in doc.get("findings", []) if f["kind"] == "hidden_holder" and f["pid"] == child]
    named = bool(ctx) and any(h["pid"] == child for h in ctx[0].get("holders", []))
    if listed:
        ok = named and bool(stale) and stale[0].get("pid_match") == "stale"
        how = (f"pid_match {stale[0].get('pid_match') if stale else None}, finding names child {named}, "
               f"message {ctx[0]['message'][:90] if ctx else None!r}")
    else:
        ok = bool(hidden)
        how = f"child reported as hidden_holder {bool(hidden)}"
    t0 = time.monotonic()
    kill(child)
    t = wait_release(handle, baseline)
    t = t is not None and time.monotonic() - t0
    reap(p)
    reap_pid(child)
    record("zombie creator, fork-inherited context: trace points at the child", ok and t is not False,
           f"NVML lists the zombie's pid {listed}; {how}; released {t and round(t, 3)} s after the child's kill")


def check_fd_sources_agree(handle, baseline):
    # The BPF descriptor iterator and the /proc walk must see the same NVIDIA
    # descriptors (char devices 195:N, nvidia-uvm's dynamic major), also the
    # fork-inherited ones of a child whose creator still runs.
    p, child = start_forked_context(handle, baseline)
    runs = {}
    for source in ("bpf", "procfs"):
        t0 = time.monotonic()
        rc, doc, err = trace("--fd-source", source)
        runs[source] = (time.monotonic() - t0, doc, err)
    def devices(doc):
        return {q["pid"]: q["devices"] for q in doc.get("processes", [])}
    bpf_doc, procfs_doc = runs["bpf"][1], runs["procfs"][1]
    same = devices(bpf_doc) == devices(procfs_doc)
    both = all(devices(bpf_doc).get(pid) for pid in (p.pid, child))
    used = bpf_doc.get("scan", {}).get("fds_from")
    note = bpf_doc.get("scan", {}).get("fds_note", "") or runs["bpf"][2].strip()[-200:]
    kill(child)
    kill(p)
    reap(p)
    reap_pid(child)
    wait_release(handle, baseline)
    record("descriptors: BPF iterator == /proc walk on real NVIDIA fds", same and both and used == "bpf",
           f"fds_from {used} {note!r}; same devices per pid {same}; creator and child both seen {both}; "
           f"creator devices {devices(bpf_doc).get(p.pid)}; trace wall bpf {runs['bpf'][0]:.3f} s, "
           f"procfs {runs['procfs'][0]:.3f} s")


def check_no_ghost_when_idle(handle):
    rc, doc, err = trace()
    ghosts = [f for f in doc.get("findings", []) if f["kind"] == "ghost_memory"]
    dev = doc["gpu"]["devices"][0]
    record("idle GPU with reserved memory: no ghost_memory", not ghosts,
           f"used {dev['memory']['used'] // MIB} MiB, reserved {dev['memory']['reserved'] // MIB} MiB, ghosts {len(ghosts)}")


def check_observe_in_namespace(handle, baseline):
    if subprocess.run([GPUREAP, "observe", "--help"], capture_output=True).returncode != 0:
        record("observe in a PID namespace: no false orphaned context", False, "observe not built")
        return
    cmd = (f"{WORKER} hold --gpu cuda --bytes {WORKER_BYTES} > /tmp/obs_ready & "
           "while ! grep -q pid /tmp/obs_ready 2>/dev/null; do sleep 0.05; done; "
           f"{sys.executable} {TORCH_WORKER_PATH} default 1073741824 > /tmp/obs_ready2 & "
           "while ! grep -q pid /tmp/obs_ready2 2>/dev/null; do sleep 0.05; done; "
           f"{GPUREAP} observe --gpu nvml --json; echo rc=$?; kill -9 %1 %2")
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", cmd],
                       capture_output=True, text=True, timeout=180)
    out = r.stdout
    body = out[:out.rfind("rc=")]
    try:
        doc = json.loads(body)
    except ValueError:
        record("observe in a PID namespace: no false orphaned context", False, f"no JSON: {out[-300:]} {r.stderr[-300:]}")
        return
    listed = doc.get("listed", [])
    statuses = sorted({x.get("status") for x in listed})
    dead = [x for x in listed if x.get("status") == "dead"]
    record("observe in a PID namespace: no false orphaned context", bool(listed) and not dead,
           f"listed statuses {statuses}, pids {[x.get('pid') for x in listed]}")
    wait_release(handle, baseline)


def term_to_release(handle, baseline, init_argv, label, cap):
    un = spawn(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *init_argv, "--", WORKER, "hold",
                "--gpu", "cuda", "--bytes", str(WORKER_BYTES), "--ignore-term"])
    ready(un)
    wait_held(handle, baseline, WORKER_BYTES)
    init_pid = host_child_of(un.pid)
    t0 = time.monotonic()
    kill(init_pid, signal.SIGTERM)
    t = wait_release(handle, baseline, cap=cap)
    if t is None:
        kill(un)
        reap(un)
        wait_release(handle, baseline)
    else:
        reap(un)
    return t


def check_init_gpu_grace(handle, baseline):
    tini = term_to_release(handle, baseline, [TINI], "tini", cap=10.0)
    ours = term_to_release(handle, baseline,
                           [INIT, "--gpu-grace", "2", "--grace", "20"], "gpureap-init", cap=10.0)
    ok = tini is None and ours is not None and 2.0 <= ours <= 3.0
    record("SIGTERM to release, TERM-ignoring 2.5 GiB worker as PID 1's child", ok,
           f"tini: {'never (until KILL; cap 10 s)' if tini is None else f'{tini:.3f} s'}; "
           f"gpureap-init --gpu-grace 2: {ours and round(ours, 3)} s")
    return tini, ours


RANK_WORKER_PATH = "/tmp/gpureap_rank_worker.py"
RANK_WORKER = r"""
import os, sys, time, json, torch
x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print(json.dumps({"pid": os.getpid(), "rank": int(os.environ["RANK"])}), flush=True)
while True: time.sleep(3600)
"""
RANK_BYTES = 512 * MIB


def check_nccl_missing_rank_one_gpu(handle, baseline):
    # Issue 6's detection on real NVIDIA hardware. NCCL refuses two ranks on one
    # GPU ("Duplicate GPU detected"), so these are stand-in ranks: PyTorch
    # processes with a job's torch.distributed environment holding real CUDA
    # memory, no collectives. Two jobs of three ranks each, one with error
    # handling off (hangs), one with it on (watchdog); rank 0 of each is killed.
    jobs = {"hang": "0", "watchdog": "1"}
    ranks = {}
    for verdict, aeh in jobs.items():
        run_id = f"onegpu-{verdict}-{os.getpid()}"
        for r in range(3):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="3", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="3",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + len(ranks)),
                       TORCHELASTIC_RUN_ID=run_id, TORCH_NCCL_ASYNC_ERROR_HANDLING=aeh)
            for k in ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT", "NCCL_ASYNC_ERROR_HANDLING"):
                env.pop(k, None)
            p = spawn([sys.executable, RANK_WORKER_PATH, str(RANK_BYTES)], env=env)
            ranks[(verdict, r)] = (p, run_id)
    for p, _ in ranks.values():
        ready(p, timeout=120)
    wait_held(handle, baseline, 6 * RANK_BYTES)
    for verdict in jobs:
        p, _ = ranks[(verdict, 0)]
        kill(p)
        reap(p)
    listed = nvml_pids(handle)
    rc, doc, err = trace()
    rows = []
    ok = rc == 1
    for verdict in jobs:
        run_id = ranks[(verdict, 0)][1]
        survivors = sorted(ranks[(verdict, r)][0].pid for r in (1, 2))
        nvml_mem = sum(listed.get(pid, 0) for pid in survivors)
        found = [f for f in doc.get("findings", []) if f["kind"] == "nccl_missing_rank"
                 and (f.get("group") or {}).get("run_id") == run_id]
        g = found[0]["group"] if found else {}
        got = sorted(s.get("pid") for s in g.get("survivors", []))
        good = (len(found) == 1 and g.get("missing_local_ranks") == [0] and got == survivors
                and g.get("survivor_memory") == nvml_mem and g.get("watchdog") == verdict)
        ok = ok and good
        rows.append(f"{verdict}: reported {len(found)}, missing {g.get('missing_local_ranks')}, "
                    f"survivors {got == survivors}, memory {g.get('survivor_memory', 0) // MIB} MiB "
                    f"(NVML {nvml_mem // MIB} MiB), watchdog {g.get('watchdog')!r}")
    for p, _ in ranks.values():
        kill(p)
        reap(p)
    wait_release(handle, baseline)
    record("nccl_missing_rank on one GPU (stand-in ranks, no NCCL)", ok, f"trace exit {rc}; " + "; ".join(rows))


def check_prestop(handle, baseline):
    if subprocess.run([GPUREAP, "prestop", "--help"], capture_output=True).returncode != 0:
        record("prestop in a PID namespace with real CUDA workers", False, "prestop not built")
        return
    rows = []
    ok = True
    for mode, expect_kill in (("--ignore-term", True), ("--term-cleanup", False)):
        cmd = (f"{WORKER} hold --gpu cuda --bytes {WORKER_BYTES} {mode} > /tmp/ps_ready & "
               "while ! grep -q pid /tmp/ps_ready 2>/dev/null; do sleep 0.05; done; "
               f"{GPUREAP} prestop --gpu nvml --deadline 6 --term-wait 3 --json > /tmp/ps.json; "
               "echo rc=$?; echo '--- json'; cat /tmp/ps.json")
        # prestop also logs to PID 1's stdout (bash's, here: this pipe), as in a
        # pod where `kubectl logs` shows it; the JSON went to its own file.
        r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", cmd],
                           capture_output=True, text=True, timeout=120)
        print(r.stdout[:r.stdout.find("--- json")], flush=True)
        body = r.stdout[r.stdout.find("--- json") + len("--- json"):]
        try:
            doc = json.loads(body)
        except ValueError:
            ok = False
            rows.append(f"{mode}: no JSON ({r.stdout[-200:]} {r.stderr[-300:]})")
            continue
        targets = doc.get("targets", [])
        killed = any(t.get("kill_sent") for t in targets)
        ok = ok and bool(targets) and killed == expect_kill
        rows.append(f"{mode}: " + "; ".join(
            f"pid {t.get('pid')} {t.get('outcome')} kill={t.get('kill_sent')} "
            f"exit {t.get('term_to_exit_s')} s release {t.get('term_to_release_s')} s "
            f"driver_pids {t.get('driver_pids')}" for t in targets))
        wait_release(handle, baseline)
    record("prestop in a PID namespace with real CUDA workers", ok, " | ".join(rows))


def main():
    # A subreaper: workers orphaned by the checks (a killed creator's child)
    # come back to this script, which kills and reaps them by pid.
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    with open(TORCH_WORKER_PATH, "w") as f:
        f.write(TORCH_WORKER)
    with open(RANK_WORKER_PATH, "w") as f:
        f.write(RANK_WORKER)
    with open(NVML_MONITOR_PATH, "w") as f:
        f.write(NVML_MONITOR)
    with open(PREFORK_SERVER_PATH, "w") as f:
        f.write(PREFORK_SERVER)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    driver = pynvml.nvmlSystemGetDriverVersion()
    name = pynvml.nvmlDeviceGetName(handle)
    print(f"driver {driver}, {name}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, kernel {os.uname().release}",
          flush=True)
    baseline = nvml_used(handle)
    print(f"baseline used (v2): {baseline // MIB} MiB", flush=True)
    release_times = []
    checks = [
        ("idle GPU: no ghost_memory", lambda: check_no_ghost_when_idle(handle)),
        ("memory matches", lambda: check_memory_matches(handle, baseline)),
        ("PID namespace", lambda: check_pid_namespace(handle, baseline)),
        ("SIGKILL release", lambda: release_times.extend(check_sigkill_release(handle, baseline))),
        ("zombie", lambda: check_zombie(handle, baseline)),
        ("fork-inherited context", lambda: check_fork_orphaned_context(handle, baseline)),
        ("zombie creator", lambda: check_zombie_creator_of_inherited_context(handle, baseline)),
        ("fd sources agree", lambda: check_fd_sources_agree(handle, baseline)),
        ("observe in a PID namespace", lambda: check_observe_in_namespace(handle, baseline)),
        ("init --gpu-grace", lambda: check_init_gpu_grace(handle, baseline)),
        ("prestop", lambda: check_prestop(handle, baseline)),
        ("nccl_missing_rank on one GPU", lambda: check_nccl_missing_rank_one_gpu(handle, baseline)),
        ("context evidence", lambda: check_context_evidence(handle, baseline)),
        ("pynvml monitor is info", lambda: check_nvml_monitor_is_info(handle, baseline)),
        ("preforking PyTorch server", lambda: check_prefork_server(handle, baseline)),
    ]
    try:
        for check_name, c in checks:
            reap_exited()
            try:
                c()
            except Exception as e:  # one broken check must not hide the others
                traceback.print_exc()
                record(check_name, False, f"error: {e}")
    finally:
        for p in started:
            kill(p)
            reap(p)
        while True:  # orphans reparented to this subreaper
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
    print()
    print(f"| check | verdict | evidence |  (driver {driver}, {name}, {time.strftime('%Y-%m-%d')})")
    print("|---|---|---|")
    for check, verdict, ev in results:
        print(f"| {check} | {verdict} | {ev} |")
    return 0 if all(v == "PASS" for _, v, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
