"""Which sandbox variants start CUDA and hand a tensor to a root process by CUDA IPC, and what a
sandboxed process can still write under /proc, fork or reach (a diagnosis for issue 44, run on a
GPU machine; its table is in docs/evaluation.md):

    python tools/cuda_sandbox_probe.py [--preload /tmp/openlog.so]

Each variant starts tools/probe/cuda_probe_child.py through harness.isolate.jail as sandbox.launch starts
a worker (the policy, the cover, the scratch given to the identity), with its own prefix and
identity. --preload: tools/probe/openlog.c built as a shared library (gcc -shared -fPIC -o
/tmp/openlog.so tools/probe/openlog.c -ldl), which logs every open of a /proc path for writing."""
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness import sandbox  # noqa: E402
from harness.core.config import load_config, with_overrides  # noqa: E402
from harness.isolate.isolation import child_env  # noqa: E402

UNSHARE = shutil.which("unshare")


def variants(uid: int) -> dict:
    net_as = [UNSHARE, "--net", "--setgid", str(uid), "--setuid", str(uid), "--"]
    userns = [UNSHARE, "--user", "--map-current-user", "--net", "--"]
    return {
        "as the harness starts a worker (uid of its own, net ns, Landlock)": dict(prefix=net_as, uid=uid),
        "root, net ns, Landlock (limits.user: same)": dict(prefix=[UNSHARE, "--net", "--"], uid=None),
        "uid of its own in a user+net ns (a harness not running as root)": dict(prefix=userns, uid=uid, popen=True),
        "uid of its own, net ns, no Landlock": dict(prefix=net_as, uid=uid, landlock=False),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", default="")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import torch

    from harness.isolate.handoff import Imports
    torch.ones(1, device="cuda")
    base = sandbox.work_folder("kb-probe-")
    cfg = with_overrides(load_config(None), {"limits.processes": 160})
    plan = sandbox.Plan("auto", dict(vars(cfg.limits)), "same").to_dict()
    summary = {}
    for name, v in variants(sandbox.next_uid()).items():
        if args.only and args.only not in name:
            continue
        pol = sandbox.policy(plan, "cuda", scratch=base / f"s{len(summary)}", hidden=[base / "hidden"])
        pol.update(uid=v["uid"], gid=v["uid"], landlock=v.get("landlock", True))
        start = sandbox.launch(pol)
        env = child_env({"PYTHONPATH": f"{ROOT}:{ROOT}/tools/probe"})
        env.update(start.env)
        policy = json.loads(env["KB_SANDBOX_POLICY"])
        policy["applied"] = ["network namespace"]
        env["KB_SANDBOX_POLICY"] = json.dumps(policy)
        env["PYTHONPATH"] = f"{ROOT}:{ROOT}/tools/probe"
        if args.preload:
            env["LD_PRELOAD"] = args.preload
        extra = {"user": v["uid"], "group": v["uid"], "extra_groups": []} if v.get("popen") else {}
        proc = subprocess.Popen([*v["prefix"], sys.executable, "-m", "harness.isolate.jail", "cuda_probe_child"],
                                cwd=pol["scratch"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **extra)
        res, line = None, proc.stdout.readline()
        while line:
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
                break
            line = proc.stdout.readline()
        if res and isinstance(res.get("ipc_meta"), dict):
            try:
                with Imports("cuda") as imp:
                    t = imp.tensor(res["ipc_meta"], b"")
                    ok = bool(torch.equal(t, torch.arange(1 << 20, device="cuda", dtype=torch.float32) * 3))
                res["ipc_open_by_root"] = "ok, values equal" if ok else "values DIFFER"
            except Exception as e:  # noqa: BLE001
                res["ipc_open_by_root"] = f"ERR {e}"
            res.pop("ipc_meta")
        try:
            _, err = proc.communicate("done\n", timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        opens = sorted({line for line in err.splitlines() if line.startswith("[openlog]")})
        summary[name] = res or {"exit": proc.returncode, "stderr": err.splitlines()[-5:]}
        summary[name]["proc_writes"] = opens
        print(f"=== {name} (exit {proc.returncode})")
        for key, value in summary[name].items():
            if key not in ("report", "proc_writes"):
                print(f"    {key}: {value}")
        for line in opens:
            print("   ", line)
    shutil.rmtree(base, ignore_errors=True)
    Path(os.environ.get("OUT", "/tmp"), "cuda_sandbox_probe.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
