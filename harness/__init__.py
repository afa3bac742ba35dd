"""Evaluation harness for custom GPU kernels (KernelBench format).

Its parts, one folder each, bottom to top (each imports only those before it; docs/architecture.md):
core (the shared vocabulary), isolate (the sandbox and the only ways out of it), verdict (what
decides ok or not), compile (builds), record (results read back), run (lanes, pairs, workers),
cli (the gate). Data path (one direction): run_eval.py -> run/runner -> run/lane -> run/pair ->
run/worker (sandboxed, isolate/) -> verdict/judge -> core/store -> record/leaderboard. Only the
worker process (harness/run/worker.py; harness/run/importing.py) imports solution code.
"""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
