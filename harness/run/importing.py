"""Where a worker imports solution code, the only place the harness does: a solution's module
run with a copy of its problem's names, as KernelBench's eval does, with the import hook that
records (build and compile steps) or loads (every other mode) its load_inline libraries, and two
versions of one solution imported side by side (the CI gate's yardstick). A mixin of
harness/run/worker.py Worker, which holds the request and the event sink."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from ..core.blame import for_solution
from ..compile.build import ExtensionDeferred, install_hook
from ..compile.failures import Failure, argument_notes, exception_chain
from ..core.problems import _display, load_module, namespace_of
from ..core.results import Status


class SolutionImports:
    def load_solution(self, problem=None):
        """The solution's ModelNew, its module run with a copy of its problem's names (`problem`, or
        the request's problem file, loaded here), as KernelBench's eval does."""
        if problem is None and self.req.get("problem_path"):
            problem = load_module(Path(self.req["problem_path"]))
        return self._load_solution(namespace_of(problem))

    @property
    def records(self) -> bool:
        """A build step or compile-only's: load_inline calls are recorded, not built."""
        return self.req["mode"] in ("build", "compile")

    def _load_solution(self, names: dict):
        self._install_hook()
        return self._import_solution(self.solution_path, names)

    def _install_hook(self) -> None:
        # A build step (and compile-only's) compiles nothing: it records each load_inline call for
        # the runner's compile steps (harness/compile/recipes.py). A worker imports the libraries the lane
        # staged for it (copies in its scratch; with the sandbox off, the cache's folders) and builds
        # anything else in a folder of its own, never shared: its scratch, or with the sandbox off
        # the cache's `unshared` folder.
        cache_root = Path(self.sandbox["scratch"]) / "builds" if self.sandbox["mode"] != "off" \
            else Path(self.req["cache_dir"]) / "unshared"
        install_hook(cache_root, self.req["arch"], self.device == "cuda", self.on_build,
                     compile_only=self.req["mode"] == "compile", display=_display,
                     wrap=self.recording if self.req["mode"] == "diagnose" else None,
                     prebuilt=self.req.get("prebuilt") or {},
                     record=(lambda recipe: self.events.emit("recipe", recipe=recipe)) if self.records else None)

    def _import_solution(self, path: Path, names: dict):
        """The ModelNew of the solution file `path`, its folder first on sys.path."""
        self.solution_path = path
        self.set_phase("load")
        sys.path.insert(0, str(path.parent))
        self.solution_ran = True
        try:
            with torch.no_grad():
                module = for_solution(load_module, path, prefix="kb_solution", names=names)
        except BaseException as exc:
            deferred = next((e for e in exception_chain(exc) if isinstance(e, ExtensionDeferred)), None)
            if self.records and deferred is not None:  # its worker imports it once the recipes are built
                self.events.emit("deferred", message=str(deferred))
                return None
            raise
        model_new = getattr(module, "ModelNew", None)
        if model_new is None:
            raise Failure(Status.LOAD_ERROR, f"{path}: defines no ModelNew")
        return model_new

    def import_version(self, path: Path, names: dict, *, last: bool):
        """The ModelNew of `path`, one version of a solution of which this process imports several
        (a yardstick worker), after _install_hook: its import hook's staged libraries are every
        version's (their build folders are named by their sources). Unless it is the `last`, what
        it brought from its own family's folders leaves sys.modules and sys.path after its import,
        so that the next version imports its own helper modules; the classes already made keep
        theirs."""
        path_before, modules_before = list(sys.path), set(sys.modules)
        model_new = self._import_solution(path, names)
        if not last:
            tree = path.resolve().parent.parent
            for name in set(sys.modules) - modules_before:
                where = getattr(sys.modules[name], "__file__", None) or ""
                if where and Path(where).resolve().is_relative_to(tree):
                    del sys.modules[name]
            sys.path[:] = path_before
        return model_new

    def run_build(self) -> None:
        self.load_solution()

    def run_compile(self) -> None:
        """Compile-only: the solution's extensions are compiled, not linked or loaded."""
        self.load_solution()

    # -- diagnosis of CUDA errors ----------------------------------------------------------------
    def recording(self, module, name: str):
        """Wrap an extension module so every call is recorded (function, caller line, notes on
        its tensor arguments) and followed by a device sync: a kernel fault then surfaces in the
        call that launched it."""
        worker = self

        class Recorded:
            def __getattr__(self, item: str):
                value = getattr(module, item)
                if item.startswith("__") or not callable(value):
                    return value

                def call(*args, **kwargs):
                    frame = sys._getframe(1)
                    worker.last_call = {"function": f"{name}.{item}",
                                        "where": f"{_display(Path(frame.f_code.co_filename))}:{frame.f_lineno}",
                                        "notes": argument_notes(list(args) + list(kwargs.values()), worker.device),
                                        "inside": True}
                    result = for_solution(value, *args, **kwargs)
                    worker.sync()
                    worker.last_call["inside"] = False
                    return result
                return call
        return Recorded()
