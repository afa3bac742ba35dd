"""run_eval.py end to end: exit codes, bad input messages, the table, report and resume."""
import json
import os
import subprocess
import sys

from harness import REPO_ROOT
from conftest import FIXTURES, FIXTURE_SOLUTIONS

FAST = str(FIXTURES / "configs" / "fast.yaml")


def cli(*args, tmp_path):
    """The exit code, stdout and stderr of run_eval.py; what it prints fits 120 columns (unless
    --wide), and a message wrapped to fit is joined again here (its lines continue two columns in)."""
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "run_eval.py"), *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env, timeout=900)
    if "--wide" not in args and not any(f in args for f in ("md", "csv", "json", "html")):  # formats stay whole
        assert max(map(len, proc.stdout.splitlines()), default=0) <= 120, proc.stdout
    return proc.returncode, proc.stdout.replace("\n  ", " "), proc.stderr


def test_examples_family_on_cpu_exit_0_with_table(tmp_path):
    rc, out, err = cli("--problem", "elementwise_add", "--config", FAST, "--results-dir", str(tmp_path),
                       "--run-id", "r1", tmp_path=tmp_path)
    assert rc == 0, out + err
    header = next(line for line in out.splitlines() if line.startswith("problem"))
    for column in ("solution", "status", "err", "ms", "base ms", "speedup"):
        assert column in header
    assert "cpp_add" in out and "skipped" in out  # cuda_add: needs a CUDA device
    assert json.loads((tmp_path / "r1" / "elementwise_add__cpp_add.json").read_text())["status"] == "ok"
    # report re-renders the stored run without running anything
    rc, out, _ = cli("report", str(tmp_path / "r1"), "--format", "md", tmp_path=tmp_path)
    assert rc == 0 and "| elementwise_add" in out and "| ok" in out
    # resume: nothing left to run
    rc, out, err = cli("--problem", "elementwise_add", "--config", FAST, "--results-dir", str(tmp_path),
                       "--run-id", "r1", "--resume", tmp_path=tmp_path)
    assert rc == 0 and "2 pair(s) already recorded, 0 to run" in out


def test_failing_pair_exits_1(tmp_path):
    rc, out, _ = cli("--problem", "elementwise_add", "--solution", str(FIXTURE_SOLUTIONS / "import_raises.py"),
                     "--config", FAST, "--results-dir", str(tmp_path), tmp_path=tmp_path)
    assert rc == 1 and "load_error" in out


def _bad(tmp_path, *args):
    rc, out, err = cli(*args, "--results-dir", str(tmp_path), tmp_path=tmp_path)
    assert rc == 2, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not any(tmp_path.iterdir())  # nothing recorded
    return lines[0]


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    line = _bad(tmp_path, "--problem", str(FIXTURES / "problems" / "no_get_inputs.py"),
                "--solution", str(FIXTURE_SOLUTIONS / "cpp_ok.py"))
    assert "no_get_inputs.py" in line and "get_inputs" in line
    line = _bad(tmp_path, "--problem", "elementwise_add", "--solution", str(FIXTURE_SOLUTIONS / "no_modelnew.py"))
    assert "no_modelnew.py" in line and "ModelNew" in line
    line = _bad(tmp_path, "--problem", "elementwise_add", "--config", str(FIXTURES / "configs" / "unknown_key.yaml"))
    assert "unknown_key.yaml" in line and "correctness.tolerence" in line
    line = _bad(tmp_path, "--problem", "does_not_exist")
    assert "--problem" in line and "does_not_exist" in line
    line = _bad(tmp_path, "--problem", "elementwise_add", "--set", "timing.bogus=1")
    assert "timing.bogus" in line


def test_unknown_flag_value_is_usage_error(tmp_path):
    rc, _, err = cli("--device", "tpu", tmp_path=tmp_path)
    assert rc == 2 and "invalid choice" in err


def without(module, tmp_path, *args):
    """run_eval.py as if `module` were not installed (import fails, importlib.util.find_spec says None)."""
    blocker = tmp_path / "block"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    return subprocess.run([sys.executable, str(REPO_ROOT / "run_eval.py"), *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=600, env={**os.environ, "PYTHONPATH": str(blocker)})


def test_the_cpu_example_needs_no_numpy(tmp_path):
    # matplotlib (the leaderboard's plot) brings numpy along; the harness itself must not need it
    proc = without("numpy", tmp_path, "--problem", "elementwise_add", "--solution", "cpp_add", "--config", FAST,
                   "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " ok " in proc.stdout


def test_cluster_ray_without_ray_is_one_line_naming_what_to_install(tmp_path):
    proc = without("ray", tmp_path, "--problem", "elementwise_add", "--cluster", "ray",
                   "--results-dir", str(tmp_path / "r"))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "pip install -r requirements-ray.txt" in lines[0]
    assert not (tmp_path / "r").exists()


def test_an_unknown_cluster_is_one_line(tmp_path):
    rc, _, err = cli("--problem", "elementwise_add", "--cluster", "slurm", "--results-dir", str(tmp_path / "r"),
                     tmp_path=tmp_path)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "--cluster" in lines[0] and "'slurm'" in lines[0], err
    assert not (tmp_path / "r").exists()


def test_an_unknown_precision_is_one_line(tmp_path):
    rc, _, err = cli("--problem", "elementwise_add", "--precision", "fp8", "--results-dir", str(tmp_path / "r"),
                     tmp_path=tmp_path)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "--precision" in lines[0] and "fp32, fp16, bf16" in lines[0], err
    assert not (tmp_path / "r").exists()


def test_a_max_regression_outside_0_and_1_is_one_line(tmp_path):
    rc, _, err = cli("check", "--problem", "elementwise_add", "--max-regression", "5", "--results-dir",
                     str(tmp_path / "r"), tmp_path=tmp_path)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "--max-regression" in lines[0] and "got 5.0" in lines[0], err
    assert not (tmp_path / "r").exists()


def test_a_precision_no_solution_of_the_selection_is_written_for_is_one_line(tmp_path):
    rc, _, err = cli("--problem", "57", "--precision", "fp16", "--results-dir", str(tmp_path / "r"), tmp_path=tmp_path)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "not for this run's fp16" in lines[0], err


def test_resume_of_a_run_that_was_never_recorded_is_bad_input(tmp_path):
    line = _bad(tmp_path, "--problem", "elementwise_add", "--config", FAST, "--run-id", "doesnotexist", "--resume")
    assert "--resume" in line and "doesnotexist" in line


def test_a_yaml_error_keeps_the_parsers_caret(tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("timing:\n  warmup: [1, 2\n")
    rc, out, err = cli("--problem", "elementwise_add", "--config", str(config), "--results-dir", str(tmp_path / "r"),
                       tmp_path=tmp_path)
    assert rc == 2 and err.startswith(f"error: {config}: not valid YAML"), err
    caret = next(line for line in err.splitlines() if line.strip() == "^")
    context = err.splitlines()[err.splitlines().index(caret) - 1]
    assert context.strip().startswith("warmup: [1, 2") or "warmup" in err  # the line the caret sits under
    assert not (tmp_path / "r").exists()


def test_a_run_where_nothing_could_be_evaluated_says_what_to_run_here(tmp_path):
    rc, out, err = cli("--problem", "elementwise_add", "--solution", "cuda_add", "--config", FAST, "--results-dir",
                       str(tmp_path), tmp_path=tmp_path)
    assert rc == 5, out + err  # nothing evaluated is neither a pass (0) nor a failure of a pair (1)
    assert "no CUDA device: 1 pair(s) skipped. On this machine: `python run_eval.py check --device cpu`" in \
        " ".join(err.split())


def test_solution_given_more_than_once_evaluates_each_and_each_pair_once(tmp_path):
    """argparse kept only the last --solution (the first silently dropped): now each one's pairs."""
    rc, out, err = cli("--problem", "elementwise_add", "--solution", "cpp_add", "--solution",
                       str(FIXTURE_SOLUTIONS / "wrong_signature.py"), "--solution", "cpp_add", "--config", FAST,
                       "--results-dir", str(tmp_path), "--run-id", "several", tmp_path=tmp_path)
    stored = sorted(p.stem for p in (tmp_path / "several").glob("*.json") if p.name != "run.json")
    assert stored == ["elementwise_add__cpp_add", "elementwise_add__wrong_signature"], out + err
    assert rc == 1 and "2 pair(s) on cpu" in out, out + err


def test_the_small_things_a_newcomer_met(tmp_path):
    """A bad --set value is the command line's, not the config file's; an unknown key offers the
    near ones and where every key is listed; a forward with the wrong signature is named by its
    line; a CPU run's lines say no "TF32 off" (the CPU has no TF32); --help lists every exit code."""
    rc, out, err = cli("--problem", "elementwise_add", "--set", "timing.min_samples=-5", tmp_path=tmp_path)
    assert rc == 2 and err.startswith("error: command line: timing needs") and "default.yaml" not in err, err
    rc, out, err = cli("--problem", "elementwise_add", "--set", "timing.min_sample=5", tmp_path=tmp_path)
    assert rc == 2 and "did you mean 'timing.min_samples'?" in err and "docs/usage.md" in err
    assert len(err.strip().splitlines()) == 1 and len(err.strip()) <= 120, err
    rc, out, err = cli("--problem", "elementwise_add", "--solution", str(FIXTURE_SOLUTIONS / "wrong_signature.py"),
                       "--config", FAST, "--results-dir", str(tmp_path), "--run-id", "sig", tmp_path=tmp_path)
    result = json.loads((tmp_path / "sig" / "elementwise_add__wrong_signature.json").read_text())
    assert rc == 1 and result["status"] == "runtime_error"
    assert "ModelNew.forward() takes 2 positional arguments but 3 were given at" in result["message"]
    assert result["message"].endswith("tests/fixtures/solutions/wrong_signature.py:6"), result["message"]
    rc, out, err = cli("--problem", "elementwise_add", "--solution", "cpp_add", "--config", FAST, "--results-dir",
                       str(tmp_path), "--run-id", "cpu", tmp_path=tmp_path)
    assert rc == 0 and "ms ref (" in out and "TF32" not in out, out
