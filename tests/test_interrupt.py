"""A run stopped by SIGTERM (a timeout, a scheduler) or Ctrl-C ends within seconds with exit 130:
the build steps in flight and the lanes are killed, nothing is recorded of the pairs it cut short,
and no step is left running. Seen on the H200 host: `timeout 545 run_eval.py batch` went on
judging and building for over a minute after its SIGTERM, until the caller's own limit killed it."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.core.store import load_run
from conftest import FIXTURES

CPP_ADD = REPO_ROOT / "solutions" / "examples" / "elementwise_add" / "cpp_add.py"


# a run on CUDA halts the same way (marked gpu: the GPU smoke runs them)
DEVICES = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])


def start(args: list[str], tmp_path: Path, stdin: str | None = None, device: str = "cpu") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "run_eval.py", *args, "--device", device,
                             "--config", str(FIXTURES / "configs" / "fast.yaml"),
                             "--results-dir", str(tmp_path / "results"), "--run-id", "stopped"],
                            cwd=REPO_ROOT, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_for(proc: subprocess.Popen, needle: str, stream: str = "stderr", limit_s: float = 300) -> list[str]:
    seen, end = [], time.monotonic() + limit_s
    while time.monotonic() < end:
        line = getattr(proc, stream).readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    proc.kill()
    raise AssertionError(f"never printed {needle!r}: {''.join(seen)[-3000:]}")


def stopped_within(proc: subprocess.Popen, limit_s: float) -> tuple[float, str, str]:
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=limit_s + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running {limit_s + 60:.0f} s after SIGTERM") from None
    return time.monotonic() - sent, out, err


def left_running(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout.splitlines()
    return [line for line in found if "pgrep" not in line]


@DEVICES
def test_a_batch_stopped_while_it_builds_ends_at_once_and_kills_its_build(tmp_path, device):
    marker = f"kb_stop_{uuid.uuid4().hex[:12]}"   # a recipe no cache holds: it must be built
    text = CPP_ADD.read_text().replace('name="elementwise_add_cpp"', f'name="{marker}"')
    assert marker in text
    proc = start(["batch", "-"], tmp_path, stdin="", device=device)
    proc.stdin.write(json.dumps({"problem": "elementwise_add", "source": text, "tag": 1}) + "\n")
    proc.stdin.close()
    proc.stdin = None   # (communicate would flush it)
    wait_for(proc, "to build")
    deadline = time.monotonic() + 120
    while not left_running(marker) and time.monotonic() < deadline:   # its compile has begun
        time.sleep(0.5)
    assert left_running(marker), "the build never started"
    took, out, err = stopped_within(proc, 30)
    assert proc.returncode == 130, err[-3000:]
    assert took < 30, (took, err[-3000:])
    assert f"interrupted: the rest: python run_eval.py batch - --device {device} --config" in err and "--resume --run-id stopped" in err
    assert out.strip() == ""                                   # no verdict: the pair was cut short
    assert load_run(tmp_path / "results" / "stopped") == []    # nothing recorded of it
    time.sleep(1)
    assert left_running(marker) == []                           # no compile left behind


@DEVICES
def test_the_main_command_stopped_while_a_lane_judges_ends_at_once(tmp_path, device):
    slow = tmp_path / "slow_construct.py"
    slow.write_text("import time\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                    "    def __init__(self):\n        super().__init__()\n        time.sleep(120)\n\n"
                    "    def forward(self, a, b):\n        return a + b\n")
    proc = start(["--problem", "elementwise_add", "--solution", str(slow)], tmp_path, device=device)
    wait_for(proc, "lane(s)", "stdout")      # the main command's progress is on its standard output
    time.sleep(8)   # the lane's worker is constructing ModelNew (fast.yaml: run_s 25)
    took, out, err = stopped_within(proc, 15)
    assert proc.returncode == 130, err[-3000:]
    assert took < 15, (took, err[-3000:])
    assert "interrupted: 0 of 1 pair(s) recorded" in out + err
    assert load_run(tmp_path / "results" / "stopped") == []


def test_a_batch_whose_stop_is_set_from_another_thread_raises_run_stopped_at_once(tmp_path):
    import threading
    from harness.cli.batch import judge_batch
    from harness.core.config import load_config, with_overrides
    from harness.run.runner import RunStopped
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"), {"results_dir": str(tmp_path / "results")})
    text = ("import time\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        time.sleep(120)\n\n    def forward(self, a, b):\n        return a + b\n")
    stop = threading.Event()
    timer = threading.Timer(10, stop.set)    # the lane's worker is constructing ModelNew by then
    timer.start()
    start = time.monotonic()
    with pytest.raises(RunStopped):
        list(judge_batch([{"problem": "elementwise_add", "source": text}], cfg, run_id="stopped", stop=stop))
    timer.cancel()
    assert time.monotonic() - start < 25
    assert load_run(tmp_path / "results" / "stopped") == []
    # the stop ended with its run: this process's later steps start (CI: test_isolation after this)
    from harness.isolate.isolation import run_module
    outcome = run_module("tests.fixtures.child", {"action": "exit3"}, tmp_path / "after", limit_s=60)
    assert outcome.returncode == 3, outcome.log_tail
