"""The sandbox around every process that runs solution code: the build step (a solution's module
runs load_inline at import) and the evaluation worker (harness/worker.py), local and on Ray.

Inside, a solution sees the system and the checkout read-only; it writes only to its own scratch
folder (its working directory and TMPDIR; a build step also to its private build folder, which
the runner moves into the build cache once the step has ended); it cannot read or write the
results, the build cache (a worker gets copies of its own libraries in its scratch), other pairs'
scratch or the harness's state. It cannot signal, trace or read the memory of any process outside
its own sandbox, has no network, and runs under resource limits. Everything it starts is killed
after its pair: the lane and the runner are child subreapers, so orphans (a double fork, setsid)
come back to them (reap_strays).

Mechanisms, chosen because they are the kernel's own and need no privilege (docs/evaluation.md, Sandbox):
  - Landlock (ABI 1+ files, 4+ TCP bind/connect, 6+ signal and abstract-socket scoping), applied
    by the process itself before it imports anything of the solution's (`enter`, called by
    harness/jail.py before torch is imported: Landlock binds the calling thread and the threads
    it starts later, so it must come while the process has one thread);
  - user and network namespaces by util-linux's `unshare` in front of the command (no network,
    loopback included; no capability on the host, which also makes the process limit hold for
    root); CPU runs only until CUDA IPC is verified across them (`namespaces_on_cuda`);
  - setrlimit for processes, open files, file size and (CPU runs) address space;
  - PR_SET_CHILD_SUBREAPER in the lane and the runner.
`sandbox: auto` uses what the host offers and warns once about the rest; `required` refuses to
run without all of it; `off` runs solution code as before (debugging).
"""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

MODES = ("auto", "required", "off")

# Landlock's user-space API (include/uapi/linux/landlock.h)
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
FS_REFER, FS_TRUNCATE = 1 << 13, 1 << 14          # ABI 2, ABI 3
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1    # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_PR_SET_NO_NEW_PRIVS, _PR_SET_CHILD_SUBREAPER = 38, 36

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE   # what a rule on a file may hold


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


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
        version = _libc().syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def unshare_command() -> list[str] | None:
    """util-linux's `unshare` with new user and network namespaces (the caller's uid mapped to
    itself), where this host allows them; None where it does not."""
    tool = shutil.which("unshare")
    if tool is None or sys.platform != "linux":
        return None
    for mapping in ("--map-current-user", "--map-root-user"):
        command = [tool, "--user", mapping, "--net", "--"]
        try:
            ok = subprocess.run([*command, sys.executable, "-S", "-c", "pass"], capture_output=True,
                                timeout=20).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return command
    return None


@dataclass(frozen=True)
class Host:
    """What this host offers a sandbox (probed once per process)."""
    landlock: int                       # ABI version, 0 = none
    unshare: tuple[str, ...] | None     # the namespaces' command prefix, None = not allowed here

    def missing(self, device: str) -> list[str]:
        """What a full sandbox needs and this host (or this device's runs) lacks, in words."""
        lacks = []
        if self.landlock < 1:
            lacks.append("Landlock (files: the solution could write the checkout and read the results)")
        elif self.landlock < 6:
            lacks.append(f"Landlock ABI 6 (this kernel has {self.landlock}: "
                         + ("no TCP rules, " if self.landlock < 4 else "") + "no signal scoping)")
        if not self.unshare:
            lacks.append("user and network namespaces (network reachable; the process limit does not bind root)")
        elif device == "cuda" and not namespaces_on_cuda():
            lacks.append("user and network namespaces on CUDA runs (not yet verified with CUDA IPC: UDP and "
                         "unix sockets stay reachable; the process limit does not bind root)")
        if sys.platform != "linux":
            lacks.append("Linux (no subreaper, no rlimits)")
        return lacks


def namespaces_on_cuda() -> bool:
    """Whether CUDA workers run in their own user and network namespaces: off until the lane's
    CUDA IPC from such a worker is verified on a GPU machine (KB_SANDBOX_NAMESPACES_ON_CUDA=1 to try)."""
    return os.environ.get("KB_SANDBOX_NAMESPACES_ON_CUDA") == "1"


@functools.lru_cache(maxsize=None)
def probe() -> Host:
    command = unshare_command()
    return Host(landlock=landlock_abi(), unshare=tuple(command) if command else None)


def check_mode(mode: str, device: str, warn) -> Host | None:
    """At run start: None for `off`; for `required` a SandboxError naming what is missing; for
    `auto` one warning line naming it."""
    if mode == "off":
        return None
    host = probe()
    lacks = host.missing(device)
    if lacks and mode == "required":
        raise SandboxError("sandbox: required, and this host lacks " + "; ".join(lacks))
    if lacks:
        warn("warning: sandbox: auto; this host lacks " + "; ".join(lacks))
    return host


def policy(cfg: dict[str, Any], device: str, *, scratch: Path, hidden: Iterable[Path | str],
           readable: Iterable[Path | str] = (), writable: Iterable[Path | str] = ()) -> dict[str, Any]:
    """What one sandboxed process may do (plain data: it crosses to the child in its request).
    `hidden` folders are neither read nor written (the results, the harness's work folders, the
    build cache); `readable` files or folders inside them are read (the solution's own files);
    `scratch` and `writable` are read and written."""
    return {"mode": cfg["sandbox"], "device": device, "scratch": str(scratch), "limits": dict(cfg["limits"]),
            "hidden": sorted({str(Path(p).resolve()) for p in hidden}),
            "readable": sorted({str(Path(p).resolve()) for p in readable}),
            "writable": sorted({str(Path(p).resolve()) for p in writable})}


def template(cfg: Any, hidden: Iterable[Path | str]) -> dict[str, Any] | None:
    """A lane's workers' sandbox but for each one's scratch and device (harness/pool.py, lane.py):
    plain data from the run's Config. None when the run's sandbox is off."""
    if cfg.sandbox == "off":
        return None
    return {"cfg": {"sandbox": cfg.sandbox, "limits": dict(vars(cfg.limits))},
            "hidden": [str(Path(p).resolve()) for p in hidden]}


def command_prefix(pol: dict[str, Any] | None) -> list[str]:
    """Put in front of the child's command: the namespaces, where the host and the run allow them."""
    if not pol or pol["mode"] == "off" or pol["limits"].get("network"):
        return []
    host = probe()
    if host.unshare and (pol["device"] != "cuda" or namespaces_on_cuda()):
        return list(host.unshare)
    return []


def child_env(pol: dict[str, Any] | None) -> dict[str, str]:
    """The child's scratch as its temporary folder and its caches' home."""
    if not pol or pol["mode"] == "off":
        return {}
    scratch = pol["scratch"]
    return {"TMPDIR": scratch, "TEMP": scratch, "TMP": scratch, "XDG_CACHE_HOME": f"{scratch}/.cache",
            "TRITON_CACHE_DIR": f"{scratch}/.triton", "CUDA_CACHE_PATH": f"{scratch}/.nv", "KB_SANDBOX": "1"}


# ----------------------------------------------------------------------------------------------
# Inside the child

def _open_path(path: str) -> int | None:
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None


def _readable_cover(hidden: list[str]) -> tuple[list[str], list[str]]:
    """(folders and files read in full, folders on the way to a hidden one): everything under /
    except the hidden folders. A folder on the way is listed (READ_DIR, which Landlock grants to
    the whole tree below it: file names there are visible, contents are not)."""
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


def _landlock(pol: dict[str, Any], abi: int) -> list[str]:
    lib = _libc()
    fs_all = _fs_rights(abi)
    attr = _RulesetAttr(fs_all, (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 and not pol["limits"].get("network") else 0,
                        (SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    fd = lib.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    write = fs_all & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)

    def allow(path: str, rights: int) -> None:
        target = _open_path(path)
        if target is None:
            return
        try:
            if not os.path.isdir(path):
                rights &= FILE_RIGHTS
            rule = _PathBeneath(rights & fs_all, target)
            if lib.syscall(_SYS_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
        finally:
            os.close(target)

    try:
        full, partial = _readable_cover(pol["hidden"])
        for path in full:
            allow(path, READ)
        for path in partial:
            allow(path, FS_READ_DIR)
        for path in pol["readable"]:
            allow(path, READ)
        for path in [pol["scratch"], *pol["writable"]]:
            allow(path, write)
        for device in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"):
            allow(device, FS_READ_FILE | FS_WRITE_FILE)
        if pol["device"] == "cuda":
            for name in os.listdir("/dev"):
                if name.startswith("nvidia"):
                    allow(f"/dev/{name}", FS_READ_FILE | FS_WRITE_FILE | FS_READ_DIR)
        lib.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if lib.syscall(_SYS_RESTRICT, fd, ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(fd)
    active = [f"landlock-fs (ABI {abi})"]
    if attr.handled_access_net:
        active.append("landlock-tcp")
    if attr.scoped:
        active.append("landlock-scope (signals, abstract sockets)")
    return active


def _in_user_namespace() -> bool:
    try:
        return Path("/proc/self/uid_map").read_text().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def _limits(pol: dict[str, Any]) -> tuple[list[str], list[str]]:
    limits = pol["limits"]
    notes, active = [], []

    def cap(kind: int, value: int) -> None:
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))

    cap(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    cap(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) and says so
    active.append("rlimits")
    if os.getuid() != 0 and not _in_user_namespace():  # the limit counts every process of this user
        mine = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == os.getuid())
        cap(resource.RLIMIT_NPROC, mine + int(limits["processes"]))
    else:
        cap(resource.RLIMIT_NPROC, int(limits["processes"]))
    if _kuid_is_root():  # RLIMIT_NPROC never binds the host's root, in a user namespace or not
        where = _join_pids_cgroup(int(limits["processes"]))
        if where:
            active.append("pids cgroup")
        else:
            notes.append("limits.processes does not bind root here (no writable pids cgroup)")
    if pol["device"] != "cuda":
        cap(resource.RLIMIT_AS, memory_bytes(limits))
    return active, notes


PIDS_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")


def _kuid_is_root() -> bool:
    """Whether this process is the host's root (uid 0 outside any user namespace it is in)."""
    try:
        for line in Path("/proc/self/uid_map").read_text().splitlines():
            inside, outside, count = (int(v) for v in line.split())
            if inside <= os.getuid() < inside + count:
                return outside + os.getuid() - inside == 0
    except (OSError, ValueError):
        pass
    return os.getuid() == 0


def _pids_hierarchies() -> list[Path]:
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


def _join_pids_cgroup(limit: int) -> str | None:
    """Move this process into a pids cgroup of its own, at most `limit` tasks; its path, None
    where none is writable."""
    for base in _pids_hierarchies():
        mine = base / "kb-sandbox" / str(os.getpid())
        try:
            mine.mkdir(parents=True, exist_ok=True)
            (mine / "pids.max").write_text(str(limit))
            (mine / "cgroup.procs").write_text(str(os.getpid()))
            return str(mine)
        except OSError:
            continue
    return None


def process_limit_binds() -> bool:
    """Whether limits.processes can hold here: RLIMIT_NPROC for a user other than root, a pids
    cgroup (writable by this process) for root."""
    return os.getuid() != 0 or any(os.access(base, os.W_OK) for base in _pids_hierarchies())


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


def _owner(proc: Path) -> int:
    try:
        return proc.stat().st_uid
    except OSError:
        return -1


def memory_bytes(limits: dict[str, Any]) -> int:
    if limits.get("memory_gb"):
        return int(float(limits["memory_gb"]) * (1 << 30))
    return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def enter(pol: dict[str, Any] | None) -> dict[str, Any]:
    """Apply the policy to this process (one thread; before anything of the solution's runs).
    Returns what is active, for the result."""
    if not pol or pol["mode"] == "off":
        return {"mode": "off", "active": []}
    if not isinstance(pol.get("limits"), dict) or pol["mode"] not in MODES:
        raise SandboxError(f"a malformed sandbox policy: {pol!r}")
    scratch = Path(pol["scratch"])
    scratch.mkdir(parents=True, exist_ok=True)
    os.chdir(scratch)
    active, notes = [], []
    if _in_user_namespace():
        active.append("user+network namespaces")
    if sys.platform == "linux":
        try:
            more, notes = _limits(pol)
            active += more
        except (OSError, ValueError) as exc:
            notes.append(f"rlimits: {exc}")
    abi = landlock_abi()
    threads = len(os.listdir("/proc/self/task")) if sys.platform == "linux" else 1
    if abi >= 1:
        if threads > 1:
            notes.append(f"Landlock applied with {threads} threads running (the others are not bound)")
        try:
            active += _landlock(pol, abi)
        except OSError as exc:
            if pol["mode"] == "required":
                raise SandboxError(f"sandbox: required, and Landlock failed: {exc}") from None
            notes.append(f"Landlock failed: {exc}")
    return {"mode": pol["mode"], "active": active, "notes": notes, "scratch": str(scratch), "limits": pol["limits"]}


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
