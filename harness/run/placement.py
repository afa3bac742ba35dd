"""Where a pair's timed processes run on the host's CPUs: both on one CPU, the lane's timing CPU.

A CPU of these hosts (virtual machines) works at one of two speeds for stretches of seconds:
pure-Python work and CUDA launches alike take 7 or 10 ms on one CPU and, at the same moment,
the other on another (H200, `tools/probe_launch.py`, docs/harness-perf.md). A launch-bound call
is timed by the host's launch path, so a reference worker and a solution worker on two
different CPUs measured 0.71-1.38x apart for identical work, and alternating rounds do not
cancel an offset that lies between two CPUs. Both on the same CPU, taking turns (the other is
stopped), they see its speed alike: 0.96-1.00x in the same probe.

So while a pair is timed the lane pins every thread of both workers to its timing CPU
(`timing_cpus`), before each block, and restores them to the lane's own CPUs afterwards. The
worker cannot move itself back out (the sandbox's seccomp filter refuses sched_setaffinity,
harness/isolate/jail.py); the lane still reads every thread's CPUs after each block and a thread found
elsewhere is recorded (`strays`) and judged by `checks.placement`.

Each lane claims its timing CPU on the whole host (`claim`: an exclusive flock on a file of
that CPU's, /tmp/kb-timing-cpu-N.lock, held for the lane process's life), so that harness runs
started side by side on one host, one per GPU (CUDA_VISIBLE_DEVICES=i python run_eval.py ...),
do not all take the top CPU: four such runs on one host, each its lane 0, pinned every timed
worker to one CPU, and a launch-bound pair's blocks there jumped between 0.08 and 0.14 ms as the
others' blocks came and went (902 / fast on a 4-GPU H200 host, docs/harness-perf.md).

Workers also start without address-space randomization (`fixed_layout`): with it, two fresh
processes on one CPU still launched the same work up to 5% apart for their whole lives (where
their memory landed), and without it 1-3% (H200, tools/probe_launch.py `same:3` against
`same:3+noaslr`; A/A runs in docs/harness-perf.md). It protects nothing in a worker: the code
that runs there is the solution's own.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import sys
import tempfile
from contextlib import contextmanager

ADDR_NO_RANDOMIZE = 0x0040000
_QUERY = 0xFFFFFFFF   # personality(0xffffffff) returns the persona and changes nothing


def _personality(persona: int) -> int:
    return ctypes.CDLL(None, use_errno=True).personality(ctypes.c_ulong(persona))


@contextmanager
def fixed_layout():
    """Processes started inside this block (by this thread: a persona is a thread's, and a child
    inherits its parent's through fork and exec) start without address-space randomization."""
    if sys.platform != "linux":
        yield
        return
    before = _personality(_QUERY)
    changed = before >= 0 and _personality(before | ADDR_NO_RANDOMIZE) >= 0
    try:
        yield
    finally:
        if changed:
            _personality(before)


def allowed() -> frozenset[int]:
    """The CPUs this process may run on."""
    return frozenset(os.sched_getaffinity(0))


def timing_cpus(setting: str, device: str, lane_index: int, cpus: frozenset[int] | None = None) -> frozenset[int] | None:
    """The lane's timing CPU, or None where the timed processes are not pinned: `setting`
    (timing.pin_cpu) off; auto on a CPU lane (its workers' torch uses several CPUs, which one
    CPU would change); or a lane that may use fewer than 2 CPUs. Lane i takes the i-th CPU from the
    top of what it may use, so that lanes of one run do not share one, or where another lane on the
    host (of this run or another) has claimed that CPU the next one down that none has (`claim`)."""
    cpus = allowed() if cpus is None else cpus
    return frozenset({claim(sorted(cpus), lane_index)}) if pins(setting, device, cpus) else None


def pins(setting: str, device: str, cpus: frozenset[int]) -> bool:
    """Whether a lane that may use `cpus` pins its timed workers (timing.pin_cpu `setting`)."""
    return not (setting == "off" or (setting == "auto" and device != "cuda") or len(cpus) < 2)


def build_cpus(setting: str, pin_cpu: str, device: str, lanes: int, cpus: frozenset[int] | None = None) -> frozenset[int] | None:
    """The CPUs a run's builds may use where its lanes pin their timed workers (`timing_cpus`):
    all but the top `lanes` (where each lane looks first for its timing CPU) and any CPU another
    lane on the host has claimed; None (anywhere) where no lane pins, `setting`
    (build.yield_to_lanes) is off, or nothing would be left.
    (The builds also run at a lower priority there: harness/run/laneproc.py Lanes.build.)
    A compile beside a timed block on its CPU takes turns with it: with 24 build workers on a
    16-core H200 host, a correct 0.085 ms kernel's timed blocks were slowed past what the lane's
    clock allows (docs/harness-perf.md, "More build workers than cores")."""
    cpus = allowed() if cpus is None else cpus
    if setting == "off" or lanes < 1:
        return None
    ordered = sorted(cpus)
    if not pins(pin_cpu, device, cpus) or lanes >= len(ordered):
        return None
    flocked = _flocked()   # read once for every CPU
    left = frozenset(cpu for cpu in ordered[:-lanes] if not _claimed(cpu, flocked))
    return left or None


STAGGER_LOW, STAGGER_HIGH = 10, 19   # build.stagger: the first build's compilers, and the last's


def build_nice(rank: int, wave: int) -> int:
    """The nice of the build `rank` places in its run's schedule (0 first) when the run builds `wave`
    at once (build.stagger): from 10 for the first to 19 for the wave's last and any later, so that
    where the builds outnumber the cores the first pairs' builds take the larger share and finish
    first, and the lane, which waits for its first built pair, starts sooner (with every build at one
    priority, the first wave shares the cores and finishes together: docs/harness-perf.md). The
    compilers keep it (the compile step adds none where the run staggers). Never below 10: the
    lanes' own work still preempts every build."""
    span = STAGGER_HIGH - STAGGER_LOW
    return STAGGER_LOW + min(span, rank * span // max(1, wave - 1)) if wave > 1 else STAGGER_LOW


def build_jobs(cores: int, builders: int, stagger: bool) -> int:
    """Each build's MAX_JOBS (how many of a recipe's compiles, main.cpp and cuda.cu, run at once):
    the host's cores shared among the builds that run at once; with build.stagger at least 2, so that
    a recipe's two compiles run side by side and the first builds, at their higher priority, finish
    in the longer compile's time rather than in both's (on an H100 host, 15 builds on 16 cores at one
    job each: every build's wall its CPU-s, the first's 34 s; docs/harness-perf.md). The cores stay
    shared by priority, not by this count."""
    share = max(1, cores // max(1, builders))
    return max(2, share) if stagger else share


def claimed(cpu: int) -> bool:
    """Whether a lane on this host holds CPU `cpu` as its timing CPU: its lock file flocked, as
    /proc/locks lists it (read, not tried: a flock taken to look would turn a lane claiming that
    CPU at the same moment away)."""
    return _claimed(cpu, _flocked())


def _flocked() -> set[str]:
    """The inodes (as /proc/locks writes them) of the files flocked on this host."""
    try:
        with open("/proc/locks") as locks:
            text = locks.read()
    except OSError:
        return set()
    fields = [line.split() for line in text.splitlines()]
    return {next((f for f in row if f.count(":") == 2), "").rsplit(":", 1)[-1] for row in fields if "FLOCK" in row}


def _claimed(cpu: int, flocked: set[str]) -> bool:
    if any(held == cpu for held, _ in _held.values()):
        return True
    try:
        return str(os.stat(_lock_path(cpu)).st_ino) in flocked
    except OSError:
        return False


def _lock_path(cpu: int) -> str:
    return os.path.join(LOCK_DIR, f"kb-timing-cpu-{cpu}.lock")


LOCK_DIR = tempfile.gettempdir()
_held: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}   # (lane, CPUs) -> (its CPU, the lock's fd)


def _lock(cpu: int) -> int | None:
    """An exclusive flock on CPU `cpu`'s lock file, the fd holding it; None where another process
    (or another lane of this one) holds it, or the file cannot be opened (another user's, say)."""
    path = _lock_path(cpu)
    try:  # an existing file is opened without O_CREAT (fs.protected_regular refuses that for another user's)
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return _lock(cpu)
        except OSError:
            return None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def claim(ordered: list[int], lane_index: int) -> int:
    """Lane `lane_index`'s timing CPU of the CPUs `ordered` (sorted): the i-th from the top, or
    going down from there the first that no other lane on the host has claimed; held (its flock)
    until this process ends, and the same CPU returned to every later call. Where every one is
    claimed (more lanes than CPUs), the i-th from the top, shared."""
    key = (lane_index, tuple(ordered))
    if key in _held:
        return _held[key][0]
    n = len(ordered)
    for k in range(n):
        cpu = ordered[-1 - (lane_index + k) % n]
        fd = _lock(cpu)
        if fd is not None:
            _held[key] = (cpu, fd)
            return cpu
    return ordered[-1 - lane_index % n]


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def pin(pid: int, cpus: frozenset[int]) -> int:
    """Every thread of `pid` onto `cpus` (a thread created later inherits its creator's CPUs).
    Returns how many threads were pinned; a thread that exits meanwhile is passed over."""
    n = 0
    for tid in _threads(pid):
        try:
            os.sched_setaffinity(tid, cpus)
            n += 1
        except OSError:
            pass
    return n


def strays(pid: int, cpus: frozenset[int]) -> list[int]:
    """The threads of `pid` that may run outside `cpus`."""
    out = []
    for tid in _threads(pid):
        try:
            if not os.sched_getaffinity(tid) <= cpus:
                out.append(tid)
        except OSError:
            pass
    return out


class TimedWorker:
    """A pair's solution worker on the timing CPUs `cpus` (None: not pinned) while it times, and
    back on the lane's `home` CPUs after, counting the blocks after which a thread of it was found
    elsewhere (`strays`)."""

    def __init__(self, cpus: frozenset[int] | None, home: frozenset[int]):
        self.cpus, self.home = cpus, home
        self.strays = 0
        self.placed = False

    def place(self, pid: int) -> None:
        """Before a block of worker `pid`: what ran since its last block off the timing CPU is
        counted, then every thread of it pinned there (new threads too)."""
        if self.cpus is None:
            return
        if self.placed and strays(pid, self.cpus):
            self.strays += 1
        pin(pid, self.cpus)
        self.placed = True

    def unplace(self, pid: int) -> None:
        """Its timing done: its last block checked, the worker back on the lane's CPUs."""
        if not self.placed:
            return
        if strays(pid, self.cpus):
            self.strays += 1
        pin(pid, self.home)
        self.placed = False
