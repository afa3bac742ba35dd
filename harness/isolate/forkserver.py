"""Start a step (a build step, a compile step) by fork from a process that has imported torch,
rather than by exec of a fresh interpreter that imports it again (build.start: fork).

A fresh `import torch` costs 4-5 CPU-s on a GPU host (docs/harness-perf.md, "The fork lever"), and
every build and compile step paid it: about a sixth of a corpus run's CPU. The server, started once
per harness process by exec (`python -m harness.isolate.forkserver --fd F`), imports torch and the
modules its steps run, never touches CUDA, holds nothing of any pair's, and then only forks:

  - the parent's side (`ForkServer.start`, run by isolation.run_module) sends the step: its module
    and arguments, environment, working directory, its descriptors (SCM_RIGHTS: the log, the
    request, the events file), its start (sandbox.Launch: identity, network namespace) and the
    starting thread's CPUs and priority, which an exec'd child would have inherited;
  - the server forks from its one loop and answers with the child's pid once the child is a
    session leader (so that a kill of its process group takes everything it starts), and reports
    each child's exit as it reaps it (`ForkedProc`, Popen's poll, wait and kill for run_module);
  - the child (`_child`) makes itself what `unshare ... python -m harness.isolate.jail` would have
    made it: its descriptors at the numbers asked and no other, stdio on its log, the parent-death
    signal tied to the server, the CPUs and priority, the network namespace and the identity (as
    root: --net, then no groups, the gid and the uid; otherwise a user namespace mapping the
    current user), the environment and Python's cached view of it; then the jail's own steps
    (harness/isolate/jail.py run: limits, Landlock, seccomp) in the same one-thread process, and
    the module as __main__. It never returns to the server's loop.

Only the forking thread exists in a forked child, so the child is one thread, as Landlock needs,
whatever threads the import started in the server (the CUDA wheel's import starts 15). The server
exits when its parent's end of the socket closes (the harness ended, however), killing what it
started; each child dies with the server (PR_SET_PDEATHSIG). Orphans of a child come back to the
harness, a child subreaper, as an exec'd step's did: the server is not one.
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Mapping

# imported once as the server starts; each step's own module is imported there on its first request
PRELOAD = ("torch", "torch.utils.cpp_extension")
_MAX_FDS = 16
_CLONE_NEWNET, _CLONE_NEWUSER = 0x40000000, 0x10000000
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NAME = 1, 4, 15


class ForkServerError(RuntimeError):
    """The server could not be started, or refused a step (the reason in words)."""


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
    """One message: its length, then its JSON; `fds` ride on its first bytes (SCM_RIGHTS)."""
    data = json.dumps(message).encode()
    frame = struct.pack("!I", len(data)) + data
    sent = sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
                       if fds else [])
    if sent < len(frame):
        sock.sendall(frame[sent:])


def _recv(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The next message and the descriptors that came with it; (None, []) at the end."""
    head, fds, _, _ = socket.recv_fds(sock, 4, _MAX_FDS)
    while head and len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            break
        head += more
    if len(head) < 4:
        for fd in fds:
            os.close(fd)
        return None, []
    size, body = struct.unpack("!I", head)[0], b""
    while len(body) < size:
        more = sock.recv(min(size - len(body), 1 << 20))
        if not more:
            for fd in fds:
                os.close(fd)
            return None, []
        body += more
    return json.loads(body), fds


# ----------------------------------------------------------------------------------------------
# The parent's side


class ForkedProc:
    """A step the server forked: what run_module and the precompiled header's helper use of a Popen
    (pid, poll, wait, terminate, kill, returncode); its exit comes from the server, its parent."""

    def __init__(self, pid: int, args: list[str]):
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._ended = threading.Event()

    def _end(self, returncode: int) -> None:
        if self.returncode is None:
            self.returncode = returncode
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """A server of the harness process's (isolation.fork_server, by name), started on its first
    step and shared by its threads. `start` sends a step and returns its ForkedProc; a server that died is started again
    on the next step."""

    def __init__(self, popen, env: Mapping[str, str], log: Path, layout=None, cuda_children: bool = False):
        self._popen, self._env, self._log, self._layout = popen, dict(env), Path(log), layout
        self._cuda_children = cuda_children   # its children use CUDA (a lane's workers): serve's cuda_children
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc = None
        self._waiting: dict[int, list] = {}     # request id -> [Event, reply, ForkedProc]
        self._procs: dict[int, ForkedProc] = {}  # pid -> the step, until it ends
        self._next = 0

    def _start_server(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self._log, "ab") as log, self._layout() if self._layout else contextlib.nullcontext():
                self._proc = self._popen([sys.executable, "-m", "harness.isolate.forkserver", "--fd",
                                          str(theirs.fileno()), *(["--cuda-children"] if self._cuda_children else [])],
                                         pass_fds=(theirs.fileno(),), env=self._env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd="/")
        finally:
            theirs.close()
        ours.settimeout(300)
        try:
            hello = _recv(ours)[0]
        except (OSError, ValueError):
            hello = None
        if not hello or not hello.get("ready"):
            ours.close()
            self._proc.kill()
            self._proc.wait()
            raise ForkServerError(f"the fork server did not start (its log {self._log}: "
                                  f"{_tail(self._log) or 'empty'})")
        ours.settimeout(None)
        self._sock = ours
        threading.Thread(target=self._read, args=(ours, self._proc), name="forkserver-reader", daemon=True).start()

    def _read(self, sock: socket.socket, server) -> None:
        """The reader: answers to requests, and each child's exit as the server reaped it; at the
        end, the server itself reaped (a server that died leaves no zombie while the harness runs)."""
        while True:
            try:
                message = _recv(sock)[0]
            except (OSError, ValueError):
                message = None
            if message is None:
                break
            with self._lock:
                if "exit" in message:
                    proc = self._procs.pop(message["exit"], None)
                    if proc is not None:
                        proc._end(int(message["returncode"]))
                    continue
                slot = self._waiting.pop(message.get("id"), None)
                if slot is not None:
                    if "pid" in message:   # registered here, before any exit the reader reads next
                        self._procs[message["pid"]] = slot[2]
                        slot[2].pid = message["pid"]
                    slot[1] = message
                    slot[0].set()
        with self._lock:  # the server is gone, and its children with it (their parent-death signal)
            if self._sock is sock:
                self._sock = None
            for slot in self._waiting.values():
                slot[1] = {"error": "the fork server ended"}
                slot[0].set()
            self._waiting.clear()
            for proc in self._procs.values():
                proc._end(-signal.SIGKILL)
            self._procs.clear()
        sock.close()
        try:
            server.wait(timeout=60)   # it ends once its socket does (a kill, or close's shutdown)
        except subprocess.TimeoutExpired:
            pass

    def start(self, module: str, args: list[str], env: Mapping[str, str], cwd: Path | str, launch: Any,
              log_fd: int, pass_fds: tuple[int, ...] = (), jail: bool = True, dumpable: bool = False,
              timeout_s: float = 60.0) -> ForkedProc:
        """Fork a step: `python -m module args` as `launch` (sandbox.Launch: identity, network
        namespace, its environment) would have started it, stdout and stderr on `log_fd`, `pass_fds`
        at their own numbers, with this thread's CPUs and priority. `dumpable`: made dumpable again
        after its identity change, as an exec would make it (below, _child)."""
        done = threading.Event()
        proc = ForkedProc(0, [module, *args])
        slot = [done, None, proc]
        with self._lock:
            if self._sock is None:
                self._start_server()
            self._next += 1
            ident = self._next
            self._waiting[ident] = slot
            message = {"id": ident, "module": module, "args": list(args), "env": dict(env), "cwd": str(cwd),
                       "jail": jail, "dumpable": dumpable, "fds": list(pass_fds), "identity": dict(getattr(launch, "identity", None) or {}),
                       "cpus": sorted(os.sched_getaffinity(0)), "nice": os.getpriority(os.PRIO_PROCESS, 0)}
            try:
                _send(self._sock, message, [log_fd, *pass_fds])
            except OSError as exc:
                self._waiting.pop(ident, None)
                raise ForkServerError(f"the fork server took no step: {exc}") from None
        if not done.wait(timeout_s):
            with self._lock:
                self._waiting.pop(ident, None)
            raise ForkServerError(f"the fork server did not answer in {timeout_s:.0f} s")
        if "pid" not in slot[1]:
            raise ForkServerError(slot[1].get("error") or "the fork server refused the step")
        return proc

    def close(self) -> None:
        """Stop the server (its children with it)."""
        with self._lock:
            sock, proc, self._sock = self._sock, self._proc, None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        if proc is not None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _tail(path: Path, limit: int = 600) -> str:
    try:
        return path.read_bytes()[-limit:].decode(errors="replace").strip()
    except OSError:
        return ""


# ----------------------------------------------------------------------------------------------
# The server


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _probe_threads() -> tuple[int, int]:
    """Fork a child, before this server imports torch, that imports it as a sandboxed exec'd
    process does, under the jail's seccomp filter: torch's import asks MKL for its cores, MKL counts
    them by moving its thread (sched_setaffinity), is refused, and torch's CPU operators start with
    one thread (docs/harness-perf.md). A child forked after the server's own import would keep the
    server's count; it takes this one (_child). Returns the pipe its count comes on and its pid."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            from harness.isolate import jail
            jail._refuse_affinity()
            import torch
            os.write(write_fd, str(torch.get_num_threads()).encode())
            code = 0
        except BaseException:  # noqa: BLE001 - no filter here, none in a jail either: nothing to match
            pass
        finally:
            os._exit(code)
    os.close(write_fd)
    return read_fd, pid


def _probed_threads(probe: tuple[int, int]) -> int | None:
    """The probe's count (waited for once), or None where it found none."""
    read_fd, pid = probe
    try:
        data = b""
        while chunk := os.read(read_fd, 64):
            data += chunk
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    return int(data) if data.strip().isdigit() else None


def serve(sock: socket.socket, cuda_children: bool = False) -> None:
    """Fork each step asked for; report each child's exit; end when the harness's end closes.
    `cuda_children`: its children use CUDA (a lane's workers; the build and compile steps never do)."""
    if cuda_children:
        # torch.utils.cpp_extension's import asks torch.cuda.is_available() where it finds a CUDA_HOME.
        # By CUDA's count that starts the driver and arms torch's fork guard (every forked worker's first
        # CUDA call refused: an H100 host, docs/harness-perf.md); by NVML's it initialises NVML here, whose
        # state (and descriptors, which a child closes) every child would inherit. So this server sees
        # no device at all: NVML's count of an empty CUDA_VISIBLE_DEVICES is 0 without asking NVML, and
        # nothing is cached by it. Read at each call: a child, whose environment is the step's own,
        # counts and starts CUDA as an exec'd one would
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    probe: tuple[int, int] | None = _probe_threads()
    checked: dict[str, str] = {}   # module -> how CUDA was touched, as last checked ("" = not)
    filtered_threads: int | None = None
    with _quiet("torch.utils.cpp_extension"):   # "No CUDA runtime is found": this server's, by design
        for name in PRELOAD:
            importlib.import_module(name)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    _send(sock, {"ready": True, "pid": os.getpid()})
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        _reap(sock, children)
        if sock not in ready:
            continue
        try:
            message, fds = _recv(sock)
        except (OSError, ValueError):
            message, fds = None, []
        if message is None:
            break
        try:
            try:
                importlib.import_module(message["module"])  # once: what every later fork of it shares
            except Exception:  # noqa: BLE001 - not here (a PYTHONPATH of the step's own): the child tries
                pass
            # an import may have touched CUDA: a steps' server checks at every request, as it always did (a
            # test of torch's state); a workers' server reads the fork guard in a forked child once a module
            if not cuda_children or message["module"] not in checked:
                checked[message["module"]] = _cuda_touched(cuda_children)
            if checked[message["module"]]:
                raise ForkServerError(f"CUDA was touched in the fork server ({checked[message['module']]}, by an "
                                      "import): a forked child could not use it; set build.start and "
                                      "timing.worker_start to exec")
            if probe is not None:
                filtered_threads, probe = _probed_threads(probe), None
            message["filtered_threads"] = filtered_threads
            pid = _fork(message, fds, (sock.fileno(), wake_r, wake_w))
            children.add(pid)
            reply = {"id": message["id"], "pid": pid}
        except Exception as exc:  # noqa: BLE001 - a step refused is the step's, not the server's end
            reply = {"id": message["id"], "error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in fds:
                os.close(fd)
        _send(sock, reply)
    for pid in children:  # the harness is gone: so is what it started here
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


@contextlib.contextmanager
def _quiet(logger: str):
    """`logger` silent while the block runs."""
    import logging
    log = logging.getLogger(logger)
    was, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = was


def _cuda_touched(cuda_children: bool = True) -> str:
    """How this process touched CUDA so that a child could not use it, in words ("" = not): CUDA
    started; or, where the children use CUDA, torch's fork guard armed, which a device count
    (torch.cuda.is_available) does, as it starts CUDA's driver, and which makes a forked child's
    first CUDA call refuse ("Cannot re-initialize CUDA in forked subprocess"); a step, which never
    uses CUDA, is not refused for it. The guard is read in a forked child, where it acts."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(torch, "cuda", None) is None or not torch.cuda._is_compiled():
        return ""
    if torch.cuda.is_initialized():
        return "CUDA started"
    if not cuda_children:
        return ""
    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return "torch's fork guard armed" if os.waitstatus_to_exitcode(status) == 3 else ""


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        try:
            _send(sock, {"exit": pid, "returncode": os.waitstatus_to_exitcode(status)})
        except OSError:
            pass


def _fork(message: dict[str, Any], fds: list[int], server_fds: tuple[int, ...]) -> int:
    """Fork the step; its pid once it leads a session of its own."""
    ready_r, ready_w = os.pipe()
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.close(ready_r)
            os.setsid()
            os.write(ready_w, b"1")
            os.close(ready_w)
            code = _child(message, fds, server, server_fds)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - the child never returns to the server's loop
            try:
                traceback.print_exc()
            except BaseException:  # noqa: BLE001
                pass
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:  # noqa: BLE001
                    pass
            os._exit(code)
    os.close(ready_w)
    try:
        select.select([ready_r], [], [], 30)
        os.read(ready_r, 1)
    finally:
        os.close(ready_r)
    return pid


def _child(message: dict[str, Any], fds: list[int], server: int, server_fds: tuple[int, ...]) -> int:
    """In the forked child: become the step an exec'd start would have made, then run it."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    # its name for ps, top and tools/cpu_by_process.py (its command line is the server's): kb:compiler, kb:worker
    libc.prctl(_PR_SET_NAME, ctypes.c_char_p(f"kb:{message['module'].rsplit('.', 1)[-1]}"[:15].encode()), 0, 0, 0)
    if os.getppid() != server:
        return 1
    _place_fds(fds, message["fds"], server_fds)
    cpus = message.get("cpus")
    if cpus:
        os.sched_setaffinity(0, cpus)
    if message.get("nice") is not None and message["nice"] != os.getpriority(os.PRIO_PROCESS, 0):
        try:   # the starting thread's, as an exec'd child inherits it, whichever thread started the server
            os.setpriority(os.PRIO_PROCESS, 0, message["nice"])
        except PermissionError:   # below the server's needs root: the server's kept
            pass
    os.chdir(message["cwd"])
    _take_identity(libc, message.get("identity") or {})
    if message.get("dumpable"):
        # a uid change leaves a process not dumpable (the kernel's rule): its /proc files are root's, so
        # that it could not read its own /proc/self/personality nor CUDA name its threads under
        # /proc/self/task. An exec would make it dumpable again; a worker is made so here, which lets
        # only its own uid (one per process) trace it, as an exec'd worker's does. A step stays as it
        # is (stricter than an exec'd one: only its own /proc files differ)
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    env = dict(message["env"])
    env["KB_PARENT_PID"] = str(server)   # die_with_parent: the server is this process's parent
    os.environ.clear()
    os.environ.update(env)
    _python_path(env.get("PYTHONPATH", ""))
    import tempfile
    tempfile.tempdir = None              # read again from TMPDIR, the scratch's
    sys.dont_write_bytecode = True
    from harness.isolate import jail
    import warnings  # runpy's note that the module was imported before it ran: the server imported it, on purpose
    warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning)
    return jail.run(message["module"], message["args"], in_jail=bool(message.get("jail")),
                    after_enter=lambda report: _match_threads(report, message.get("filtered_threads")))


def _match_threads(report: Mapping[str, Any], filtered_threads: int | None) -> None:
    """Where the jail's seccomp filter is on, torch's CPU threads as an exec'd process's import under
    it finds them (the server's probe); without it the server's own import's count holds, as an
    exec'd import's would. torch.set_num_threads sets ATen's, OpenMP's and MKL's alike."""
    torch = sys.modules.get("torch")
    if torch is None or not filtered_threads or not any("seccomp" in a for a in report.get("active", ())):
        return
    if torch.get_num_threads() != filtered_threads:
        torch.set_num_threads(filtered_threads)


def _python_path(python_path: str) -> None:
    """sys.path as `python -m` in the step's working directory with the step's PYTHONPATH would
    have begun it: the working directory first, then PYTHONPATH's folders, then the rest."""
    first = [os.getcwd(), *(p for p in python_path.split(os.pathsep) if p)]
    rest = [p for p in sys.path[1:] if p not in first]
    sys.path[:] = [*dict.fromkeys(first), *rest]


def _place_fds(fds: list[int], targets: list[int], server_fds: tuple[int, ...]) -> None:
    """stdin on /dev/null, stdout and stderr on the log (fds[0]), fds[1:] at `targets`; every other
    descriptor of the server's closed."""
    import fcntl
    floor = max([2, *fds, *targets, *server_fds]) + 1   # above every number placed below
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(high[0], 1)
    os.dup2(high[0], 2)
    for fd, target in zip(high[1:], targets):
        os.dup2(fd, target)
    keep = {0, 1, 2, *targets}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    for fd in keep:
        os.set_inheritable(fd, True)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True,
                                  errors="backslashreplace")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _take_identity(libc: ctypes.CDLL, identity: Mapping[str, Any]) -> None:
    """What sandbox.Launch's unshare prefix (or Popen's user and group) does before an exec."""
    uid, gid = identity.get("uid"), identity.get("gid")
    if identity.get("userns"):
        flags = _CLONE_NEWUSER | (_CLONE_NEWNET if identity.get("net") else 0)
        outer_uid, outer_gid = os.getuid(), os.getgid()
        if libc.unshare(flags) != 0:
            raise OSError(ctypes.get_errno(), f"unshare: {os.strerror(ctypes.get_errno())}")
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{outer_uid} {outer_uid} 1")
        Path("/proc/self/gid_map").write_text(f"{outer_gid} {outer_gid} 1")
        return
    if identity.get("net"):
        if libc.unshare(_CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"unshare --net: {os.strerror(ctypes.get_errno())}")
    if uid is not None:
        os.setgroups([])
        os.setgid(int(gid))
        os.setuid(int(uid))


def main(argv: list[str]) -> None:
    fd = int(argv[argv.index("--fd") + 1])
    sock = socket.socket(fileno=fd)
    try:
        serve(sock, cuda_children="--cuda-children" in argv)
    except KeyboardInterrupt:
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
