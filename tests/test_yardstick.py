"""The CI gate's yardstick worker holds two versions of one solution in one process
(harness/run/worker.py run_yardstick, import_version): each must run its own code, helper modules
included, although both import a helper of the same name."""
import sys
import textwrap
from pathlib import Path

import torch

from harness.run.worker import Worker


class Events:
    def __init__(self):
        self.seen = []

    def emit(self, event, **fields):
        self.seen.append((event, fields))


SOLUTION = textwrap.dedent('''
    import sys
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
    from kb_test_helper import FACTOR  # noqa: E402


    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return x * FACTOR
''')


def version(root: Path, factor: float) -> Path:
    family = root / "family"
    (family / "_shared").mkdir(parents=True)
    (family / "_shared" / "kb_test_helper.py").write_text(f"FACTOR = {factor!r}\n")
    (family / "p").mkdir()
    (family / "p" / "sol.py").write_text(SOLUTION)
    return family / "p" / "sol.py"


def test_two_versions_in_one_process_each_import_their_own_helpers(tmp_path):
    then_path, now_path = version(tmp_path / "then", 2.0), version(tmp_path / "now", 3.0)
    worker = Worker({"mode": "yardstick", "solution_path": str(now_path), "device": "cpu"}, Events())
    path_before = list(sys.path)
    try:
        then_new = worker.import_version(then_path, {}, last=False)
        assert "kb_test_helper" not in sys.modules           # then's helper left with it
        assert str(then_path.parent) not in sys.path          # and its folders
        now_new = worker.import_version(now_path, {}, last=True)
        x = torch.ones(3)
        assert then_new()(x).tolist() == [2.0] * 3             # then's class keeps then's helper
        assert now_new()(x).tolist() == [3.0] * 3             # now imports its own
        assert sys.modules["kb_test_helper"].FACTOR == 3.0     # the last version stays, as in its own worker
        assert worker.solution_path == now_path
    finally:
        sys.modules.pop("kb_test_helper", None)
        sys.path[:] = path_before


def test_a_yardstick_block_of_short_calls_lasts_long_enough_to_have_a_steady_median():
    from harness.run.yardstick import yardstick_calls
    assert yardstick_calls(10, [], 20.0, 1000) == 10                       # round 0: the solution's round
    assert yardstick_calls(10, [[0.14] * 10], 20.0, 1000) == 143           # 902 / fast: 20 ms of 0.14 ms calls
    assert yardstick_calls(10, [[1.3] * 10], 20.0, 1000) == 16             # 69 / fast
    assert yardstick_calls(10, [[5.0] * 10], 20.0, 1000) == 10             # never fewer than the round's
    assert yardstick_calls(10, [[0.001] * 10], 20.0, 1000) == 1000         # at most `most`


class FakeYardstick:
    """A yardstick worker whose blocks of then and now are drawn with a spread per block."""

    def __init__(self, spread: float, seed: int = 0, now_slower: float = 1.0):
        import random
        self.rng, self.spread, self.now_slower = random.Random(seed), spread, now_slower
        self.failed, self.versions, self.by_role, self.served = "", {"roles": ["now", "then"]}, {}, []
        self.lane_by_role = {}   # the lane's clock on its blocks (a real one's: harness/run/clock.py)

    def serve(self, role, calls, cpus):
        level = (self.now_slower if role == "now" else 1.0) * (1.0 + self.rng.uniform(-self.spread, self.spread))
        self.by_role.setdefault(role, []).append([level * (1 + 0.001 * (i % 3)) for i in range(calls)])
        self.served.append(role)
        return True


def rounds_with(yardstick, rounds: int, **timing):
    from harness.run.yardstick import Yardstick
    t = {"confidence": 0.95, "gate_max_rounds": 50, "gate_precision": 0.025, "gate_max_regression": 0.05, **timing}
    r = Yardstick(yardstick, t, None, wait_idle=lambda: 0.0, end=lambda worker: None)
    r.calls = 10
    for n in range(rounds):
        r.round(n)
    return r


def test_the_gate_adds_yardstick_rounds_only_where_its_interval_is_wider_than_gate_precision():
    steady = rounds_with(FakeYardstick(0.002), 10)
    assert steady.settle() == 0 and len(steady.worker.by_role["then"]) == 10    # ten rounds decide: nothing added
    noisy = rounds_with(FakeYardstick(0.15), 10)
    added = noisy.settle()
    then, now = noisy.worker.by_role["then"], noisy.worker.by_role["now"]
    assert added > 0 and len(then) == len(now) == 10 + added <= 50
    # then and now in turns as in the pair's rounds: then first in even rounds, now first in odd ones
    assert noisy.worker.served[20:24] == ["then", "now", "now", "then"]
    assert len(then) == 50 or noisy.can_stop(then, now, 0.025)   # stopped at the cap, or decided or narrow
    capped = rounds_with(FakeYardstick(0.15), 10, gate_max_rounds=10)
    assert capped.settle() == 0                                            # gate_max_rounds <= rounds: none added
    gone = rounds_with(FakeYardstick(0.15), 10)
    gone.worker.failed = "it exited"
    assert gone.settle() == 0                                              # a failed yardstick is left alone


def gate_reads(r) -> tuple[str, tuple[float, float]]:
    """What the gate (harness/record/gate.py) calls the yardstick's rounds as the result records
    them (BlockWorker.stats), at r's threshold, and the interval it calls it from."""
    from types import SimpleNamespace

    from harness.record.gate import same_rounds_change
    from harness.run.rounds import BlockWorker
    from harness.verdict.timing import change_called
    then, now = (BlockWorker.stats(r.worker, "host", role) for role in ("then", "now"))
    _, interval, one = same_rounds_change(SimpleNamespace(timing={"yardstick": {**then, "now": now}}))
    assert one
    return change_called(interval, r.t["gate_max_regression"]), interval


def test_the_gate_adds_no_rounds_where_its_interval_already_decides_the_call():
    """Ten noisy rounds leave an interval far wider than gate_precision; where all of it lies on
    one side of 1 - gate_max_regression, more rounds could not change the gate's call, and none are
    added; where it holds that threshold, they are, as before."""
    # unchanged code, a 50% threshold: [~0.9, ~1.1] cannot be called slower
    loose = rounds_with(FakeYardstick(0.15), 10, gate_max_regression=0.5)
    assert loose.settle() == 0 and gate_reads(loose)[0] == ""
    called, (low, high) = gate_reads(loose)
    assert high - low > (high + low) / 2 * 0.05               # wider than gate_precision at either end
    # now twice as slow, 5%: all of it below 0.95, already called slower
    halved = rounds_with(FakeYardstick(0.15, now_slower=2.0), 10)
    assert halved.settle() == 0 and gate_reads(halved)[0] == "slower"
    # unchanged code, 5%: the interval holds 0.95, so rounds are added until it does not or is narrow
    held = rounds_with(FakeYardstick(0.15), 10)
    assert held.settle() > 0
    called, (low, high) = gate_reads(held)
    then, now = held.worker.by_role["then"], held.worker.by_role["now"]
    assert len(then) == 50 or held.can_stop(then, now, 0.025)      # at the cap, or decided or narrow


def test_the_yardstick_times_in_gate_rounds_of_the_pairs_rounds_spread_evenly():
    """timing.gate_rounds: of a pair's 30 rounds (--set timing.rounds=30), the yardstick's blocks
    are in every third (10), each with the calls of three of the pair's rounds, so the pair's rounds
    do not make the gate dearer; then and now keep their turns by the yardstick's own count, and
    `pair_rounds` says which of the pair's rounds they shared."""
    from harness.run.yardstick import gate_turn
    assert [n for n in range(30) if gate_turn(n, 30, 10)] == list(range(0, 30, 3))
    assert [n for n in range(10) if gate_turn(n, 10, 10)] == list(range(10))
    assert [n for n in range(5) if gate_turn(n, 5, 10)] == list(range(5))          # fewer rounds: in each
    assert [n for n in range(25) if gate_turn(n, 25, 10)] == list(range(0, 20, 2))  # never more than gate_rounds
    r = rounds_with(FakeYardstick(0.01), 0, gate_rounds=10)
    for n in range(30):
        r.in_round({"n": n, "of": 30, "calls": 10})
    assert r.pair_rounds == list(range(0, 30, 3)) and len(r.worker.by_role["then"]) == 10
    assert {len(b) for b in r.worker.by_role["then"] + r.worker.by_role["now"]} == {30}   # 3 rounds' calls
    assert r.worker.served[:4] == ["then", "now", "now", "then"]
