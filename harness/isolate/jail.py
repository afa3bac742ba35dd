"""python -m harness.isolate.jail MODULE ARGS...: enter the sandbox described by $KB_SANDBOX_POLICY
(harness/isolate/sandbox.py made it), then run MODULE as __main__ in this same process.

This is the child's side of the sandbox. It imports nothing but the standard library and
harness/isolate/sandbox.py before the sandbox is in place: Landlock binds the calling thread and the
threads it starts afterwards, so it must come while the process has one thread (torch's import
starts more). The identity and the network namespace were applied by the start itself
(sandbox.launch); here come the limits and Landlock. What is active goes to the module in
$KB_SANDBOX_REPORT (the worker puts it in its first event).
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import runpy
import signal
import sys
from pathlib import Path
from typing import Any

from harness.isolate import sandbox
from harness.isolate.sandbox import MODES, SandboxError, landlock_abi, pids_hierarchies, readable_cover

# Landlock's user-space API (include/uapi/linux/landlock.h)
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_MAKE_CHAR, FS_MAKE_BLOCK = 1 << 6, 1 << 11
FS_REFER, FS_TRUNCATE = 1 << 13, 1 << 14          # ABI 2, ABI 3
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1    # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_PR_SET_NO_NEW_PRIVS = 38

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


def _open_path(path: str) -> int | None:
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None


_PINNED: list[int] = []


def _allow_own_tasks(allow) -> None:
    """CUDA's start names the threads it makes: the driver opens /proc/self/task/<tid>/comm with
    fopen(..., "w") (write and truncate), and a refusal there is CUDA error 304 (seen on the H100
    and the H200, driver 580). Writing files beneath this process's own task folder is allowed,
    nothing else of /proc. Landlock binds a rule to the folder's inode, and threads made later
    appear beneath it; an open descriptor keeps that folder's dentry (and so its inode) alive, so
    that no later lookup makes a fresh inode without the rule."""
    task = f"/proc/{os.getpid()}/task"
    allow(task, FS_WRITE_FILE | FS_TRUNCATE)
    _PINNED.append(os.open(task, os.O_PATH))


def _landlock(pol: dict[str, Any], abi: int) -> list[str]:
    lib = sandbox._libc()
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
        full, partial = pol["cover"] if "cover" in pol else readable_cover(pol["hidden"])
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
            _allow_own_tasks(allow)
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


# seccomp (include/uapi/linux/seccomp.h, filter.h): one filter that refuses sched_setaffinity, so a
# worker cannot move its threads off the CPU the lane pins it to while it is timed
# (harness/run/placement.py); the lane, outside the filter, pins and restores them
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
_X32_SYSCALL_BIT = 0x40000000
_AFFINITY = {"x86_64": (0xC000003E, 203), "aarch64": (0xC00000B7, 122)}   # AUDIT_ARCH_*, __NR_sched_setaffinity


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _refuse_affinity() -> str:
    """Install the filter (this thread and the threads it starts afterwards); what is active."""
    arch, nr = _AFFINITY[os.uname().machine]
    program = [
        (_BPF_LD_W_ABS, 0, 0, 4),                       # seccomp_data.arch
        (_BPF_JEQ_K, 1, 0, arch),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),         # another ABI: nothing of ours to refuse
        (_BPF_LD_W_ABS, 0, 0, 0),                       # seccomp_data.nr
        (_BPF_JEQ_K, 2, 0, nr),
        (_BPF_JEQ_K, 1, 0, nr | _X32_SYSCALL_BIT),      # x32's number for the same call
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | 1),     # EPERM
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*ins) for ins in program])
    prog = _SockFprog(len(program), filters)
    lib = ctypes.CDLL(None, use_errno=True)
    lib.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if lib.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")
    return "seccomp (sched_setaffinity refused)"


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


def _tasks_of(uid: int) -> int:
    """Tasks (threads included: RLIMIT_NPROC counts them) of processes this uid owns."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            count += len(os.listdir(entry / "task"))
        except OSError:
            continue
    return count


def _join_pids_cgroup(limit: int) -> str | None:
    """Move this process into a pids cgroup of its own, at most `limit` tasks; its path, None
    where none is writable. On cgroup v2 the controller is enabled below kb-sandbox first."""
    for base in pids_hierarchies():
        parent = base / "kb-sandbox"
        mine = parent / str(os.getpid())
        try:
            parent.mkdir(exist_ok=True)
            control = parent / "cgroup.subtree_control"
            if control.exists() and "pids" not in control.read_text():
                control.write_text("+pids")
            mine.mkdir(exist_ok=True)
            (mine / "pids.max").write_text(str(limit))
            (mine / "cgroup.procs").write_text(str(os.getpid()))
            return str(mine)
        except OSError:
            continue
    return None


def memory_bytes(limits: dict[str, Any]) -> int:
    """limits.memory_gb, or the worker's share of the machine's memory (sandbox.WORKER_MEMORY_SHARE)."""
    if limits.get("memory_gb"):
        return int(float(limits["memory_gb"]) * (1 << 30))
    return int(sandbox.WORKER_MEMORY_SHARE * sandbox.physical_memory_bytes())


def _limits(pol: dict[str, Any]) -> tuple[list[str], list[str]]:
    limits = pol["limits"]
    notes, active = [], []

    def cap(kind: int, value: int) -> None:
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))

    cap(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    cap(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    cap(resource.RLIMIT_CORE, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) and says so
    active.append("rlimits")
    if _kuid_is_root():  # RLIMIT_NPROC never binds the host's root, in a user namespace or not
        cap(resource.RLIMIT_NPROC, int(limits["processes"]))
        if _join_pids_cgroup(int(limits["processes"])):
            active.append("pids cgroup")
        else:
            notes.append("limits.processes does not bind root here (no writable pids cgroup)")
    else:  # the limit counts every task of this user (one uid per process: this one's alone)
        cap(resource.RLIMIT_NPROC, _tasks_of(os.getuid()) + int(limits["processes"]))
    if pol["device"] != "cuda":
        cap(resource.RLIMIT_AS, memory_bytes(limits))
    return active, notes


def _own_network() -> bool:
    """Whether this process's network namespace has nothing but loopback (a fresh one)."""
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return False
    return [line.split(":")[0].strip() for line in lines] == ["lo"]


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
    if pol.get("uid") is not None:
        if (os.getuid(), os.getgid()) != (pol["uid"], pol["gid"]) or os.getgroups() not in ([], [pol["gid"]]):
            raise SandboxError(f"started as uid {os.getuid()} gid {os.getgid()}, not the sandbox's {pol['uid']}")
        active.append(f"unprivileged uid {pol['uid']}")
    if "network namespace" in pol.get("applied", []):
        if not _own_network():
            raise SandboxError("started outside the network namespace it was given")
        active.append("network namespace")
    if sys.platform == "linux":
        try:
            more, notes = _limits(pol)
            active += more
        except (OSError, ValueError) as exc:
            notes.append(f"rlimits: {exc}")
    abi = landlock_abi()
    threads = len(os.listdir("/proc/self/task")) if sys.platform == "linux" else 1
    if abi >= 1 and pol.get("landlock", True):
        if threads > 1:
            notes.append(f"Landlock applied with {threads} threads running (the others are not bound)")
        try:
            active += _landlock(pol, abi)
        except OSError as exc:
            if pol["mode"] == "required":
                raise SandboxError(f"sandbox: required, and Landlock failed: {exc}") from None
            notes.append(f"Landlock failed: {exc}")
    try:  # the pool starts workers so (harness/run/placement.py fixed_layout): say whether it held through the start
        if int(Path("/proc/self/personality").read_text(), 16) & 0x0040000:
            active.append("fixed memory layout (no ASLR)")
    except (OSError, ValueError):
        pass
    if sys.platform == "linux" and os.uname().machine in _AFFINITY:
        try:
            active.append(_refuse_affinity())
        except OSError as exc:
            notes.append(f"{exc} (a timed worker could move its threads off the timing CPU; the lane checks "
                         f"them after each block)")
    return {"mode": pol["mode"], "active": active, "notes": notes, "scratch": str(scratch), "limits": pol["limits"]}


def run(module: str, args: list[str], in_jail: bool = True, after_enter=None) -> int:
    """Enter the sandbox $KB_SANDBOX_POLICY describes (where `in_jail`), then run `module` as
    __main__ with `args`; 0, or 70 where the sandbox could not be entered (said on stderr). An
    exec'd start comes here through main; a forked one (harness/isolate/forkserver.py) directly,
    with `after_enter(report)` called once the sandbox is entered (its torch threads)."""
    if in_jail:
        policy = json.loads(os.environ.pop("KB_SANDBOX_POLICY", "null") or "null")
        try:
            report = enter(policy)
        except SandboxError as exc:
            print(f"harness.isolate.jail: {exc}", file=sys.stderr, flush=True)
            return 70
        os.environ["KB_SANDBOX_REPORT"] = json.dumps(report)
        if after_enter is not None:
            after_enter(report)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def main() -> None:
    code = run(sys.argv[1], sys.argv[2:])
    if code:
        os._exit(code)


if __name__ == "__main__":
    main()
