"""GPU red team and calibration (skipped without CUDA)."""
import pytest
import torch
import torch.nn.functional as F

from harness import REPO_ROOT
from harness.core import problems
from harness.core.config import load_config, with_overrides
from harness.verdict.numerics import compare
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

pytestmark = pytest.mark.gpu
CFG = load_config(None).correctness


def test_cudnn_default_is_tf32_class_and_strict_is_fp32_class():
    torch.manual_seed(0)
    x = torch.rand(8, 64, 128, 128, device="cuda")
    w = torch.nn.ConvTranspose2d(64, 64, 3).weight.detach().cuda()
    truth = F.conv_transpose2d(x.double(), w.double())
    default = F.conv_transpose2d(x, w)  # PyTorch default: cuDNN may use TF32
    torch.backends.cudnn.allow_tf32 = False
    try:
        strict = F.conv_transpose2d(x, w)
    finally:
        torch.backends.cudnn.allow_tf32 = True
    c = compare(strict, truth, torch.float32, CFG.fp32)
    assert c.ok and c.margin >= 10, c.message
    assert not compare(default, truth, torch.float32, CFG.fp32).ok
    c = compare(default, truth, torch.float32, CFG.tf32)
    assert c.ok and c.margin >= 5, c.message


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"device": "cuda", "results_dir": str(tmp_path_factory.mktemp("r")), "timeouts.run_s": 300})
    add = problems.problem_from_path(ADD_PROBLEM)
    p71 = problems.select("71")[0]
    pairs = [Pair(add, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py"))
             for n in ("cheat_empty", "cheat_elapsed_time", "cheat_pointer_cache", "cheat_monkeypatch")]
    pairs += [Pair(p71, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py"))
              for n in ("cheat_side_stream", "cheat_reference_output")]
    pairs.append(Pair(p71, solution_from_path(REPO_ROOT / "solutions" / "conv_transpose2d" / p71.id / "direct.py")))
    results = evaluate(pairs, cfg, run_id="gpu-redteam", out=print)
    return {r.solution["name"]: r for r in results}


def test_unwritten_output_reads_as_poison(gpu_run):
    r = gpu_run["cheat_empty"]
    assert r.status is Status.INCORRECT and "NaN/Inf" in r.message, r.message


def test_patched_event_timer_is_flagged_and_wall_time_used(gpu_run):
    r = gpu_run["cheat_elapsed_time"]
    assert "timing_inconsistent" in r.flags, r.message
    assert r.timing["solution"]["median_ms"] > 0.002  # the wall time, not the patched 1 us


def test_pointer_cache_and_monkeypatch_fail_on_gpu(gpu_run):
    assert gpu_run["cheat_pointer_cache"].status is Status.INCORRECT
    assert gpu_run["cheat_monkeypatch"].status is Status.INCORRECT


def test_side_stream_work_is_counted(gpu_run):
    r = gpu_run["cheat_side_stream"]
    assert r.status is Status.OK and "library_passthrough" in r.flags, r.message
    assert r.timing["speedup"] < 1.5, r.timing  # the real cuDNN time, not an empty stream


def test_cudnn_passthrough_is_tf32_and_flagged(gpu_run):
    r = gpu_run["cheat_reference_output"]
    assert r.status is Status.OK and r.correctness["precision"] == "tf32", r.message
    # the profiled call's time includes its synchronization: cuDNN on 71 measured a share of 0.87 and
    # 0.91 on the H200 (2026-12-01), 0.92-0.99 on the family's other problems; the flag is at 0.5
    assert "library_passthrough" in r.flags and r.profile["share"] > 0.8
    assert any(k["library"] for k in r.profile["top"])


def test_direct_kernel_is_fp32_and_not_flagged(gpu_run):
    r = gpu_run["direct"]
    assert r.status is Status.OK and r.correctness["precision"] == "fp32", r.message
    assert not r.flags and r.timing["baseline"] == "reference_fp32"
    checked = r.correctness["checked"]
    k = load_config(None).checks.timed_output_checks
    assert checked["shapes"] == 1 and k == 6 and checked["timed"] == min(k, checked["timed_calls"]), checked
    assert "in secret" in checked["timed_rule"], checked  # on CUDA too by default (checks.secret_timed_checks)


# The clock fixtures on CUDA (tests/fixtures/solutions/cheat_clock_*): each makes its worker report
# less time than its calls take: torch.cuda.Event.elapsed_time or record patched, synchronize made a
# no-op with the work on a side stream, cudaEventElapsedTime interposed in C (a GOT entry rewritten
# by the solution's extension), the harness's own timers or event writer patched in the worker, the
# work moved into the handoff after each call. Each must fail as timing_untrusted or be reported
# within 10% of its unpatched twin (the host clocks alone: CUDA events do not read them).
CLOCKS = ["cheat_clock_event", "cheat_clock_record", "cheat_clock_sync", "cheat_clock_cudart", "cheat_clock_timer",
          "cheat_clock_writer", "cheat_clock_handoff"]
TWIN = "cheat_reference_output"


@pytest.fixture(scope="module")
def clock_run(tmp_path_factory):
    cfg = with_overrides(load_config(None), {"device": "cuda", "results_dir": str(tmp_path_factory.mktemp("clocks")),
                                             "timing.max_samples": 300, "timing.rounds": 15})
    p81 = problems.select("81")[0]
    pairs = [Pair(p81, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in [TWIN, "cheat_clock_host", *CLOCKS]]
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="gpu-clocks", out=print)}


def test_the_clock_fixtures_twin_is_vouched_for(clock_run):
    r = clock_run[TWIN]
    assert r.status is Status.OK and r.timing["vouch"]["ok"] is True, r.message
    host = clock_run["cheat_clock_host"]   # slows the host's clocks only: the events are the GPU's
    assert host.status is Status.OK and abs(host.timing["solution"]["median_ms"] / r.timing["solution"]["median_ms"] - 1) < 0.1


@pytest.mark.parametrize("name", CLOCKS)
def test_a_patched_clock_on_cuda_fails(clock_run, name):
    r, twin = clock_run[name], clock_run[TWIN]
    assert r.status is Status.REJECTED and "timing_untrusted" in r.flags, r.message
    assert r.timing["vouch"]["reported_ms"] < 0.6 * twin.timing["solution"]["median_ms"]   # the patch took
