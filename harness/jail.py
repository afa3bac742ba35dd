"""python -m harness.jail MODULE ARGS...: enter the sandbox described by $KB_SANDBOX_POLICY
(harness/sandbox.py), then run MODULE as __main__ in this same process.

It imports nothing but the standard library and harness/sandbox.py before the sandbox is in
place: Landlock binds the calling thread and the threads it starts afterwards, so it must come
while the process has one thread (torch's import starts more). What is active goes to the module
in $KB_SANDBOX_REPORT (the worker puts it in its first event)."""
from __future__ import annotations

import json
import os
import runpy
import sys

from harness import sandbox


def main() -> None:
    policy = json.loads(os.environ.pop("KB_SANDBOX_POLICY", "null") or "null")
    try:
        report = sandbox.enter(policy)
    except sandbox.SandboxError as exc:
        print(f"harness.jail: {exc}", file=sys.stderr, flush=True)
        os._exit(70)
    os.environ["KB_SANDBOX_REPORT"] = json.dumps(report)
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
