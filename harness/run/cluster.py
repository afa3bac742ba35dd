"""Lanes and builds on a Ray cluster (`--cluster ray`, `--cluster ray://HOST:PORT`): the same lanes
as on one host, placed by Ray instead of started by the runner.

What runs where:
- the driver (run_eval.py, harness/run/runner.py) picks the pairs, schedules them on the lanes, writes
  every result and run.json as a local run does; it never runs solution code;
- a build is a Ray task on a CPU (`num_cpus=1`): the build step of harness/run/pipeline.py in a fresh
  process there, with the GPUs hidden; the build directories it made come back as tar archives
  and go into the driver's content-addressed store (`<build cache>/cas/<extension>-<key>.tar.gz`,
  the key being load_inline's own build hash), from which Ray's object store carries them to
  whichever node evaluates the pair; a later run with the same sources ships them again without
  building;
- a lane is a Ray actor holding one GPU (`num_gpus=1`, so a GPU is never shared while it times)
  or, on a CPU-only cluster, one CPU: harness/run/lane.py's Lane in that process, trusted, with its
  pool of fresh worker processes; each pair's solution still runs in its own process, which the
  actor supervises and judges;
- only sources (paths of the shared checkout), build archives and results cross the network:
  outputs stay on the lane's node, handed over by CUDA IPC there.

A lane (actor) that dies, with its process or its node, costs only the pair it had: the runner
gives that pair to a lane once more, and a second death records it as `crashed` with the node.
"""
from __future__ import annotations

import io
import json
import logging
import os
import socket
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from ..core.errors import BadInput

NEEDS_RAY = "--cluster ray needs Ray: pip install -r requirements-ray.txt"


def ray_module():
    try:
        import ray
    except ImportError:
        raise BadInput("--cluster", NEEDS_RAY) from None
    return ray


def connect(address: str) -> Any:
    """Join the cluster at `address` ("" starts a local instance, "auto" joins one running on this
    node, "ray://HOST:PORT" a remote one)."""
    from .. import REPO_ROOT
    ray = ray_module()
    if not ray.is_initialized():
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        try:
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING,
                     runtime_env={"env_vars": {"PYTHONPATH": path}})  # the checkout, at the same path on every node
        except (ConnectionError, ValueError, RuntimeError) as exc:  # no cluster there, or Ray Client missing
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BadInput("--cluster", f"could not join the Ray cluster at {address or 'a new local instance'}: "
                                        f"{first}") from None
    return ray


def pack(directory: str | Path) -> bytes:
    """A build directory as a gzipped tar (relative names: it unpacks under any cache root)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(str(directory), arcname=Path(directory).name)
    return buf.getvalue()


def unpack(blob: bytes, cache_root: str | Path) -> None:
    """Put a build directory into this node's cache (only plain files and folders under it)."""
    root = Path(cache_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        members = [m for m in tar.getmembers() if (m.isfile() or m.isdir())
                   and (root / m.name).resolve().is_relative_to(root)]
        with tempfile.TemporaryDirectory(dir=root) as staging:
            tar.extractall(staging, members=members)
            for entry in Path(staging).iterdir():
                target = root / entry.name
                if not target.exists():
                    entry.rename(target)


class Store:
    """The driver's content-addressed store of build directories, and their object refs."""

    def __init__(self, ray: Any, cache_root: Path):
        self.ray = ray
        self.dir = Path(cache_root) / "cas"
        self.refs: dict[str, Any] = {}

    def has(self, name: str) -> bool:
        return name in self.refs or (self.dir / f"{name}.tar.gz").is_file()

    def add(self, name: str, blob: bytes) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f"{name}.tar.gz.{os.getpid()}.tmp"
        tmp.write_bytes(blob)
        os.replace(tmp, self.dir / f"{name}.tar.gz")
        self.refs[name] = self.ray.put(blob)

    def ref(self, name: str) -> Any | None:
        if name not in self.refs and (self.dir / f"{name}.tar.gz").is_file():
            self.refs[name] = self.ray.put((self.dir / f"{name}.tar.gz").read_bytes())
        return self.refs.get(name)


def plain(value: Any) -> Any:
    """What a lane answers, as the local lanes' channel sends it: JSON data (torch.__version__, a
    str subclass of torch's, would otherwise make the driver import torch to unpickle it)."""
    return json.loads(json.dumps(value, default=str))


def build_task(ray: Any):
    @ray.remote(num_cpus=1, max_retries=1)
    def build(run, known: list[str]) -> tuple[dict | None, dict, float, dict[str, bytes]]:
        """The build step on a cluster node; the build directories the store lacks, packed. This
        task's process reaps what the build step left running (harness/isolate/isolation.py)."""
        from ..isolate.isolation import reaping
        with reaping(run.ctx.plan["mode"] != "off"):
            result = run.run_build()
        blobs = {}
        for ext in run.build.get("extensions", []):
            name = Path(ext.get("dir") or "").name
            if ext.get("ok") and name and name not in known:
                blobs[name] = pack(ext["dir"])
        return plain(result.to_dict() if result is not None else None), plain(run.build), run.build_s, blobs
    return build


def lane_actor(ray: Any, device: str):
    options = {"num_gpus": 1} if device != "cpu" else {"num_cpus": 1}

    @ray.remote(max_restarts=0, **options)
    class LaneActor:
        """A lane (harness/run/lane.py) in a Ray actor, on the GPU Ray gave it."""

        def __init__(self, requested: str, index: int, sandboxed: dict | None = None, worker_start: str = "auto"):
            from .lane import open_lane
            # Ray sets OMP_NUM_THREADS to the actor's CPUs (1); a lane and its workers use the node's
            # threads as on one host, so that timings and float64 sums are those of a local run
            os.environ.pop("OMP_NUM_THREADS", None)
            gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0] if requested != "cpu" else ""
            os.environ.update(KB_LANE_GPU=gpu, KB_LANE_INDEX=str(index))
            self.node = f"{socket.gethostname()} (Ray node {ray.get_runtime_context().get_node_id()[:12]})"
            from ..isolate.sandbox import work_folder
            self.lane = open_lane(work_folder("kb-lane-"), requested, gpu, sandboxed, worker_start)
            self.lane.env["lane"]["node"] = self.node

        def hello(self) -> dict:
            return plain({**self.lane.info, "node": self.node, "pid": os.getpid(),
                          "lane_gpu": self.lane.env["lane"]["gpu"]})

        def validate(self, message: dict) -> list[str] | None:
            from .lane import validate
            return plain(validate(message))

        def run(self, job: dict) -> dict:
            folders = {Path(e["dir"]).name: Path(e["dir"]).parent for e in job.get("libraries") or [] if e.get("dir")}
            for name, ref in (job.pop("artifacts", None) or {}).items():
                where = folders.get(name, Path(job["cache_dir"]))  # where the build node put it
                if not (where / name).exists():
                    unpack(ray.get(ref), str(where))
            return plain(self.lane.run_pair(job))

        def stop(self) -> None:
            self.lane.close()

    return LaneActor


class RayLane:
    """A lane as a Ray actor, behind the same calls as a lane process (harness/run/laneproc.py)."""

    def __init__(self, ray: Any, index: int, device: str, sandboxed: dict | None = None, worker_start: str = "auto"):
        self.ray, self.index, self.device = ray, index, device
        self.worker_start = worker_start  # timing.worker_start
        self.sandboxed = sandboxed  # its workers' sandbox (harness/isolate/sandbox.py template)
        self.gpu = ""
        self.actor = None
        self.node = "an unknown node"
        self.info: dict[str, Any] = {}
        self.work_dir = Path(tempfile.gettempdir())  # its logs stay on its node
        self.proc = None

    def spawn(self) -> None:
        self.actor = lane_actor(self.ray, self.device).remote(self.device, self.index, self.sandboxed, self.worker_start)
        self.proc = self.actor

    def start(self, timeout_s: float = 600.0) -> dict[str, Any]:
        self.spawn()
        return self.hello(timeout_s)

    def _call(self, what: str, timeout_s: float, *args: Any) -> Any:
        from .laneproc import LaneDied
        try:
            return self.ray.get(getattr(self.actor, what).remote(*args), timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - an actor, process or node that died, or a time-out
            if isinstance(exc, BadInput):
                raise
            self.kill()
            raise LaneDied(f"lane {self.index} on {self.node} died ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''})", str(exc)[-4000:]) from None

    def hello(self, timeout_s: float = 600.0) -> dict[str, Any]:
        self.info = self._call("hello", timeout_s)
        self.node, self.gpu = self.info.get("node", self.node), self.info.get("lane_gpu", "")
        return self.info

    def validate(self, pairs: list, extra: dict[str, list], where: str) -> None:
        files = {str(p.problem.path): extra.get(p.problem.id, []) for p in pairs}
        error = self._call("validate", 600.0, {"where": where, "problems": [{"path": path, "extra": shapes}
                                                                            for path, shapes in files.items()]})
        if error:
            raise BadInput(*error)

    def run(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return self._call("run", timeout_s, job)

    def stop(self) -> None:
        if self.actor is not None:
            try:
                self.ray.get(self.actor.stop.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - it is killed below either way
                pass
            self.kill()

    def kill(self) -> None:
        if self.actor is not None:
            try:
                self.ray.kill(self.actor)
            except Exception:  # noqa: BLE001
                pass
            self.actor = None


class RayLanes:
    """A run's lanes on a Ray cluster: one actor per GPU (per CPU lane on a CPU-only cluster), the
    builds as Ray tasks, their archives in the driver's content-addressed store."""

    where = "the Ray cluster"

    def __init__(self, cfg, plan):
        from ..compile.build import cache_dir_of
        self.cfg = cfg
        ray = ray_module()
        self.owned = not ray.is_initialized()  # connected here: disconnected (a local instance stopped) at the end
        self.ray = connect(cfg.ray.address)
        from ..isolate import sandbox
        self.work = sandbox.work_folder("kb-harness-")
        self.store = Store(self.ray, cache_dir_of(cfg))
        self.remote_build = build_task(self.ray)
        self.sandboxed = sandbox.template(plan, [cfg.results_dir, self.store.dir.parent])
        self.first = RayLane(self.ray, 0, cfg.device, self.sandboxed, cfg.timing.worker_start)
        self.first.spawn()
        self.all = [self.first]

    def capacity(self, info: dict[str, Any]) -> int:
        resources = self.ray.cluster_resources()
        if info["device"] == "cuda":
            return int(resources.get("GPU", 0))
        return max(1, int(resources.get("CPU", 1)) // 2)  # a CPU lane and its worker: two cores

    def add(self, count: int, info: dict[str, Any]) -> None:
        self.all += [RayLane(self.ray, i, self.cfg.device, self.sandboxed, self.cfg.timing.worker_start)
                     for i in range(1, count)]

    def build_slots(self) -> int:
        """Build tasks at once: the cluster's CPUs that CPU lanes do not hold (Ray queues the rest)."""
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        return max(1, cpus - (len(self.all) if self.cfg.device == "cpu" else 0))

    def describe(self, lane: RayLane) -> dict[str, Any]:
        return {"index": lane.index, "gpu": lane.gpu, "gpu_name": lane.info.get("gpu_name", ""), "node": lane.node}

    def build(self, run, rank: int = 0, wave: int = 1):
        """The pair's build as a Ray task (build.stagger is this host's: `rank` and `wave` unused here)."""
        from ..compile.build import write_manifest
        from ..core.results import EvalResult
        known = self._known()
        result, run.build, run.build_s, blobs = self.ray.get(self.remote_build.remote(run, known))
        run.extensions = run.build.get("extensions", [])
        for name, blob in blobs.items():
            self.store.add(name, blob)
        ctx = run.ctx
        if result is None or result.get("status") == "skipped":  # as the build step does on its node
            write_manifest(ctx.cache_dir, run.pair.solution, ctx.torch_version, ctx.arch, ctx.device, run.build,
                           skipped=result.get("message") if result else None)
        return EvalResult.from_dict(result) if result is not None else None

    def _known(self) -> list[str]:
        """The build directories the store holds (a build task does not send them again)."""
        on_disk = [p.name[:-len(".tar.gz")] for p in self.store.dir.glob("*.tar.gz")] if self.store.dir.is_dir() else []
        return sorted(set(on_disk) | set(self.store.refs))

    def built(self, manifest: dict[str, Any]) -> bool:
        return all(ext.get("ok") and self.store.has(Path(ext.get("dir") or "").name)
                   for ext in manifest.get("extensions", []))

    def artifacts(self, run) -> dict[str, Any]:
        names = [Path(ext.get("dir") or "").name for ext in run.extensions if ext.get("ok") and ext.get("dir")]
        return {name: self.store.ref(name) for name in names if self.store.has(name)}

    def close(self) -> None:
        import shutil
        for lane in self.all:
            lane.stop()
        if self.owned:
            self.ray.shutdown()
        shutil.rmtree(self.work, ignore_errors=True)
