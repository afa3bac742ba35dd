"""Red team on the CPU: every cheat fixture is caught, the true positives pass in their class,
and the weight diagnostics and extra shapes say what is wrong. One run, one build."""
import pytest

from harness import REPO_ROOT
from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

ADD = ["cpp_ok", "cpp_tf32", "cpp_bf16_as_fp32", "cheat_monkeypatch", "cheat_pointer_cache", "cheat_empty", "cheat_mutate_input",
       "cheat_inplace_alias", "cheat_zeros", "cheat_reference_output"]
CONV = ["ct2d_weight_layout", "ct2d_init_order", "ct2d_fixed_batch", "cheat_skip_shapes", "cheat_reference_output"]
P902 = REPO_ROOT / "problems" / "conv_transpose2d" / "902_conv_transpose2d_odd_unaligned.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    results_dir = tmp_path_factory.mktemp("results")
    # four timed calls a round: the timed inputs move to new memory before each round's block on the
    # CPU (timing.move_inputs), so with fast.yaml's one call a round no pointer would repeat and a
    # pointer cache would compute every timed call afresh (no cheat left to catch). With two a round
    # it is wrong on one call of each two, and the secret sample (6 of 21) missed every wrong one in
    # one CI run (0.85% by the draw, and the trials' pointers alike); with four, 3 of each 4 and
    # C(11,6)/C(41,6) = 0.01%
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(results_dir), "timing.min_samples": 40, "timing.max_samples": 40})
    add, conv = problem_from_path(ADD_PROBLEM), problem_from_path(P902)
    pairs = [Pair(add, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in ADD]
    pairs += [Pair(conv, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in CONV]
    results = evaluate(pairs, cfg, run_id="redteam", out=lambda line: None)
    return {(r.problem["id"], r.solution["name"]): r for r in results}


def add(run, name):
    return run[("elementwise_add", name)]


def conv(run, name):
    return run[("902_conv_transpose2d_odd_unaligned", name)]


def test_fp32_kernel_is_fp32_class(run):
    r = add(run, "cpp_ok")
    assert r.status is Status.OK and r.correctness["precision"] == "fp32"
    assert r.timing["baseline"] == "reference_fp32" and not r.flags
    checked = r.correctness["checked"]
    assert (checked["trials"], checked["shapes"]) == (2, 1) and checked["timed"] == min(6, checked["timed_calls"])


def test_tf32_kernel_is_tf32_class(run):
    r = add(run, "cpp_tf32")
    assert r.status is Status.OK and r.correctness["precision"] == "tf32", r.message
    assert r.timing["baseline"] == "reference"


def test_bf16_arithmetic_does_not_earn_the_tf32_class(run):
    r = add(run, "cpp_bf16_as_fp32")
    assert r.status is Status.INCORRECT, r.message
    assert "this error is not TF32 arithmetic's" in r.message and "rounding-like" in r.message, r.message
    tf32 = add(run, "cpp_tf32").correctness
    assert tf32["min_margin"] >= 2 and all(o["rounding"]["bf16"] > 5 * o["rounding"]["tf32"] for o in tf32["outputs"])


@pytest.mark.parametrize("name", ["cheat_monkeypatch", "cheat_empty", "cheat_zeros"])
def test_wrong_outputs_fail_whatever_they_patch(run, name):
    r = add(run, name)
    assert r.status is Status.INCORRECT, r.message
    assert "rel L2" in r.message


def test_pointer_cache_is_caught_by_checked_timed_calls(run):
    r = add(run, "cheat_pointer_cache")
    assert r.status is Status.INCORRECT
    assert r.correctness["failed"]["kind"] in ("trial", "timed")


def test_mutated_input_and_alias_are_caught(run):
    assert add(run, "cheat_mutate_input").status is Status.INCORRECT
    assert "input 0 was modified" in add(run, "cheat_mutate_input").message
    assert "shares memory with input 0" in add(run, "cheat_inplace_alias").message


def test_reference_passthrough_is_flagged(run):
    for r in (add(run, "cheat_reference_output"), conv(run, "cheat_reference_output")):
        assert r.status is Status.OK and "library_passthrough" in r.flags, r.message
        assert r.profile["share"] > 0.5


def test_weight_layout_diagnostic_comes_first(run):
    r = conv(run, "ct2d_weight_layout")
    assert r.status is Status.INCORRECT
    assert r.message.startswith("weights differ from the reference")
    assert "(7, 3, 5, 3)" in r.message and "(3, 7, 5, 3)" in r.message
    assert "(in_channels, out_channels/groups, kh, kw)" in r.message


def test_init_order_diagnostic(run):
    r = conv(run, "ct2d_init_order")
    assert r.status is Status.INCORRECT
    assert "different values" in r.message and "init order" in r.message


def test_extra_shape_catches_a_benchmark_only_solution(run):
    r = conv(run, "ct2d_fixed_batch")
    assert r.status is Status.INCORRECT
    assert "shape overrides" in r.message and "batch_size" in r.message
    assert r.correctness["checked"]["shapes"] == 2


def test_a_solution_that_drops_its_workers_extra_shapes_fails_on_the_first_trial_not_handed_over(run):
    """cheat_skip_shapes: ct2d_fixed_batch, with the extra shapes taken out of its worker's own list at
    import. The lane knows which trials it asked for; one never handed over fails the pair."""
    r = conv(run, "cheat_skip_shapes")
    assert r.status is Status.INCORRECT, r.message
    assert "its output was never handed over (2 of the 4 trials" in r.message and "batch_size" in r.message
    assert r.correctness["checked"]["shapes"] == 1 and r.correctness["checked"]["trials"] == 2


def test_seeds_recorded_with_secret(run):
    r = add(run, "cpp_ok")
    assert r.seeds["secret"] >= 0 and len(r.seeds["shapes"][0]["trials"]) == 2 and len(r.seeds["timing"]) == 2


# The clock fixtures (tests/fixtures/solutions/cheat_clock_*): each makes its worker report less
# time than its calls take, by a patched clock or by moving the work out of the timed call. The lane
# keeps its own clock on the worker's blocks (harness/verdict/vouch.py): each must fail as
# timing_untrusted or be reported within 10% of its unpatched twin. On a problem whose call is long
# against the CPU's per-call procedure (a chain of sixty 128x128 products: ~4 ms of arithmetic, 64 kB
# handed over), with the default config's CPU timing.
CLOCKS = ["cheat_clock_host", "cheat_clock_timer", "cheat_clock_writer", "cheat_clock_handoff"]
TWIN = "cheat_reference_output"
HELD = "cheat_clock_held"   # its outputs held back to the block's end, every cycle as short as an honest one's


@pytest.fixture(scope="module")
def clock_run(tmp_path_factory):
    cfg = with_overrides(load_config(None), {"device": "cpu", "results_dir": str(tmp_path_factory.mktemp("results"))})
    problem = problem_from_path(FIXTURES / "problems" / "matmul_chain.py")
    pairs = [Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in [TWIN, *CLOCKS, HELD]]
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="clocks", out=lambda line: None)}


def test_the_unpatched_twin_is_vouched_for(clock_run):
    r = clock_run[TWIN]
    assert r.status is Status.OK and "timing_untrusted" not in r.flags, r.message
    v = r.timing["vouch"]
    assert v["ok"] is True and v["calls"]["excess_ms"] <= v["calls"]["bound_ms"]
    assert [b["calls"] for b in r.timing["solution"]["lane_blocks"]] == [len(b) for b in r.timing["solution"]["rounds"]]


@pytest.mark.parametrize("name", CLOCKS)
def test_a_solution_that_patches_its_clocks_fails_or_gets_its_true_time(clock_run, name):
    r, twin = clock_run[name], clock_run[TWIN]
    ms, true_ms = r.timing["solution"]["median_ms"], twin.timing["solution"]["median_ms"]
    assert r.status is Status.REJECTED and "timing_untrusted" in r.flags, (r.message, ms, true_ms)
    assert "the lane's clock: the lane measured" in r.message
    assert r.timing["vouch"]["reported_ms"] < 0.6 * true_ms   # the patch took: the worker's word was a lie


def test_a_solution_that_holds_its_outputs_to_the_blocks_end_fails(clock_run):
    """cheat_clock_held: its work done where it hands its timed outputs over, all of them just before
    the exchange that ends each block. The lane holds each output to its call (clock.py `disorder`)."""
    r = clock_run[HELD]
    assert r.status is Status.REJECTED and "timing_untrusted" in r.flags, r.message
    assert "announced before the previous one's output" in r.message
    assert r.timing["vouch"]["reported_ms"] < 0.6 * clock_run[TWIN].timing["solution"]["median_ms"]


@pytest.fixture(scope="module")
def clock_run_off(tmp_path_factory):
    cfg = with_overrides(load_config(None), {"device": "cpu", "results_dir": str(tmp_path_factory.mktemp("results")),
                                             "checks.secret_timed_checks": "off"})
    problem = problem_from_path(FIXTURES / "problems" / "matmul_chain.py")
    names = [TWIN, "cheat_clock_host", "cheat_clock_timer", "cheat_clock_writer"]
    pairs = [Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in names]
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="clocks-off", out=lambda line: None)}


@pytest.mark.parametrize("name", ["cheat_clock_host", "cheat_clock_timer", "cheat_clock_writer"])
def test_a_patched_clock_fails_with_the_secret_timed_checks_off_too(clock_run_off, name):
    """With checks.secret_timed_checks off the timed calls are not handed over, and the lane still
    keeps its clock on each (announced) call. (The handoff fixture is left out: with no handoff
    after a timed call its work is never done there, so its timed calls really are that fast and
    their outputs wrong, unchecked: what off gives up, docs/evaluation.md.)"""
    r, twin = clock_run_off[name], clock_run_off[TWIN]
    assert twin.status is Status.OK and twin.timing["vouch"]["ok"] is True, twin.message
    assert r.status is Status.REJECTED and "timing_untrusted" in r.flags, r.message
    assert r.timing["vouch"]["reported_ms"] < 0.6 * twin.timing["solution"]["median_ms"]
