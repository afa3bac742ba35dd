"""The run: pick the pairs, build them on the CPU while lanes evaluate the ones already built, one
lane per GPU (harness/run/lane.py), stream each result to the store as soon as it exists, and show
progress.

A lane is a long-lived trusted process that owns one device (harness/run/lane.py; the runner's handle
on it: harness/run/laneproc.py); the runner itself never imports torch. Builds run in fresh processes
with the GPUs hidden (harness/run/pipeline.py); a build the cache's manifest already records is not
repeated. A lane that dies loses only the pair it had, which is
given to a lane once more; a pair that takes down a lane twice is recorded as a harness error.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from .. import REPO_ROOT
from ..core import problems
from ..isolate import sandbox
from ..compile.build import cache_dir_of, manifest_key, read_manifest
from ..core.config import Config, build_stagger
from .env import git_info
from ..core.errors import BadInput
from ..isolate.isolation import allow_steps, close_fork_server, reaping, stop_steps
from . import placement
from .laneproc import LaneDied, LaneProc, Lanes
from ..record.leaderboard import short_label, speedup_text, summary
from .pipeline import PairRun, RunContext, assemble
from ..core.precision import baseline_label
from .progress import Progress, shorten, wrap
from ..core.results import EvalResult, Status, pair_key, with_store_time
from ..core.solutions import Pair
from ..core.store import Store


def gate_in_same_rounds(cfg: Config, device: str) -> bool:
    """Whether a gate's revision is timed in its pair's rounds by a yardstick worker
    (timing.gate_yardstick: auto and on alike, on every device), else as a pair of its own,
    compared by the two speedups (harness/record/gate.py)."""
    return cfg.timing.enabled and cfg.timing.gate_yardstick != "off"


class Schedule:
    """Pairs ready for a lane, and how many builds may still add one. A lane takes a pair of the
    problem it had last when there is one (its reference timings and ground truth are warm). A
    pair with a yardstick (the CI gate's solution at a revision: PairRun.yardstick) waits until
    the yardstick's build has ended, so that its lane can time it with the yardstick's libraries."""

    def __init__(self, order: dict[int, int], after: dict[int, PairRun] | None = None):
        self.cv = threading.Condition()
        self.ready: list[PairRun] = []
        self.parked: list[PairRun] = []   # built, waiting for their yardstick's build
        self.ended: set[int] = set()      # runs whose build ended (or was in the manifest)
        self.after = after or {}          # id(run) -> the run whose build it waits for
        self.building = 0
        self.order = order

    def expect(self, builds: int) -> None:
        with self.cv:
            self.building += builds

    def built(self, run: PairRun, ok: bool) -> None:
        """`run`'s build step ended: ready for a lane when `ok` (else its result is recorded)."""
        with self.cv:
            self.building -= 1
            self._ended(run, ok)

    def put(self, run: PairRun, ok: bool = True) -> None:
        """A run the build manifest already records (built: ready when `ok`)."""
        with self.cv:
            self._ended(run, ok)

    def _ended(self, run: PairRun, ok: bool) -> None:
        self.ended.add(id(run))
        if ok:
            self.parked.append(run)
        for waiting in list(self.parked):
            dependency = self.after.get(id(waiting))
            if dependency is None or id(dependency) in self.ended:
                self.parked.remove(waiting)
                self.ready.append(waiting)
        self.cv.notify_all()

    def more(self) -> bool:
        """Whether a pair may still be handed out after those already taken."""
        with self.cv:
            return bool(self.ready or self.parked) or self.building > 0

    def take(self, last_problem: str | None) -> PairRun | None:
        with self.cv:
            while not self.ready and self.building > 0:
                self.cv.wait()
            if not self.ready:
                return None
            same = [r for r in self.ready if r.pair.problem.id == last_problem]
            pick = min(same or self.ready, key=lambda r: self.order[id(r)])
            self.ready.remove(pick)
            return pick

    @property
    def left(self) -> list[PairRun]:
        """What no lane took (every lane died)."""
        with self.cv:
            return self.ready + self.parked


def sized_for_a_gpu(pairs: list[Pair], flop: float = 1e9) -> str:
    """On a CPU run, one line up front naming the problems whose calls declare (floors.yaml) at least
    `flop` of arithmetic: sized for a GPU, seconds a call and minutes a pair on a CPU ('' if none)."""
    heavy: dict[str, float] = {}
    for pair in pairs:
        try:
            declared = problems.declaration(pair.problem.path, pair.problem.sha256) or {}
        except Exception:  # noqa: BLE001 - the run reports a bad declaration itself
            declared = {}
        if float(declared.get("min_flop") or 0) >= flop:
            heavy[pair.problem.id.split("_", 1)[0]] = float(declared["min_flop"])
    if not heavy:
        return ""
    named = ", ".join(f"{k} ({v / 1e9:.0f} GFLOP)" for k, v in sorted(heavy.items(), key=lambda kv: problems.order_key(kv[0])))
    count = sum(1 for pair in pairs if pair.problem.id.split("_", 1)[0] in heavy)
    return (f"cpu: {count} of these pairs are on problems sized for a GPU, {named} a call at least: seconds a call "
            f"here, many minutes a pair, hours in all. Ctrl-C stops the run and prints what is recorded "
            f"(--resume goes on); `--problem elementwise_add --device cpu` is the CPU example")


PAIR_LINES = 4   # a pair that is not ok: its message wrapped over at most this many lines in a terminal


def pair_line(result: EvalResult, done: int, total: int, width: int | None = None) -> str:
    """A finished pair's progress line; with `width` (a terminal) its names short and the line cut
    to fit, except a pair that is not ok, whose message is what to act on: wrapped over at most
    PAIR_LINES lines, and where even that is cut, it says where the whole of it is."""
    problem, solution = result.problem["id"], result.solution["name"]
    if width is not None:
        problem, solution = short_label(problem, 24), short_label(solution, 14)
    line = f"[{done}/{total}] {problem} / {solution}: {_describe(result)}"
    if width is None or len(line) <= width or result.status is Status.OK:
        return shorten(line, width)
    lines = wrap(line, width).split("\n")
    if len(lines) > PAIR_LINES:
        lines = lines[:PAIR_LINES - 1] + [shorten(f"  {lines[PAIR_LINES - 1].strip()}", width - 44)
                                          + " (all of it: --wide, or the result's JSON)"]
    return "\n".join(lines)


def _describe(result: EvalResult) -> str:
    t = result.timing or {}
    parts = [result.status.value]
    if "speedup" in t:
        base = t[t["baseline"]]
        label = baseline_label(t["baseline"], result.precision, (result.env or {}).get("device", "cuda"))
        parts.append(f"{t['solution']['median_ms']:.3f} ms vs {base['median_ms']:.3f} ms "
                     f"ref{f' ({label})' if label else ''} ({speedup_text(t['speedup'], t.get('speedup_ci'))})")
    parts.append(result.message)
    return "  ".join(parts)


def open_lanes(cfg: Config, plan: sandbox.Plan):
    """This host's lanes, or a Ray cluster's (`cluster: ray`); their workers sandboxed as `plan` says."""
    if cfg.cluster == "ray":
        from .cluster import RayLanes
        return RayLanes(cfg, plan)
    return Lanes(cfg, plan)


class CheckoutChanged(RuntimeError):
    """Files the harness runs from changed during the run: its verdicts cannot be trusted."""

    def __init__(self, changed: list[str], results: list[EvalResult]):
        self.changed, self.results = changed, results
        super().__init__(f"harness_error: the checkout changed during the run ({', '.join(changed)}); its results "
                         f"cannot be trusted")


def checkout_files(pairs: list[Pair], cfg: Config) -> list[Path]:
    """What the run's verdicts rest on: the harness, the CLI, the problem files, the config."""
    files = sorted((REPO_ROOT / "harness").rglob("*.py")) + [REPO_ROOT / "run_eval.py"]
    files += sorted({p.problem.path for p in pairs})
    if cfg.source and Path(cfg.source).is_file():
        files.append(Path(cfg.source))
    return files


def digest(files: list[Path]) -> dict[str, str]:
    found = {}
    for path in files:
        try:
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            found[str(path)] = "missing"
    return found


def unchanged_since(pairs: list[Pair], yardsticks: dict[tuple[str, str], tuple[str, str]] | None, cfg: Config,
                    device: str) -> dict[tuple[str, str], tuple[str, str]]:
    """The CI gate's solutions unchanged since the revision (the same sources, helpers included):
    now's key -> then's, whose pair leaves the run; the pair's yardstick worker times its own
    solution as both then and now (harness/run/worker.py run_yardstick)."""
    if not yardsticks or not gate_in_same_rounds(cfg, device):
        return {}
    by_pair = {(p.problem.id, p.solution.name): p for p in pairs}
    unchanged = {}
    for now_key, then_key in yardsticks.items():
        now_pair, then_pair = by_pair.get(now_key), by_pair.get(then_key)
        if now_pair and then_pair and now_pair.solution.sources_sha256 == then_pair.solution.sources_sha256:
            unchanged[now_key] = then_key
    return unchanged


def evaluate(pairs: list[Pair], cfg: Config, *, run_id: str, resume: bool = False,
             out: Callable[[str], None] = print, lanes: Lanes | None = None,
             width: int | None = None, yardsticks: dict[tuple[str, str], tuple[str, str]] | None = None,
             on_result: Callable[[EvalResult], None] | None = None,
             stop: threading.Event | None = None) -> list[EvalResult]:
    """Evaluate the pairs; `lanes`, when given, were started earlier (open_lanes) and are closed here.
    `yardsticks`: (problem id, solution name) of a pair -> that of another pair of the run, the
    same solution at a revision (the CI gate's --baseline-rev): timed in the first's rounds, and
    itself judged for correctness only (harness/run/rounds.py ReferenceRounds); where its sources are
    the first's, it is not run at all (no result): the first's yardstick times its own code as then.
    The checkout's files (checkout_files) are hashed at the start and compared at the end: a change
    raises CheckoutChanged once every result is stored (the run's manifest names the files).
    `on_result` is called with each result once it is stored (a resumed run's recorded ones first),
    from the thread that stored it (harness/cli/batch.py streams them). The run stops within seconds
    when `stop` is set (from another thread) or this thread is interrupted (Ctrl-C, or SIGTERM made
    one): the steps in flight killed, no pair started, nothing recorded of the pairs it cut short
    (what was recorded stays: --resume goes on); an interrupt is raised again, a `stop` raises
    RunStopped."""
    files = checkout_files(pairs, cfg)
    before = digest(files)
    results = _evaluate(pairs, cfg, run_id=run_id, resume=resume, out=out, lanes=lanes, width=width,
                        yardsticks=yardsticks, on_result=on_result or (lambda result: None), stop=stop)
    changed = [name for name, sha in digest(files).items() if sha != before[name]]
    if changed:
        shown = [str(Path(c).relative_to(REPO_ROOT)) if Path(c).is_relative_to(REPO_ROOT) else c for c in changed]
        Store(cfg.results_dir, run_id).write_manifest({"checkout_changed": shown})
        raise CheckoutChanged(shown, results)
    return results


def _evaluate(pairs: list[Pair], cfg: Config, *, run_id: str, resume: bool, out: Callable[[str], None],
              lanes: Lanes | None, width: int | None, yardsticks: dict[tuple[str, str], tuple[str, str]] | None,
              on_result: Callable[[EvalResult], None], stop: threading.Event | None) -> list[EvalResult]:
    allow_steps()
    cache_dir = cache_dir_of(cfg)
    cache_dir.mkdir(parents=True, exist_ok=True)
    # who sandboxed processes run as, and what the host lacks: `required` stops here (SandboxError)
    plan = sandbox.prepare(cfg, sorted({p.solution.path.parent for p in pairs} | {p.problem.path for p in pairs}))
    lanes = lanes or open_lanes(cfg, plan)
    try:
        first = lanes.first
        try:
            info = first.hello()
        except LaneDied as exc:
            raise RuntimeError(f"the evaluation lane could not start: {exc}\n{exc.detail}") from None
        if cfg.device == "cuda" and not info["has_cuda"]:
            raise BadInput("--device", "cuda was requested but this machine has no usable CUDA device")
        # what the lane's first sandboxed worker could not keep (harness/run/lane.py check_sandbox)
        sandbox.check_mode(plan, info.get("sandbox", {}).get("left_out", []), out)
        count = lanes.capacity(info)
        wanted = cfg.gpus or count
        if info["device"] != "cuda" and cfg.gpus > count:
            raise BadInput("--gpus", f"{cfg.gpus} lanes need CUDA devices; this run is on the CPU"
                                     + ("" if count == 1 else f" and {lanes.where} has room for {count} CPU lanes"))
        if wanted > count:
            raise BadInput("--gpus", f"{wanted} GPUs requested, {lanes.where} has {count}"
                                     + (f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']})"
                                        if os.environ.get("CUDA_VISIBLE_DEVICES") and cfg.cluster != "ray" else ""))
        extra = {p.problem.id: problems.extra_shapes_for(p.problem, cfg.correctness.extra_shapes) for p in pairs}
        first.validate(pairs, extra, cfg.source)
        lanes.add(wanted, info)
        with reaping(cfg.cluster != "ray" and cfg.sandbox != "off"):  # orphans of build steps come back here
            return _run(pairs, cfg, run_id, resume, out, info, lanes, cache_dir, extra, plan, width, yardsticks,
                        on_result, stop or threading.Event())
    finally:
        lanes.close()
        close_fork_server()


def announce(out: Callable[[str], None], cfg: Config, info: dict[str, Any], lanes: int, jobs: int,
             runs: list[PairRun], to_build: int, off_device: dict[int, str]) -> None:
    """The run's first line: its pairs, where, its lanes and its builds (and a CPU run's warning
    for problems sized for a GPU)."""
    device = info["device"]
    gpu = f" ({info.get('gpu_name')})" if device == "cuda" else ""
    precision = f" in {cfg.precision}" if cfg.precision != "fp32" else ""
    other = f", {len(off_device)} written for another device (DEVICES)" if off_device else ""
    out(f"{len(runs)} pair(s){precision} on {device}{gpu}: {lanes} lane(s); {to_build} to build with "
        f"{max(1, min(jobs, to_build or 1))} worker(s), {len(runs) - to_build - len(off_device)} already built{other}")
    heavy = sized_for_a_gpu([run.pair for run in runs if id(run) not in off_device]) if device == "cpu" else ""
    if heavy:
        out(heavy)


def pair_yardsticks(runs: list[PairRun], yardsticks: dict[tuple[str, str], tuple[str, str]] | None,
                    unchanged: dict, same_rounds: bool) -> None:
    """The CI gate's --baseline-rev: each pair's yardstick (the same solution then) timed in its
    rounds, or, where then's sources are now's, the pair marked unchanged since then."""
    by_key = {(run.pair.problem.id, run.pair.solution.name): run for run in runs}
    for now_key, then_key in (yardsticks or {}).items():
        if now_key in by_key and then_key in by_key and same_rounds:
            by_key[now_key].yardstick, by_key[then_key].timed = by_key[then_key], False
        elif now_key in by_key and now_key in unchanged:
            by_key[now_key].unchanged_since = unchanged[now_key][1]


def keep_lane_logs(store: Store, lanes: list[LaneProc]) -> None:
    """The lanes' own logs into the run's folder (each pair's worker log tail is in its result)."""
    logs = store.dir / "logs"
    for lane in lanes:
        for log in sorted(lane.work_dir.glob("lane-*.log")):
            logs.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, logs / f"lane{lane.index}-{log.stem.split('-')[-1]}.log")


class RunStopped(Exception):
    """evaluate's `stop` was set: the run ended early (what it recorded is stored)."""


class Halting:
    """The part of a run that can be stopped: its build pool and its lanes' threads. On leaving
    it by an exception (an interrupt in this thread) or once `stopping` is set (by evaluate's
    caller, from another thread), the run halts: no pair recorded or started after that, the
    steps in flight and the lanes killed, the pool's queue dropped."""

    def __init__(self, stopping: threading.Event, pool: ThreadPoolExecutor, lanes: list[LaneProc]):
        self.stopping, self.pool, self.lanes, self.done = stopping, pool, lanes, threading.Event()

    def __enter__(self) -> ThreadPoolExecutor:
        threading.Thread(target=self._watch, daemon=True, name="halting").start()
        return self.pool

    def _watch(self) -> None:
        while not self.done.wait(0.2):
            if self.stopping.is_set():
                self.halt()
                return

    def halt(self) -> None:
        self.stopping.set()
        stop_steps()
        self.pool.shutdown(wait=False, cancel_futures=True)
        for lane in self.lanes:
            lane.kill()

    def __exit__(self, kind, exc, tb) -> None:
        self.done.set()
        stopped = self.stopping.is_set()  # by the caller (not by leaving this on an exception)
        if kind is not None or stopped:
            self.halt()
        self.pool.shutdown(wait=True)
        if self.stopping.is_set():
            allow_steps()  # every step of this run is over: the process's later steps may start
        if stopped and (kind is None or not issubclass(kind, KeyboardInterrupt)):
            raise RunStopped("the run was stopped") from exc


def _run(pairs: list[Pair], cfg: Config, run_id: str, resume: bool, out: Callable[[str], None],
         info: dict[str, Any], fleet, cache_dir: Path, extra: dict[str, list], plan: sandbox.Plan,
         width: int | None, yardsticks: dict[tuple[str, str], tuple[str, str]] | None,
         on_result: Callable[[EvalResult], None], stopping: threading.Event) -> list[EvalResult]:
    device = info["device"]
    lanes = fleet.all
    unchanged = unchanged_since(pairs, yardsticks, cfg, device)
    pairs = [p for p in pairs if (p.problem.id, p.solution.name) not in set(unchanged.values())]
    Path(cfg.results_dir).mkdir(parents=True, exist_ok=True)  # once the run's input is known to be good
    store = Store(cfg.results_dir, run_id)
    base_env = {"git": git_info(), "device": device, **({"gpu_name": info["gpu_name"]} if "gpu_name" in info else {})}
    recorded = [r for r in (store.recorded(p) for p in pairs) if r is not None] if resume else []
    done: dict[str, EvalResult] = {r.key: r for r in recorded}
    pending = [p for p in pairs if pair_key(p.problem.id, p.solution.name) not in done]
    for result in recorded:
        on_result(result)
    secret = cfg.secret_seed if cfg.secret_seed >= 0 else secrets.randbits(31)
    store.write_manifest({"run_id": run_id, "device": device, "arch": info["arch"], "config": cfg.to_dict(),
                          "config_file": cfg.source, "pairs": [f"{p.problem.id}__{p.solution.name}" for p in pairs],
                          "git": base_env["git"], "cluster": cfg.cluster, "lanes": [lane.gpu for lane in lanes],
                          "gpu_names": info.get("gpu_names", [])[:len(lanes)] if device == "cuda" else []})
    if done:
        out(f"resuming {run_id}: {len(done)} pair(s) already recorded, {len(pending)} to run")
    store.write_manifest({"secret_seed": secret})
    jobs = cfg.build.jobs or fleet.build_slots()
    ctx = RunContext(run_id=run_id, cfg=cfg, device=device, arch=info["arch"], cache_dir=cache_dir,
                     work_root=fleet.work / "pairs", secret=secret,
                     build_threads=placement.build_jobs(os.cpu_count() or 1, min(jobs, len(pending)),
                                                        build_stagger(cfg.build.stagger, device, cfg.cluster)),
                     torch_version=info["torch"], env=base_env, extra_shapes=extra, plan=plan.to_dict())
    runs = [PairRun(ctx, p) for p in pending]
    off_device = {id(run): why for run in runs if (why := run.pair.solution.off_device(device))}
    manifests = {id(run): read_manifest(cache_dir, run.pair.solution, ctx.torch_version, ctx.arch, device,
                                        present=fleet.built) for run in runs if id(run) not in off_device}
    to_build = [run for run in runs if id(run) not in off_device and manifests[id(run)] is None]
    if pending:
        announce(out, cfg, info, len(lanes), jobs, runs, len(to_build), off_device)
    progress = Progress(out, len(pending), len(to_build), width=width)
    record = Recorder(store, done, len(pairs), progress, width, on_result, stopping)
    pair_yardsticks(runs, yardsticks, unchanged, gate_in_same_rounds(cfg, device))
    schedule = Schedule({id(r): i for i, r in enumerate(runs)},
                        {id(r): r.yardstick for r in runs if r.yardstick is not None})
    for run in runs:
        place_unbuilt(run, off_device.get(id(run)), manifests.get(id(run)), record, schedule)
    schedule.expect(len(to_build))
    builds = Builds(fleet, to_build, lambda run: manifest_key(run.pair.solution, ctx.torch_version, ctx.arch, device),
                    record, progress, schedule, jobs)
    serve = LaneService(cfg, info, fleet, schedule, record, progress, out, stopping)
    threads = [threading.Thread(target=serve, args=(lane,), daemon=True) for lane in lanes]
    for thread in threads:
        thread.start()
    with Halting(stopping, ThreadPoolExecutor(max_workers=builds.wave), lanes) as pool:
        list(pool.map(builds.build, builds.groups, range(len(builds.groups))))
        for thread in threads:
            thread.join()
    for run in schedule.left:  # every lane died for good
        record(assemble(run.job(), Status.HARNESS_ERROR, "no evaluation lane was left to evaluate this pair",
                        phase="judge", phases={}, gpu_s=0.0, own_s=run.build_s))
    progress.close()
    results = [done[k] for k in sorted(done)]
    store.write_manifest({"summary": summary(results), "lanes_seen": [fleet.describe(lane) for lane in lanes]})
    keep_lane_logs(store, lanes)
    return results


class Recorder:
    """Each result as it comes: stored at once, counted and shown, then handed on (`on_result`);
    nothing of a pair a stop cut short. Called from the build workers and the lanes' threads."""

    def __init__(self, store: Store, done: dict[str, EvalResult], total: int, progress: Progress, width: int | None,
                 on_result: Callable[[EvalResult], None], stopping: threading.Event):
        self.store, self.done, self.total, self.progress, self.width = store, done, total, progress, width
        self.on_result, self.stopping = on_result, stopping
        self.lock = threading.Lock()

    def __call__(self, result: EvalResult) -> None:
        if self.stopping.is_set():  # a pair the stop cut short: nothing of it is recorded
            return
        start = time.monotonic()  # storing costs what serializing costs: measured on a dry run
        json.dumps(result.to_dict(), indent=1, default=str)
        result = with_store_time(result, time.monotonic() - start)
        with self.lock:
            self.store.write(result)
            self.done[result.key] = result
            self.progress.pair_done(pair_line(result, len(self.done), self.total, self.width), result.status.value)
        self.on_result(result)


def place_unbuilt(run: PairRun, off_device: str | None, manifest: dict[str, Any] | None, record: Recorder,
                  schedule: Schedule) -> None:
    """A pair that needs no build step: skipped (written for another device, or its cached build
    skipped), or queued for the lanes with what its cached build holds. Others wait for theirs."""
    if off_device:  # the file declares other DEVICES: skipped, nothing of it run
        record(assemble(run.job(), Status.SKIPPED, off_device, phase="build", phases={}, gpu_s=0.0, own_s=0.0))
        schedule.put(run, ok=False)
        return
    if manifest is not None:
        run.extensions = manifest.get("extensions", [])
    if manifest is not None and manifest.get("skipped"):
        record(assemble(run.job(), Status.SKIPPED, manifest["skipped"], phase="build", phases={}, gpu_s=0.0,
                        own_s=0.0))
        schedule.put(run, ok=False)
    elif manifest is not None:
        run.build_ok = True
        schedule.put(run)


class Builds:
    """The build steps of the pairs to build. Identical sources (the same manifest key) build once:
    the first pair's build step runs, the others take what it built. Where it fails, each runs its
    own (its messages name its own file)."""

    def __init__(self, fleet, runs: list[PairRun], key_of: Callable[[PairRun], str], record: Recorder,
                 progress: Progress, schedule: Schedule, jobs: int = 1):
        self.fleet, self.record, self.progress, self.schedule = fleet, record, progress, schedule
        same: dict[str, list[PairRun]] = {}
        for run in runs:
            same.setdefault(key_of(run), []).append(run)
        self.groups = list(same.values())  # each led by its first pair, in the schedule's order
        self.wave = max(1, min(jobs, len(self.groups)))   # built at once: the build pool's size (and build.stagger's)

    def build_one(self, run: PairRun, rank: int) -> EvalResult | None:
        try:
            result = self.fleet.build(run, rank, self.wave)
        except Exception as exc:  # noqa: BLE001 - a harness failure ends this pair, not the run
            result = assemble(run.job(), Status.HARNESS_ERROR, f"the build step failed: {exc}", phase="build",
                              phases={}, gpu_s=0.0, own_s=run.build_s)
        self.progress.build_done()
        if result is not None:
            self.record(result)
        run.build_ok = result is None
        self.schedule.built(run, run.build_ok)
        return result

    def build(self, group: list[PairRun], rank: int = 0) -> None:
        """The group's build; `rank`: its place among the groups (build.stagger)."""
        leader = group[0]
        result = self.build_one(leader, rank)
        for run in group[1:]:
            if result is None:
                run.extensions, run.build_ok = leader.extensions, True
                self.progress.build_done()
                self.schedule.built(run, True)
            elif result.status is Status.SKIPPED:  # e.g. CUDA sources on a CPU run: so are these
                self.progress.build_done()
                self.record(assemble(run.job(), Status.SKIPPED, result.message, phase="build", phases={}, gpu_s=0.0,
                                     own_s=0.0))
                self.schedule.built(run, False)
            else:
                self.build_one(run, rank)


class LaneService:
    """One thread per lane (called with the lane): start it where it is not running, then give it
    the schedule's pairs until none is left. A pair whose lane died goes back to the schedule once;
    a second death is its result (crashed), and the lane is started again."""

    def __init__(self, cfg: Config, info: dict[str, Any], fleet, schedule: Schedule, record: Recorder,
                 progress: Progress, out: Callable[[str], None], stopping: threading.Event):
        self.cfg, self.info, self.fleet, self.schedule, self.record = cfg, info, fleet, schedule, record
        self.progress, self.out, self.stopping = progress, out, stopping
        self.backstop = cfg.timeouts.build_s + cfg.timeouts.run_s + cfg.timeouts.judge_s + 120.0

    def __call__(self, lane: LaneProc) -> None:
        if lane.proc is None and not self._start(lane):
            return
        last = None
        while True:
            run = self.schedule.take(last)
            if run is None:
                return
            last = run.pair.problem.id
            run.attempts += 1
            job = {**run.job(), "more": self.schedule.more(), "artifacts": self.fleet.artifacts(run)}
            started = time.monotonic()
            try:
                result = EvalResult.from_dict(lane.run(job, self.backstop))
            except LaneDied as exc:
                if self.stopping.is_set() or not self._died(lane, run, job, exc, started):
                    return
                continue
            self.record(result)

    def _start(self, lane: LaneProc) -> bool:
        """A lane not started yet: started, its sandbox compared with the first lane's. False where
        it cannot serve (it did not start, or `sandbox: required` and it left out a part)."""
        try:
            lane.start()
        except LaneDied as exc:
            self.out(f"warning: {exc}; the other lanes go on")
            return False
        left_out = lane.info.get("sandbox", {}).get("left_out", [])
        if left_out != self.info.get("sandbox", {}).get("left_out", []):
            if self.cfg.sandbox == "required":
                self.progress.line(f"warning: lane {lane.index}: sandbox: required, and {'; '.join(left_out)}; "
                                   f"the other lanes go on")
                lane.stop()
                return False
            self.progress.line(f"warning: lane {lane.index}: sandbox: auto; running without {'; '.join(left_out)}")
        return True

    def _died(self, lane: LaneProc, run: PairRun, job: dict[str, Any], exc: LaneDied, started: float) -> bool:
        """The lane died evaluating `run`: the pair back to the schedule (the first time) or recorded
        as crashed, and the lane started again; False where it would not start."""
        self.progress.line(f"warning: {exc} while evaluating {run.pair.problem.id} / {run.pair.solution.name}")
        if run.attempts < 2:
            self.schedule.put(run)
        else:
            job.pop("artifacts", None)
            self.record(assemble(job, Status.CRASHED, f"the lane evaluating this pair died twice: {exc}", exc.detail,
                                 phase="judge", phases={"build_s": run.build_s}, gpu_s=0.0,
                                 own_s=run.build_s + time.monotonic() - started))
        try:
            lane.start()
        except LaneDied as again:
            self.progress.line(f"warning: {again}; the other lanes go on")
            return False
        return True
