"""A/A on the CPU: the problem's own Model timed as the solution against itself as the reference
(`--solution reference`), two worker processes of one kind, so the truth is 1.00x.

Measured on a 2-core VM (docs/harness-perf.md "A/A on the CPU: the memory a process holds"
and "... and its samples"): the memory a worker process was given can make it 5-25% slower or
faster than another for the whole run; with the timed inputs in new memory for each block
(timing.move_inputs, auto = on the CPU) 35 of 40 default runs' intervals held 1.0, but only about
half of their points lay within 3%: ten rounds of at most 100 calls of a 0.4 ms add are too few
for a machine that moves by several percent from one block to the next. With 1000 calls in 30
rounds (`timing.max_samples=1000`, `timing.rounds=30`, 18 s a run), 18 of 20 runs' intervals
held 1.0 and 17 of 20 points lay within 3% (0.974x-1.033x); 15 of 20 did both. So this test asks
what issue 46 asks, the interval holding 1.0 and the point within 3%, of one of four such runs:
four failing in a row come to about 0.4% as measured (a harness that times the two sides
differently fails every one)."""
import json
import subprocess
import sys

from harness import REPO_ROOT


def aa_run(results_dir, run_id: str) -> dict:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "run_eval.py"), "--problem", "elementwise_add",
                           "--solution", "reference", "--device", "cpu", "--results-dir", str(results_dir),
                           "--run-id", run_id, "--set", "timing.max_samples=1000", "--set", "timing.rounds=30"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = [p for p in (results_dir / run_id).glob("*.json") if p.name != "run.json"]
    assert len(files) == 1, proc.stdout
    return json.loads(files[0].read_text())


def test_the_reference_against_itself_on_the_cpu_is_one_within_its_interval(tmp_path):
    tries = []
    for attempt in range(4):
        result = aa_run(tmp_path, f"aa{attempt}")
        assert result["status"] == "ok", result["message"]
        timing = result["timing"]
        low, high = timing["speedup_ci"]
        tries.append(f"{timing['speedup']:.3f}x [{low:.3f}, {high:.3f}]")
        assert result["config"]["timing"]["move_inputs"] == "auto"
        if low <= 1.0 <= high and abs(timing["speedup"] - 1.0) <= 0.03:
            return
    raise AssertionError(f"A/A on the CPU: four runs' intervals miss 1.0 or lie beyond +-3%: {tries}")
