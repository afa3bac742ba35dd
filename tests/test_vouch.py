"""harness/verdict/vouch.py: the lane's judgement of a worker's reported times against its own clock,
and harness/run/clock.py, the clock that feeds it (pure: times given, nothing run)."""
import pytest

from harness.run.clock import BlockClock, in_block
from harness.run.pipeline import flags_of, vouched
from harness.isolate.channel import Marks
from harness.core.config import load_config, with_overrides
from harness.core.errors import BadInput
from harness.verdict.vouch import AUTO_BOUND, bound_slack, compact, cycle_clock, disagreement, overheads, vouch

CUDA = {**bound_slack({}, "cuda"), "noise_ms": 0.0}   # the tests' numbers without the lane's own noise term


def blocks(times_ms, inner_ovh, block_ovh, rounds=10, calls=10):
    """(reported, lane) for `rounds` blocks of `calls` calls of `times_ms`, the lane's intervals
    holding the harness's per-call overheads given (ms)."""
    reported = [[times_ms] * calls for _ in range(rounds)]
    lane = [{"ms": calls * (times_ms + block_ovh), "calls": calls, "returns": calls,
             "inner": [times_ms + inner_ovh] * calls} for _ in range(rounds)]
    return reported, lane


def test_an_honest_worker_is_vouched_for():
    ref = blocks(1.8, 0.15, 1.0)
    mine = blocks(0.45, 0.15, 1.0)
    v = vouch(*mine, *ref, CUDA)
    assert v["ok"] is True and v["calls"]["excess_ms"] == pytest.approx(0) and v["block"]["excess_ms"] == pytest.approx(0)
    assert v["calls"]["overhead_ms"] == pytest.approx(0.15) and v["block"]["lane_ms"] == pytest.approx(1.45)


def test_a_patched_clock_shows_in_the_calls_interval():
    """Reported at 0.3x: the lane's intervals hold the whole call, so the overhead the worker leaves
    unexplained is 0.7 of the call's time, past the bound (5 us + 10% of the reported median)."""
    ref = blocks(1.8, 0.15, 1.0)
    true_ms = 1.8
    reported, lane = blocks(true_ms, 0.15, 1.0)
    patched = [[x * 0.3 for x in b] for b in reported]
    v = vouch(patched, lane, *ref, CUDA)
    assert v["ok"] is False and v["calls"]["excess_ms"] == pytest.approx(0.7 * true_ms)
    assert "reported 0.54 ms" in v["why"] and "took about 1.8 ms" in v["why"]


def test_work_moved_out_of_the_call_shows_in_the_whole_block():
    """The call itself fast and honestly timed, the work in the handoff after it: the calls'
    intervals agree, the block's carries the work."""
    ref = blocks(1.8, 0.15, 1.0)
    reported, lane = blocks(0.06, 0.15, 1.0 + 1.8)
    v = vouch(reported, lane, *ref, CUDA)
    assert v["calls"]["excess_ms"] == pytest.approx(0) and v["block"]["excess_ms"] == pytest.approx(1.8)
    assert v["ok"] is False and "timed blocks, whole" in v["why"]


def test_the_bound_allows_the_noise_it_is_set_for():
    ref = blocks(1.0, 0.1, 1.0)   # 100 calls: the noise term is noise_share / 10 of the procedure's cost
    slack = {"ms": 0.005, "share": 0.1, "calls_overhead_share": 0.0, "block_overhead_share": 0.25, "noise_share": 1.0}
    # calls: 5 us + 10% of 1 ms + 0.1 x 0.1 ms = 0.115 ms; block: 0.105 + (0.25 + 0.1) x 1 ms = 0.455 ms
    assert vouch(*blocks(1.0, 0.1 + 0.11, 1.0 + 0.11), *ref, slack)["ok"] is True
    assert vouch(*blocks(1.0, 0.1 + 0.12, 1.0 + 0.12), *ref, slack)["ok"] is False
    assert vouch(*blocks(1.0, 0.1, 1.0 + 0.45), *ref, slack)["ok"] is True
    assert vouch(*blocks(1.0, 0.1, 1.0 + 0.46), *ref, slack)["ok"] is False
    # fewer calls, more noise allowed: 4 calls, noise 0.5 x the cost
    few = blocks(1.0, 0.1, 1.0, rounds=4, calls=1)
    assert vouch(*blocks(1.0, 0.1, 1.0 + 0.8, rounds=4, calls=1), *few, slack)["ok"] is True
    assert vouch(*blocks(1.0, 0.1, 1.0 + 0.9, rounds=4, calls=1), *few, slack)["ok"] is False


def phased(times_ms, block_ovh, cheap_from=None, cheap_ovh=None, rounds=10, calls=10, inner_ovh=0.07):
    """(reported, lane) whose procedure costs `block_ovh` a call in each block, `cheap_ovh` from
    round `cheap_from` on (a busy host's phase)."""
    reported, lane = blocks(times_ms, inner_ovh, block_ovh, rounds, calls)
    for index in range(cheap_from if cheap_from is not None else rounds, rounds):
        lane[index]["ms"] = calls * (times_ms + cheap_ovh)
    return reported, lane


def test_the_reference_workers_own_noise_widens_the_bound_not_a_solutions():
    """The H100 corpus run's 27_SELU_ (issue 76): the reference worker's blocks cost 0.62-0.70 ms a
    call of procedure in four rounds and 0.26-0.45 in six, the honest solution's about 0.62 in
    all ten: a median difference of 0.19 ms a call, 0.163 allowed without the rounds' noise."""
    ref = blocks(0.037, 0.07, 0.66)
    ref[1][4]["ms"], ref[1][9]["ms"] = 10 * (0.037 + 0.45), 10 * (0.037 + 0.40)
    for index in (5, 6, 7, 8):
        ref[1][index]["ms"] = 10 * (0.037 + 0.26 + 0.01 * index)
    honest = blocks(0.056, 0.07, 0.62)
    quiet = {**CUDA, "spread_z": 0.0}
    before = vouch(*honest, *ref, quiet)
    assert before["ok"] is False and before["block"]["excess_ms"] > before["block"]["bound_ms"] > 0.15
    v = vouch(*honest, *ref, CUDA)
    assert v["ok"] is True and v["block"]["spread_ms"] > before["block"]["excess_ms"] - before["block"]["bound_ms"]
    assert v["calls"]["spread_ms"] == 0.0            # the calls' intervals agreed round by round
    # work moved out of the calls is still seen through the same noise: 1.5 ms a call more
    cheat = blocks(0.056, 0.07, 0.62 + 1.5)
    assert vouch(*cheat, *ref, CUDA)["ok"] is False
    # a quiet reference adds nothing, whatever the solution's own blocks do: a worker cannot widen
    # its allowance by stalling some of its blocks (moved work in all, stalls in half)
    quiet_ref = blocks(0.037, 0.07, 0.66)
    noisy_cheat = blocks(0.056, 0.07, 0.66 + 0.3)
    for index in range(0, 10, 2):
        noisy_cheat[1][index]["ms"] += 10 * 5.0
    judged = vouch(*noisy_cheat, *quiet_ref, CUDA)
    assert judged["block"]["spread_ms"] == 0.0 and judged["ok"] is False


def test_rounds_are_compared_in_pairs():
    """A round where both sides were slow (the machine's) cancels out; one side alone does not."""
    ref_r, ref_l = blocks(1.0, 0.1, 1.0, rounds=5)
    mine_r, mine_l = blocks(1.0, 0.1, 1.0, rounds=5)
    for side in (ref_l, mine_l):
        for block in side[:3]:   # three of five rounds 0.5 ms a call slower, both sides
            block["inner"] = [x + 0.5 for x in block["inner"]]
            block["ms"] += 5.0
    assert vouch(mine_r, mine_l, ref_r, ref_l, CUDA)["ok"] is True
    assert vouch(mine_r, mine_l, ref_r, ref_l, CUDA, paired=False)["ok"] is True   # medians alike too
    assert vouch(mine_r, mine_l, *blocks(1.0, 0.1, 1.0, rounds=5), CUDA)["ok"] is False


@pytest.mark.parametrize("change, says", [
    (lambda r, l: r.pop(), "reported 9 timed block(s) where the lane saw 10"),
    (lambda r, l: r[3].pop(), "block 3: the worker reported 9 time(s) where the lane saw 10 call(s)"),
    (lambda r, l: l[2].update(returns=3), "marked 3 of its 10 timed call(s) as begun and returned"),
    (lambda r, l: l[4]["inner"].pop(), "marked 9 of its 10 timed call(s)"),
    (lambda r, l: l[9].update(unended="timing"), "ended by a 'timing' message"),
    (lambda r, l: r[0].__setitem__(0, float("nan")), "negative or not a number"),
    (lambda r, l: r[0].__setitem__(0, -1.0), "negative or not a number"),
])
def test_reported_blocks_must_be_the_blocks_the_lane_saw(change, says):
    reported, lane = blocks(1.0, 0.1, 1.0)
    change(reported, lane)
    v = vouch(reported, lane, *blocks(1.0, 0.1, 1.0), CUDA)
    assert v["ok"] is False and says in v["why"], v["why"]
    assert disagreement(reported, lane) == v["why"]


def test_without_the_reference_workers_blocks_an_earlier_measurement_stands_in():
    mine = blocks(1.0, 0.1, 1.0)
    v = vouch(*mine, [], [], CUDA)
    assert v["ok"] is None and "no earlier pair" in v["why"]
    v = vouch(*mine, [], [], CUDA, fallback={"inner": 0.1, "ms": 1.0})
    assert v["ok"] is True and v["block"]["overhead_ms"] == 1.0
    patched = [[x * 0.3 for x in b] for b in mine[0]]
    assert vouch(patched, mine[1], [], [], CUDA, fallback={"inner": 0.1, "ms": 1.0})["ok"] is False


def test_overheads_per_interval_and_a_stray_call_moves_one_call_only():
    reported, lane = blocks(2.0, 0.25, 1.5, rounds=2, calls=5)
    assert overheads(reported, lane) == pytest.approx([1.5, 1.5])
    assert overheads(reported, lane, "inner") == pytest.approx([0.25, 0.25])
    lane[0]["inner"][2] += 40.0   # one call 40 ms longer than its reported time (the worker descheduled)
    assert overheads(reported, lane, "inner") == pytest.approx([0.25, 0.25])
    kept = compact(reported, lane)
    assert "inner" not in kept[0] and kept[0]["inner_ovh_ms"] == pytest.approx(0.25)
    assert kept[1]["inner_ms"] == pytest.approx(2.25) and overheads(reported, kept, "inner") == pytest.approx([0.25, 0.25])


def test_auto_bound_by_device_and_the_calls_interval():
    assert bound_slack({}, "cuda") == {"share": 0.1, **AUTO_BOUND["cuda"], "cycle": True}
    assert bound_slack({}, "cpu")["block_overhead_share"] == AUTO_BOUND["cpu"]["block_overhead_share"]
    both = bound_slack({"timing_bound_ms": 0.1, "timing_bound_overhead_share": 0.3, "timing_bound_share": 0.2}, "cuda")
    assert both == {"ms": 0.1, "share": 0.2, "calls_overhead_share": 0.3, "block_overhead_share": 0.3, "gap_overhead_share": 0.3,
                    "noise_share": AUTO_BOUND["cuda"]["noise_share"], "noise_ms": AUTO_BOUND["cuda"]["noise_ms"],
                    "block_quantile": 0.5, "spread_z": AUTO_BOUND["cuda"]["spread_z"], "cycle": True}
    assert bound_slack({"timing_bound_spread_z": 0}, "cpu")["spread_z"] == 0.0


def test_on_the_cpu_a_stall_in_some_blocks_passes_and_work_moved_out_of_every_block_does_not():
    """An honest cpp_add on a busy 2-core VM (fast.yaml: one call a block, three rounds), as the lane
    recorded it: two of its blocks 100 ms longer than the reference's, the calls' intervals agreeing.
    The median of the rounds' differences failed it; the CPU's lower quartile does not. Work moved
    out of the calls lengthens every block, and the quartile still sees it."""
    cpu = bound_slack({}, "cpu")
    assert cpu["block_quantile"] == 0.25
    reported = [[0.60881], [0.60471], [0.41185]]
    ref_reported = [[0.51268], [0.47075], [0.38829]]

    def lane(walls, inner_ovh):
        return [{"ms": w, "calls": 1, "returns": 1, "inner": [r[0] + inner_ovh]} for w, r in zip(walls, reported)]

    mine = lane([18.66231, 118.41899, 114.01127], 0.015)
    ref = [{"ms": w, "calls": 1, "returns": 1, "inner": [r[0] + 0.013]} for w, r in zip([8.58199, 16.74975, 13.04929],
                                                                                            ref_reported)]
    assert vouch(reported, mine, ref_reported, ref, {**cpu, "block_quantile": 0.5})["ok"] is False   # as it was
    v = vouch(reported, mine, ref_reported, ref, cpu)
    # the least round: its wall per call less the reported median (0.60471), less the reference's procedure
    assert v["ok"] is True and v["block"]["excess_ms"] == pytest.approx(18.66231 - 0.60471 - (8.58199 - 0.51268))
    moved = lane([18.66231 + 40, 118.41899 + 40, 114.01127 + 40], 0.015)   # 40 ms of work after each call
    v = vouch(reported, moved, ref_reported, ref, cpu)
    assert v["ok"] is False and "timed blocks, whole" in v["why"]
    # ten rounds: the third least of the differences, so that up to seven longer blocks of ten move
    # nothing; eight do (the host busy for most of the pair's timing: time it again on a quiet host)
    reported10, lane10 = blocks(1.0, 0.1, 13.0, rounds=10, calls=10)
    ref10 = blocks(1.0, 0.1, 13.0, rounds=10, calls=10)
    for block in lane10[:7]:
        block["ms"] += 10 * 100.0
    assert vouch(reported10, lane10, *ref10, cpu)["ok"] is True
    lane10[7]["ms"] += 10 * 100.0
    assert vouch(reported10, lane10, *ref10, cpu)["ok"] is False
    # work moved out of the calls in only seven blocks of ten, the other three honest: the reported
    # median is the fast calls', and every block's wall still holds the true time of its calls
    true_ms, fast_ms = 5.0, 0.5
    cheat_reported, cheat_lane = blocks(true_ms, 0.1, 1.0, rounds=10, calls=10)
    for times, block in zip(cheat_reported[:7], cheat_lane[:7]):
        times[:] = [fast_ms] * len(times)
        block["inner"] = [fast_ms + 0.1] * len(times)
    v = vouch(cheat_reported, cheat_lane, *blocks(true_ms, 0.1, 1.0, rounds=10, calls=10), cpu)
    assert v["reported_ms"] == fast_ms and v["calls"]["excess_ms"] == pytest.approx(0)
    assert v["ok"] is False and v["block"]["excess_ms"] == pytest.approx(true_ms - fast_ms)


def test_the_verdict_fails_or_flags_an_untrusted_time():
    ref_r, ref_l = blocks(1.0, 0.1, 1.0)
    reported, lane = blocks(1.0, 0.1, 1.0)
    timing = {"solution": {"rounds": [[x * 0.3 for x in b] for b in reported], "median_ms": 0.3},
              "reference": {"rounds": ref_r, "lane_blocks": ref_l, "measured_in": "reference worker", "reused": False,
                            "median_ms": 1.0}}
    timing = vouched(timing, lane, {}, "cuda")
    patched = timing["solution"]["rounds"]
    assert timing["solution"]["lane_blocks"] == compact(patched, lane) and timing["vouch"]["ok"] is False
    assert "inner" not in timing["reference"]["lane_blocks"][0]
    base = {"library_share": 0.5, "library_passthrough": "flag", "timing_consistency": "flag"}
    assert flags_of({**base, "timing_bound": "fail"}, timing, {}) == (["timing_untrusted"], ["timing_untrusted"])
    assert flags_of({**base, "timing_bound": "flag"}, timing, {}) == (["timing_untrusted"], [])
    unvouched = vouched({**timing, "reference": {"median_ms": 1.0}}, lane, {}, "cuda")
    assert flags_of({**base, "timing_bound": "fail"}, unvouched, {}) == (["timing_unvouched"], ["timing_unvouched"])


def test_a_gates_yardstick_is_held_to_the_lanes_clock_too():
    """The yardstick worker imports the solution (then and now): its times are vouched for alike, and
    where they are not, the gate gets no yardstick (`yardstick_failed` says why) and calls no change."""
    ref_r, ref_l = blocks(1.0, 0.1, 1.0)
    mine_r, mine_l = blocks(1.0, 0.1, 1.0)
    now_r, now_l = blocks(1.0, 0.1, 1.0, rounds=5)
    yardstick = {"rounds": now_r, "lane_blocks": now_l,
                 "now": {"rounds": [[x * 0.3 for x in b] for b in now_r], "lane_blocks": now_l}}
    timing = {"solution": {"rounds": mine_r}, "yardstick": yardstick,
              "reference": {"rounds": ref_r, "lane_blocks": ref_l, "measured_in": "reference worker", "reused": False}}
    judged = vouched(timing, mine_l, {}, "cuda")
    assert judged["vouch"]["ok"] is True and "yardstick" not in judged
    assert "the yardstick worker's times for 'now' are not vouched for" in judged["yardstick_failed"]
    honest = vouched({**timing, "yardstick": {**yardstick, "now": {"rounds": now_r, "lane_blocks": now_l}}}, mine_l, {},
                     "cuda")
    assert "yardstick_failed" not in honest and "inner" not in honest["yardstick"]["now"]["lane_blocks"][0]


def test_the_clock_counts_the_lanes_own_intervals():
    clock = BlockClock()
    clock.call("timed")                                   # before any block: not counted
    clock.open(1.0)
    clock.call("timed")
    clock.marks([(Marks.CALL, 100.1), (Marks.RETURNED, 100.3)])   # the kernel's stamps: 200 ms
    clock.lane_work(0.05)                                 # a take: the lane's, not the worker's
    clock.call("timed")
    clock.marks([(Marks.CALL, 100.45), (Marks.RETURNED, 100.5)])  # 50 ms
    clock.call("trial")                                   # not a timed call
    clock.close(2.0, idle_s=0.25)
    (block,) = clock.blocks
    assert block["calls"] == 2 and block["returns"] == 2 and not clock.is_open
    assert block["inner"] == pytest.approx([200, 50])
    assert block["ms"] == pytest.approx((2.0 - 1.0 - 0.05 + 0.25) * 1e3) and block["taken_ms"] == pytest.approx(50)
    assert block["gap"] == pytest.approx([350 - 50]) and "disorder" not in block   # call to call, less the take
    clock.open(3.0)
    clock.close(3.1, unended="timing")
    assert clock.blocks[-1]["unended"] == "timing" and clock.blocks[-1]["calls"] == 0
    assert in_block("call", {"what": "timed"}) and in_block("output", {"kind": "timed"})
    assert not in_block("call", {"what": "timed_check"}) and not in_block("output", {"kind": "trial"})


def test_marks_carry_the_time_they_were_sent_however_late_they_are_read():
    """The kernel stamps each mark as it is sent (SO_TIMESTAMPNS on a SOCK_SEQPACKET pair): a lane
    that reads 50 ms late still gets the interval between the two sends."""
    import time
    mine, theirs = Marks.pair()
    worker = Marks(theirs)
    try:
        worker.send(Marks.CALL)
        time.sleep(0.02)
        worker.send(Marks.RETURNED)
        time.sleep(0.05)   # the lane busy
        (c, t0), (r, t1) = mine.drain()
        assert (c, r) == (Marks.CALL, Marks.RETURNED)
        assert 0.015 <= t1 - t0 < 0.045, t1 - t0   # the 20 ms between the sends, not the reading
        assert time.time() - t1 >= 0.045 and mine.drain() == []
    finally:
        mine.close()
        worker.close()


def test_the_clock_on_each_cycle_takes_out_the_lanes_work_and_holds_outputs_to_their_call():
    """`gap`: from a timed call's mark as it begins to the next one's, less the lane's takes between;
    where the block hands outputs over, each before the next call is announced (`disorder` else)."""
    def run(order):
        clock, stamp = BlockClock(), 100.0
        clock.open(1.0)
        for step in order:
            if step == "call":
                clock.call("timed")
                clock.marks([(Marks.CALL, stamp), (Marks.RETURNED, stamp + 0.001)])
                stamp += 0.004
            else:
                clock.output()
                clock.lane_work(0.001)
        clock.close(2.0)
        return clock.blocks[-1]

    honest = run(["call", "output"] * 3)
    assert honest["gap"] == pytest.approx([3.0, 3.0]) and "disorder" not in honest
    assert "disorder" not in run(["call"] * 3)   # no output handed over at all (secret timed checks off)
    held = run(["call"] * 3 + ["output"] * 3)   # every output held to the block's end: its work out of every cycle
    assert "2 call(s) announced before the previous one's output" in held["disorder"]
    assert "disorder" in run(["call", "output", "call", "call", "output"])   # one output missing
    pairs_held = run(["call", "call", "output", "output"] * 2)   # each other output held one call: two calls early
    assert "2 call(s) announced before the previous one's output" in pairs_held["disorder"]
    assert "block 0: 3 output(s) handed over" in disagreement([[1.0] * 3], [held])


def test_the_lanes_work_is_taken_out_up_to_its_acknowledgement():
    """A lane descheduled after its "ack" would take the worker's running time out of the block."""
    for cycle, taken in ((True, 10.0), (False, 50.0)):
        clock = BlockClock(cycle)
        clock.open(1.0)
        clock.call("timed")
        clock.output()
        clock.lane_work(0.05, to_ack=0.01)
        clock.close(2.0)
        assert clock.blocks[-1]["taken_ms"] == pytest.approx(taken)


def test_the_cycle_check_is_on_by_default_and_off_by_the_config():
    assert cycle_clock({}) and cycle_clock({"timing_cycle": "on"})
    assert not cycle_clock({"timing_cycle": "off"}) and load_config(None).checks.timing_cycle == "auto"
    with pytest.raises(BadInput, match="checks.timing_cycle must be auto, on or off"):
        with_overrides(load_config(None), {"checks.timing_cycle": "sometimes"})
    ref, mine = blocks(1.8, 0.005, 0.35), blocks(0.04, 0.005, 0.35)
    for b in ref[1] + mine[1]:
        b["gap"] = [t + 0.3 for t in b["inner"][:-1]]
    for b in mine[1]:
        b["gap"] = [g + 1.8 for g in b["gap"]]
    assert vouch(*mine, *ref, bound_slack({}, "cpu"))["ok"] is False
    off = vouch(*mine, *ref, bound_slack({"timing_cycle": "off"}, "cpu"))
    assert off["ok"] is True and "gap" not in off   # off: the cycle is recorded in the blocks, not judged
    disordered = BlockClock(cycle=False)
    disordered.open(0.0)
    for _ in range(2):
        disordered.call("timed")
    disordered.output()
    disordered.output()
    disordered.close(1.0)
    assert "disorder" not in disordered.blocks[-1]


def test_work_moved_into_the_procedure_after_each_call_shows_in_the_cycle_when_the_block_is_noisy():
    """The handoff fixture on a busy host: each call fast and honestly timed, its work in the handoff
    after it. The whole block (its wall, with every stall of the host) is too noisy to tell; each
    cycle's median is not."""
    ref_reported, ref_lane = blocks(1.8, 0.005, 0.35)
    reported, lane = blocks(0.04, 0.005, 0.35 + 1.8)
    for b in ref_lane + lane:
        b["gap"] = [t + 0.3 for t in b["inner"][:-1]]
    for b in lane:
        b["gap"] = [g + 1.8 for g in b["gap"]]
    for i, b in enumerate(ref_lane):   # the reference's block walls: the busy host's stalls, 0 to 2.7 ms a call
        b["ms"] += b["calls"] * 0.3 * i
    v = vouch(reported, lane, ref_reported, ref_lane, bound_slack({}, "cpu"))
    assert v["block"]["excess_ms"] < v["block"]["bound_ms"]   # the block alone would pass it
    assert v["ok"] is False and v["gap"]["excess_ms"] == pytest.approx(1.8) and "to the next's" in v["why"]
    honest = blocks(1.8, 0.005, 0.35)
    for b in honest[1]:
        b["gap"] = [t + 0.3 for t in b["inner"][:-1]]
    assert vouch(*honest, ref_reported, ref_lane, bound_slack({}, "cpu"))["ok"] is True
    kept = compact(reported, lane)
    assert "gap" not in kept[0] and kept[0]["gap_ovh_ms"] == pytest.approx(0.005 + 0.3 + 1.8)
    assert overheads(reported, kept, "gap") == overheads(reported, lane, "gap")


def test_the_reference_workers_calls_a_block():
    """rounds.reference_calls: the stopping rule's calls per round for the reference's time a call;
    with the cycle on, that time is its own last block's median once it has one, and a block has two
    calls at least where the solution's round has two (one cycle of the reference's)."""
    from harness.run.rounds import reference_calls
    t = {"min_samples": 10, "max_samples": 100, "min_time_s": 0.5, "max_time_s": 10.0}
    round_of = {"of": 10, "calls": 10}
    inflated = {"median_ms": 60.0}   # the lane's own estimate on a busy CPU
    assert reference_calls(t, inflated, None, round_of, cycle=False) == 1
    assert reference_calls(t, inflated, None, round_of, cycle=True) == 2
    assert reference_calls(t, inflated, [[1.8] * 2], round_of, cycle=True) == 10   # its own block: 100 calls in 10
    assert reference_calls(t, inflated, [[1.8] * 2], round_of, cycle=False) == 1
    assert reference_calls(t, inflated, None, {"of": 10, "calls": 1}, cycle=True) == 1
    fast = {"median_ms": 0.4}   # 100 calls in 10 planned; the solution's round has 6: blocks of one length
    assert reference_calls(t, fast, None, {"of": 10, "calls": 6}, cycle=True) == 6
    assert reference_calls(t, fast, None, {"of": 10, "calls": 6}, cycle=False) == 10
