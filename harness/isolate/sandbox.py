"""The sandbox around every process that runs solution code: the build step (a solution's module
runs load_inline at import), the compile step (the compiler, run on a solution's sources and flags)
and the evaluation worker (harness/run/worker.py), local and on Ray.

Inside, a solution sees the system and the checkout read-only; it writes only to its own scratch
folder (its working directory, TMPDIR and HOME); it cannot read or write the results, the build
cache (a worker gets copies of its own libraries in its scratch), other pairs' scratch or the
harness's state. It cannot signal, trace or read the memory of any process outside its own
sandbox, has no network, does not run as root, and runs under resource limits. Everything it
starts is killed after its pair: the lane and the runner are child subreapers, so orphans (a
double fork, setsid) come back to them (reap_strays).

This module is the parent's side: what the host offers (`probe`), the run's plan (`prepare`,
`check_mode`), each process's policy (`policy`, `template`) and how it is started (`launch`).
The child's side, applied by the process itself before anything of the solution's runs, is
harness/isolate/jail.py. The mechanisms (docs/evaluation.md, Sandbox), each the kernel's own:
  - an unprivileged identity: a harness running as root starts each sandboxed process as a uid
    and gid of its own (UID_BASE + n: no capabilities, no supplementary groups), so that what
    only root may do (write /proc/sys or /proc/sysrq-trigger, lower an oom_score_adj, write
    root's files) is refused whatever else allows it, and RLIMIT_NPROC binds (it never binds
    root; one uid per process, so that one process's children never count against another's);
  - a network namespace of its own (no network, loopback down), by util-linux's `unshare`: root
    makes it before it drops to the identity (`--net --setgid --setuid`); a harness that is not
    root makes a user namespace for it (`--user --map-current-user --net`);
  - Landlock (ABI 1+ files, 4+ TCP bind/connect, 6+ signal and abstract-socket scoping); on CUDA
    runs writes beneath the process's own /proc/<pid>/task, where CUDA names its threads;
  - setrlimit for processes, open files, file size, core files and (CPU runs) address space;
  - PR_SET_CHILD_SUBREAPER in the lane and the runner.
`sandbox: auto` uses what the host offers and warns once about the rest; `required` refuses to
run without all of it; `off` runs solution code as before (debugging). On CUDA runs the lane
starts one sandboxed worker the way a pair does before its first pair (harness/run/lane.py
check_sandbox): what CUDA cannot work with is found there, once, not pair by pair.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import importlib.util
import itertools
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .. import REPO_ROOT

MODES = ("auto", "required", "off")
# A CPU run's memory, split so that its lane and a worker together never reach the OOM killer
# (which took the lane: every pair of its problem then a crash, minutes later): an allocation
# past its share fails where it is made, and says so (address-space limits, RLIMIT_AS).
LANE_MEMORY_SHARE, WORKER_MEMORY_SHARE = 0.5, 0.4


def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def allocation_failed(exc: BaseException) -> bool:
    """Whether `exc` is an allocation that failed (on the CPU: torch's 'can't allocate memory')."""
    text = str(exc)
    return isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" \
        or "can't allocate memory" in text or "out of memory" in text.lower()
UID_BASE, UID_SPAN = 0x6B000000, 1 << 24      # the sandboxed processes' uids (and gids): UID_BASE + n
_SYS_LANDLOCK_CREATE_RULESET, _LANDLOCK_CREATE_RULESET_VERSION = 444, 1
_PR_SET_CHILD_SUBREAPER = 36
PIDS_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")


class SandboxError(RuntimeError):
    """The sandbox could not be applied where the run requires it."""


@functools.lru_cache(maxsize=None)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, too old, disabled)."""
    if sys.platform != "linux":
        return 0
    try:
        version = _libc().syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _runs(command: list[str]) -> bool:
    try:
        return subprocess.run([*command, sys.executable, "-I", "-S", "-c", "pass"], capture_output=True,
                              timeout=20, cwd="/").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@dataclass(frozen=True)
class Host:
    """What this host offers a sandbox (probed once per process)."""
    landlock: int                       # ABI version, 0 = none
    unshare: str | None = None          # util-linux's unshare
    netns: bool = False                 # a network namespace can be made for a sandboxed process
    root: bool = False                  # this process runs as the host's root

    def lacks(self) -> list[str]:
        """What a full sandbox needs and this host lacks, in words (the identity: Plan)."""
        lacks = []
        if self.landlock < 1:
            lacks.append("Landlock (files: the solution could write the checkout and read the results)")
        elif self.landlock < 6:
            lacks.append(f"Landlock ABI 6 (this kernel has {self.landlock}: "
                         + ("no TCP rules, " if self.landlock < 4 else "") + "no signal scoping)")
        if not self.netns:
            lacks.append("a network namespace (" + ("util-linux's unshare is not installed" if not self.unshare
                                                    else "this host refuses one") + ": the network stays reachable)")
        if sys.platform != "linux":
            lacks.append("Linux (no subreaper, no rlimits)")
        return lacks


@functools.lru_cache(maxsize=None)
def probe() -> Host:
    tool = shutil.which("unshare") if sys.platform == "linux" else None
    root = sys.platform == "linux" and os.geteuid() == 0
    netns = bool(tool) and _runs([tool, "--net", "--"] if root else [tool, "--user", "--map-current-user", "--net", "--"])
    return Host(landlock=landlock_abi(), unshare=tool, netns=netns, root=root)


# ----------------------------------------------------------------------------------------------
# The run's plan: its mode, its limits, and who its sandboxed processes run as

_NEXT_UID = itertools.count(secrets.randbelow(UID_SPAN))
_UID_LOCK = threading.Lock()


def next_uid() -> int:
    """A uid (and gid) for one sandboxed process: UID_BASE + n, n from a random start, counting up."""
    with _UID_LOCK:
        return UID_BASE + next(_NEXT_UID) % UID_SPAN


def needed_paths(extra: Iterable[Path | str] = ()) -> list[str]:
    """What a sandboxed process must read: the interpreter's library, torch, the checkout, `extra`."""
    paths = [sys.executable, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], str(REPO_ROOT)]
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        paths.append(str(Path(spec.origin).parent))
    return list(dict.fromkeys([*paths, *(str(p) for p in extra)]))


_READ_CHECK = ("import os, sys\n"
               "print('\\n'.join(p for p in sys.argv[1:] if not os.access(p, os.R_OK | (os.X_OK if os.path.isdir(p) else 0))))")


def closed_folder(path: str | Path) -> str:
    """The first folder on the way to `path` (as given, and where its links lead) that others may not
    pass (no x bit for others), with what opens it, for a message; '' where there is none."""
    for target in dict.fromkeys([str(Path(path).absolute()), os.path.realpath(path)]):
        folder = Path("/")
        for part in Path(target).parts[1:-1]:
            folder = folder / part
            try:
                mode = folder.stat().st_mode
            except OSError:
                break
            if not mode & stat.S_IXOTH:
                return (f"{folder} is closed to others (mode {stat.S_IMODE(mode):o}): `chmod o+x {folder}` lets "
                        f"them pass through it (not list it), or put Python and the checkout outside it")
    return ""


def can_run_as(uid: int, gid: int, paths: Iterable[str]) -> str:
    """'' when `uid` can run this interpreter and read `paths`; else what stands in the way, naming
    the folder closed to others where one is."""
    paths = list(paths)
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", _READ_CHECK, *paths], user=uid, group=gid,
                              extra_groups=[], capture_output=True, text=True, timeout=30, cwd="/")
    except OSError as exc:
        why = closed_folder(sys.executable) or "a folder on its way is closed to others"
        return f"uid {uid} cannot run {sys.executable} ({exc.strerror}: {why})"
    except subprocess.SubprocessError as exc:
        return f"uid {uid} could not be tried ({exc})"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        why = closed_folder(sys.executable)
        return f"uid {uid} cannot run {sys.executable} ({last}{'; ' + why if why else ''})"
    bad = [line for line in proc.stdout.splitlines() if line]
    if bad:
        return (f"uid {uid} cannot read {bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                + f": {closed_folder(bad[0]) or 'a folder on its way is closed to others'}")
    return ""


def parse_user(spec: str) -> tuple[int, int] | None:
    """limits.user's 'UID' or 'UID:GID' as numbers; None for 'auto' and 'same'."""
    if spec in ("auto", "same"):
        return None
    uid, _, gid = spec.partition(":")
    return int(uid), int(gid or uid)


@dataclass(frozen=True)
class Plan:
    """What the run's sandboxed processes get, decided once at its start (plain data for policies).
    identity: "per-process" (a uid of its own each), "UID:GID" (one for all), or "same" (the
    harness's own: it is not root, or the identity could not be had: `lacks` says why)."""
    mode: str
    limits: dict[str, Any]
    identity: str = "same"
    lacks: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "limits": dict(self.limits), "identity": self.identity, "lacks": list(self.lacks)}


def prepare(cfg: Any, extra: Iterable[Path | str] = ()) -> Plan:
    """The run's plan from its Config: where the harness runs as root, whether an unprivileged
    identity can run this interpreter and read what a pair needs (`extra`: the pairs' files).
    `required` on a host that lacks a part: SandboxError, before anything is started."""
    limits = dict(vars(cfg.limits))
    if cfg.sandbox == "off":
        return Plan("off", limits)
    host = probe()
    lacks = host.lacks()
    spec = limits.get("user", "auto")
    identity = "same"
    if host.root and spec != "same":
        fixed = parse_user(spec)
        uid, gid = fixed or (next_uid(),) * 2
        problem = can_run_as(uid, gid, needed_paths(extra))
        if problem:
            lacks.append(f"an unprivileged identity ({problem}; sandboxed processes run as root, where "
                         f"limits.processes binds only through a pids cgroup; set limits.user: same to accept it)")
        else:
            identity = spec if fixed else "per-process"
    elif host.root:
        lacks.append("an unprivileged identity (limits.user: same, and this harness runs as root)")
    if lacks and cfg.sandbox == "required":
        raise SandboxError("sandbox: required, and this host lacks " + "; ".join(lacks))
    return Plan(cfg.sandbox, limits, identity, tuple(lacks))


def check_mode(plan: Plan, left_out: Iterable[str], warn) -> None:
    """At run start, once the lane has tried the sandbox (`left_out`: what its probe could not
    keep, in words): `required` with anything left out is a SandboxError; `auto` warns in one line
    naming what it runs without."""
    if plan.mode == "off":
        return
    lacks = [*plan.lacks, *left_out]
    if left_out and plan.mode == "required":
        raise SandboxError("sandbox: required, and " + "; ".join(left_out))
    if lacks:
        warn("warning: sandbox: auto; running without " + "; ".join(lacks))


def policy(plan: dict[str, Any], device: str, *, scratch: Path, hidden: Iterable[Path | str],
           readable: Iterable[Path | str] = (), writable: Iterable[Path | str] = (),
           leave_out: Iterable[str] = ()) -> dict[str, Any]:
    """What one sandboxed process may do and who it runs as (plain data: it crosses to the child
    in its environment). `plan`: Plan.to_dict(). `hidden` folders are neither read nor written (the
    results, the harness's work folders, the build cache); `readable` files or folders inside them
    are read (the solution's own files); `scratch` and `writable` are read and written.
    `leave_out`: parts a lane's probe found CUDA cannot work with ("identity", "landlock")."""
    left = set(leave_out)
    identity = "same" if "identity" in left else plan.get("identity", "same")
    uid = gid = None
    if identity == "per-process":
        uid = gid = next_uid()
    elif identity != "same":
        uid, gid = parse_user(identity)
    return {"mode": plan["mode"], "device": device, "scratch": str(scratch), "limits": dict(plan["limits"]),
            "uid": uid, "gid": gid, "landlock": "landlock" not in left,
            "hidden": sorted({str(Path(p).resolve()) for p in hidden}),
            "readable": sorted({str(Path(p).resolve()) for p in readable}),
            "writable": sorted({str(Path(p).resolve()) for p in writable})}


def readable_cover(hidden: list[str]) -> tuple[list[str], list[str]]:
    """(folders and files read in full, folders on the way to a hidden one): everything under /
    except the hidden folders, the child's Landlock rules (harness/isolate/jail.py). A folder on the way
    is listed (READ_DIR, which Landlock grants to the whole tree below it: file names there are
    visible, contents are not). Made by the parent, which can list folders the child's identity
    may only pass through (a root 0711 home holding the build cache)."""
    hidden_set = {h.rstrip("/") or "/" for h in hidden}
    full, partial = [], []

    def walk(folder: str) -> None:
        partial.append(folder)
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            path = os.path.join(folder, name)
            if path in hidden_set:
                continue
            if os.path.islink(path):  # a rule follows it: none where it leads into or above a hidden folder
                target = os.path.realpath(path)
                if any(target == h or target.startswith(h + "/") or h.startswith(target.rstrip("/") + "/")
                       for h in hidden_set):
                    continue
            if any(h.startswith(path + "/") for h in hidden_set) and os.path.isdir(path) and not os.path.islink(path):
                walk(path)
            else:
                full.append(path)

    if "/" in hidden_set:
        return [], []
    walk("/")
    return full, partial


def template(plan: Plan, hidden: Iterable[Path | str]) -> dict[str, Any] | None:
    """A lane's workers' sandbox but for each one's scratch and device (harness/run/pool.py, lane.py):
    plain data. None when the run's sandbox is off."""
    if plan.mode == "off":
        return None
    return {"plan": plan.to_dict(), "hidden": [str(Path(p).resolve()) for p in hidden]}


@dataclass(frozen=True)
class Launch:
    """How to start a sandboxed child: a prefix to its command, its environment, Popen's extras."""
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    popen: dict[str, Any] = field(default_factory=dict)
    # the same start in parts, for a forked child that makes it itself (harness/isolate/forkserver.py):
    # uid and gid (None: the harness's own), net (a network namespace of its own), userns (made in a
    # user namespace mapping the current user, as a harness that is not root does)
    identity: dict[str, Any] = field(default_factory=dict)


def launch(pol: dict[str, Any] | None) -> Launch:
    """The child's start: its network namespace and identity (`unshare`, or Popen's user/group
    where unshare is missing), its scratch made and given to it, the policy in its environment
    (harness/isolate/jail.py reads it) with what the start itself applied."""
    import json
    if not pol or pol["mode"] == "off":
        return Launch()
    host = probe()
    net = host.netns and not pol["limits"].get("network")
    uid, gid = pol.get("uid"), pol.get("gid")
    prefix, extra, applied = [], {}, []
    if uid is not None and host.unshare:
        prefix = [host.unshare, *(["--net"] if net else []), "--setgid", str(gid), "--setuid", str(uid), "--"]
    elif uid is not None:
        extra = {"user": uid, "group": gid, "extra_groups": []}
    elif net:
        prefix = [host.unshare, "--user", "--map-current-user", "--net", "--"]
    if net:
        applied.append("network namespace")
    identity = {"uid": uid, "gid": gid, "net": bool(net), "userns": uid is None and bool(net)}
    scratch = Path(pol["scratch"])
    scratch.mkdir(parents=True, exist_ok=True)
    if uid is not None:
        os.chown(scratch, uid, gid)
        os.chmod(scratch, 0o700)
        _open_the_way(scratch)
    env = {"TMPDIR": str(scratch), "TEMP": str(scratch), "TMP": str(scratch), "HOME": str(scratch),
           "XDG_CACHE_HOME": f"{scratch}/.cache", "TRITON_CACHE_DIR": f"{scratch}/.triton",
           "CUDA_CACHE_PATH": f"{scratch}/.nv", "KB_SANDBOX": "1",
           "KB_SANDBOX_POLICY": json.dumps({**pol, "applied": applied, "cover": readable_cover(pol["hidden"])})}
    if uid is not None:  # getpass and friends ask the environment before the password file
        env.update(USER="kb-sandbox", LOGNAME="kb-sandbox")
    return Launch(prefix, env, extra, identity)


def _open_the_way(path: Path) -> None:
    """The folders from a harness work folder (work_folder: named kb-*) down to a scratch let
    others pass (not list), whatever the umask made them; nothing above that folder is touched."""
    chain = list(path.parents)
    top = next((i for i, folder in enumerate(chain) if folder.name.startswith("kb-")), None)
    for folder in chain[:top + 1] if top is not None else []:
        try:
            info = folder.stat()
            if info.st_uid == os.geteuid() and not info.st_mode & 0o001:
                os.chmod(folder, (info.st_mode & 0o7777) | 0o001)
        except OSError:
            continue


def work_folder(prefix: str) -> Path:
    """A temporary work folder of the harness's (lanes, pairs, scratch below): closed to listing,
    open to passing, so that a sandboxed process of another uid reaches its own scratch inside."""
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(folder, 0o711)
    return folder


def process_limit_binds(plan: Plan | None = None) -> bool:
    """Whether limits.processes can hold here: RLIMIT_NPROC for a user other than root (the
    harness's own, or the plan's unprivileged identity), a pids cgroup (writable) for root."""
    if os.getuid() != 0 or (plan is not None and plan.identity != "same"):
        return True
    return any(os.access(base, os.W_OK) for base in pids_hierarchies())


def pids_hierarchies() -> list[Path]:
    """Cgroup folders whose children can limit tasks: cgroup v1's pids hierarchy, or v2's root
    where the pids controller is enabled for its children."""
    found = []
    for root in PIDS_ROOTS:
        base = Path(root)
        if not (base / "cgroup.procs").exists():
            continue
        if (base / "cgroup.controllers").exists() and "pids" not in (base / "cgroup.subtree_control").read_text():
            continue
        found.append(base)
    return found


def release_cgroup(pid: int) -> None:
    """After a sandboxed process ended (its pair is over): kill what is left in its pids cgroup
    and remove the cgroup."""
    for root in PIDS_ROOTS:
        mine = Path(root) / "kb-sandbox" / str(pid)
        if not mine.is_dir():
            continue
        for _ in range(50):
            try:
                left = [int(p) for p in (mine / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not left:
                break
            for task in left:
                try:
                    os.kill(task, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        try:
            mine.rmdir()
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------
# In the lane and the runner: orphans come back, and are killed

def become_subreaper(on: bool = True) -> bool:
    if sys.platform != "linux":
        return False
    try:
        return _libc().prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children(parent: int | None = None) -> list[int]:
    """Process ids whose parent is `parent` (this process by default)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in Path("/proc").iterdir() if sys.platform == "linux" else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


def limit_message(exc: BaseException, limits: dict[str, Any] | None) -> str | None:
    """The limit an error ran into, in words naming its config key; None where it is no limit's."""
    if not limits or not isinstance(exc, OSError):
        return None
    if exc.errno == errno.EFBIG:
        return f"a file past the size limit (limits.file_size_mb = {limits['file_size_mb']})"
    if exc.errno == errno.EMFILE:
        return f"more open files than the limit (limits.open_files = {limits['open_files']})"
    if exc.errno == errno.EAGAIN:
        return f"more processes than the limit (limits.processes = {limits['processes']})"
    return None
