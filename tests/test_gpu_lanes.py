"""GPU lanes (skipped without CUDA): a hung kernel reported in seconds, outputs rewritten after
forward returns caught on the device, one lane per GPU."""
import pytest
import torch

from harness.core import problems, solutions
from harness.core.config import load_config, with_overrides
from harness.core.errors import BadInput
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

pytestmark = pytest.mark.gpu


def _cfg(tmp_path, **overrides):
    return with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                          {"device": "cuda", "results_dir": str(tmp_path), "timeouts.run_s": 600, **overrides})


def test_a_spinning_kernel_on_81_is_a_timeout_within_a_minute_of_its_first_call(tmp_path):
    p81 = problems.select("81")[0]
    defaults = load_config(None).timeouts  # the default limits, not the test config's
    cfg = _cfg(tmp_path, **{"timeouts.call_s": defaults.call_s, "timeouts.first_call_s": defaults.first_call_s})
    (result,) = evaluate([Pair(p81, solution_from_path(FIXTURE_SOLUTIONS / "cuda_hang.py"))], cfg, run_id="hang",
                         out=lambda line: None)
    assert result.status is Status.TIMEOUT, result.message
    assert "(trial, shape 0, trial 0)" in result.message and f"within {defaults.first_call_s:g} s" in result.message
    after_first_call = result.phases["correctness_s"]
    assert after_first_call < 60, result.phases


@pytest.mark.parametrize("name", ["cheat_late_thread", "cheat_fix_previous"])
def test_outputs_rewritten_after_forward_returned_fail_on_the_gpu(tmp_path, name):
    pair = Pair(problems.problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / f"{name}.py"))
    (result,) = evaluate([pair], _cfg(tmp_path), run_id=name, out=lambda line: None)
    assert result.status is Status.INCORRECT, result.message


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_one_lane_per_gpu(tmp_path):
    pairs = solutions.select_pairs(problems.select("902") + problems.select("elementwise_add"), None, True,
                                   problems.discover())
    pairs = [p for p in pairs if p.solution.name != "cpp_add"]  # C++ on the CPU only
    results = evaluate(pairs, _cfg(tmp_path, gpus="all"), run_id="lanes", out=lambda line: None)
    assert all(r.status is Status.OK for r in results), [r.message for r in results]
    assert len({r.env["lane"]["gpu"] for r in results}) == 2  # both lanes evaluated pairs


def test_more_gpus_than_the_host_has_is_bad_input_and_records_nothing(tmp_path):
    pair = Pair(problems.problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / "cpp_ok.py"))
    with pytest.raises(BadInput, match=f"{torch.cuda.device_count() + 1} GPUs requested"):
        evaluate([pair], _cfg(tmp_path / "r", gpus=torch.cuda.device_count() + 1), run_id="too-many",
                 out=lambda line: None)
    assert not (tmp_path / "r").exists()



@pytest.mark.parametrize("name", ["cuda_at_import_stream", "cuda_at_import_props", "cuda_at_import_tensor",
                                  "cuda_at_import_device"])
def test_a_solution_that_uses_cuda_at_import_is_judged_on_its_merits(tmp_path, name):
    """A stream, the device's properties, a CUDA tensor, the current device at import: the build
    step (GPU hidden) cannot import it, so its worker does, with its GPU visible, and builds what
    is left to build; the verdict is the solution's own. The stream's case asserts what its build
    step said, so it builds in a cache of its own: with the session's cache already holding its
    manifest (an earlier run on the same machine) no build step runs and nothing is said."""
    pair = Pair(problems.problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / f"{name}.py"))
    own = {"build.cache_dir": str(tmp_path / "builds")} if name == "cuda_at_import_stream" else {}
    (result,) = evaluate([pair], _cfg(tmp_path, **own), run_id=name, out=lambda line: None)
    assert result.status is Status.OK, f"{result.status.value}: {result.message}"
    if name == "cuda_at_import_stream":
        assert result.build["extensions"][-1]["name"] == "fixture_cuda_at_import", result.build
        assert "with the GPU hidden the import failed" in result.build["log"]


def test_a_worker_that_ended_is_not_waited_for_on_the_gpu_while_a_process_it_left_holds_its_channel(tmp_path, monkeypatch):
    """As on the CPU (tests/test_lanes_cpu.py): a correct add whose import leaves a process in a
    session of its own is ok within seconds, and nothing it left runs on (EXIT_WATCH on CUDA)."""
    import uuid
    from test_sandbox import strays
    token = f"kb-leaves-a-child-{uuid.uuid4().hex}"
    monkeypatch.setenv("KB_TEST_TOKEN", token)
    pair = Pair(problems.problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / "leaves_a_child.py"))
    (result,) = evaluate([pair], _cfg(tmp_path, **{"timeouts.run_s": 60}), run_id="child", out=lambda line: None)
    assert result.status is Status.OK, result.message
    assert result.phases["wall_s"] < 40, result.phases
    assert strays(token) == []
