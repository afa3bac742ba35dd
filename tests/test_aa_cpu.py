"""A/A on the CPU: the problem's own Model timed as the solution against itself as the reference
(`--solution reference`), two worker processes of one kind, so the truth is 1.00x.

Measured on a 2-core VM (docs/harness-perf.md "A/A on the CPU: the memory a process holds"):
the memory a worker process was given can make it 5-25% slower or faster than another for the
whole run, the same code on the same CPU. With the timed inputs in new memory for each block
(timing.move_inputs, auto = on the CPU), 35 of 40 runs' intervals held 1.0 (without: 21 of 29);
what is left is offsets of another kind, in some hours of the machine more than others (one
batch: 3 of 6 missed, 0.82x-1.20x). So a run fails this test when its interval misses 1.0 or
its point lies beyond +-15%, and the test fails only when three runs in a row do (about one run
in eight measured, 0.2% for three; in that worst batch's hour, one in eight for three; a
harness that times the two sides differently fails every one)."""
import json
import subprocess
import sys

from harness import REPO_ROOT


def aa_run(results_dir, run_id: str) -> dict:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "run_eval.py"), "--problem", "elementwise_add",
                           "--solution", "reference", "--device", "cpu", "--results-dir", str(results_dir),
                           "--run-id", run_id], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = [p for p in (results_dir / run_id).glob("*.json") if p.name != "run.json"]
    assert len(files) == 1, proc.stdout
    return json.loads(files[0].read_text())


def test_the_reference_against_itself_on_the_cpu_is_one_within_its_interval(tmp_path):
    tries = []
    for attempt in range(3):
        result = aa_run(tmp_path, f"aa{attempt}")
        assert result["status"] == "ok", result["message"]
        timing = result["timing"]
        low, high = timing["speedup_ci"]
        tries.append(f"{timing['speedup']:.3f}x [{low:.3f}, {high:.3f}]")
        assert result["config"]["timing"]["move_inputs"] == "auto"
        if low <= 1.0 <= high and abs(timing["speedup"] - 1.0) <= 0.15:
            return
    raise AssertionError(f"A/A on the CPU: three runs' intervals miss 1.0 or lie beyond +-15%: {tries}")
