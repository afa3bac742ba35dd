"""Child of tools/cuda_sandbox_probe.py, run inside a sandbox variant (harness.isolate.jail): starts
CUDA, uses it from a thread made later, tries the writes a root process must not make, forks
until the process limit stops it, and exports a CUDA tensor by IPC for the parent to read."""
import errno
import json
import os
import sys
import threading
import time

res = {"uid": os.getuid(), "gid": os.getgid(), "report": json.loads(os.environ.get("KB_SANDBOX_REPORT") or "{}")}
try:
    res["uid_map"] = open("/proc/self/uid_map").read().split()
    res["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")]
except OSError as e:
    res["uid_map"] = str(e)


def attempt(name, fn):
    try:
        res[name] = fn()
    except BaseException as e:  # noqa
        res[name] = f"ERR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def try_open(path, data=None):
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as e:
        return f"refused {errno.errorcode.get(e.errno, e.errno)}"
    try:
        if data is not None:
            os.write(fd, data)
        return "WRITABLE"
    except OSError as e:
        return f"open ok, write refused {errno.errorcode.get(e.errno, e.errno)}"
    finally:
        os.close(fd)


t0 = time.time()
import torch  # noqa: E402
res["import_s"] = round(time.time() - t0, 2)
attempt("cuda", lambda: float(torch.ones(4, device="cuda").sum().item()))
res["threads_after_init"] = len(os.listdir("/proc/self/task"))


def later():
    out = {}
    try:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            a = torch.randn(512, 512, device="cuda")
            out["sum"] = float((a @ a).abs().sum().item())
        out["comm"] = try_open(f"/proc/self/task/{threading.get_native_id()}/comm", b"later")
    except BaseException as e:  # noqa
        out["err"] = f"{type(e).__name__}: {e}"
    res["thread_later"] = out


if not str(res["cuda"]).startswith("ERR"):
    th = threading.Thread(target=later)
    th.start()
    th.join()
res["core_pattern"] = try_open("/proc/sys/kernel/core_pattern")        # opened, never written
res["sysrq_trigger"] = try_open("/proc/sysrq-trigger")                  # opened, never written
res["oom_score_adj_lower"] = try_open("/proc/self/oom_score_adj", b"-500")
res["own_comm"] = try_open(f"/proc/self/task/{threading.get_native_id()}/comm", b"probe")
res["init_comm"] = try_open("/proc/1/comm")                             # opened, never written
res["other_task_dir"] = try_open(f"/proc/{os.getppid()}/task/{os.getppid()}/comm")
res["net"] = [l.split(":")[0].strip() for l in open("/proc/self/net/dev").read().splitlines()[2:]]
pids = []
for i in range(400):
    try:
        pid = os.fork()
    except OSError as e:
        res["fork_refused_after"] = i
        res["fork_errno"] = errno.errorcode.get(e.errno, e.errno)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    pids.append(pid)
else:
    res["fork_refused_after"] = None
for p in pids:
    os.kill(p, 9)
    os.waitpid(p, 0)
if not str(res["cuda"]).startswith("ERR"):
    from harness.isolate.handoff import export
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32) * 3
    torch.cuda.synchronize()
    payload = []
    attempt("ipc_meta", lambda: export(x, payload))
print("RESULT " + json.dumps(res), flush=True)
sys.stdin.readline()
