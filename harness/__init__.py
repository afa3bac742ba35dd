"""Evaluation harness for custom GPU kernels (KernelBench format).

Data path (one direction): run_eval.py -> runner -> isolation -> worker/judge
-> store -> leaderboard.  Only harness/worker.py imports solution code.
"""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
