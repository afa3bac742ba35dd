"""What went wrong in a worker, as a status and one actionable line: the CUDA errors a kernel
causes and what they usually mean, the classification of an exception by phase and by whose code
raised it (harness/core/blame.py), and what looks wrong about tensors passed to an extension."""
from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.blame import blame
from .build import BuildError, InlineMisuse, NeedsCuda
from ..core.problems import exception_location
from ..core.results import Status
from ..isolate.sandbox import limit_message

if TYPE_CHECKING:
    from ..isolate.isolation import Outcome

_NO_CUDA_MARKERS = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver",
                    "No CUDA GPUs are available", "CUDA driver initialization failed")


# CUDA errors a kernel causes, and what they usually mean.
CUDA_ERRORS = (
    ("an illegal memory access was encountered", "illegal memory access",
     "a kernel read or wrote outside its buffers: check index bounds, and that every pointer is a "
     "CUDA tensor of the expected size"),
    ("misaligned address", "misaligned address",
     "a vector access (float2/float4, 16-byte loads) on a pointer not aligned to its size: check "
     "offsets and storage_offset, and that tensors are contiguous"),
    ("unspecified launch failure", "launch failure",
     "the kernel faulted (often an out-of-bounds access) or was killed"),
    ("an illegal instruction was encountered", "illegal instruction", "the kernel hit a trap or an invalid instruction"),
    ("device-side assert triggered", "device-side assert", "an assert in device code failed"),
    ("invalid configuration argument", "invalid launch configuration",
     "grid or block dimensions out of range or zero (more than 1024 threads per block? an empty grid?)"),
    ("too many resources requested for launch", "too many resources for launch",
     "too many registers or too much shared memory per block for this block size"),
    ("invalid device function", "invalid device function", "the kernel was not compiled for this GPU's architecture"),
    ("no kernel image is available", "no kernel image", "the kernel was not compiled for this GPU's architecture"),
)


_CUDA_FAULT_MARKERS = ("cuda error", "cuda kernel errors might be asynchronously reported", "cudaerror",
                       "cudnn_status_execution_failed", "cublas_status_execution_failed")


def cuda_error(text: str, exc: BaseException | None = None) -> tuple[str, str] | None:
    """(short name, explanation) of a CUDA error in an exception (its text; torch's AcceleratorError
    is one whatever it says). A kernel's fault is asynchronous: it surfaces at the next call that
    synchronizes, wherever that is, so the name comes from the error, not from where it was raised."""
    lowered = text.lower()
    for needle, name, meaning in CUDA_ERRORS:
        if needle in lowered:
            return name, meaning
    if (exc is not None and type(exc).__name__ == "AcceleratorError") or any(m in lowered for m in _CUDA_FAULT_MARKERS):
        said = re.search(r"cuda error: ([^\n]+)", text, re.IGNORECASE)
        name = said.group(1).strip().rstrip(".") if said else text.splitlines()[0][:120]
        return name, "a CUDA error in a process that ran the solution's code: a kernel of the solution faulted"
    return None


class Failure(Exception):
    def __init__(self, status: Status, message: str, detail: str = "", **fields: Any):
        self.status, self.message, self.detail, self.fields = status, message, detail, fields
        super().__init__(message)


def classify(exc: BaseException, phase: str, solution_path: Path, device: str,
             problem_path: Path | None = None, solution_ran: bool = True,
             limits: dict[str, Any] | None = None) -> Failure:
    """Map an exception in `phase` to a status and one actionable line. A CUDA error raised once
    the solution's code has run in this process (`solution_ran`: its import began) is the
    solution's, wherever it surfaces: a kernel's fault is reported at the next call that
    synchronizes, often the harness's own (a sync, a handoff). Any other exception the harness or
    the problem file raised itself (harness/core/blame.py) is a harness_error naming that frame. An
    error from one of the sandbox's `limits` (harness/isolate/sandbox.py) says which, by its config key."""
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, NeedsCuda):
        return Failure(Status.SKIPPED, f"needs a CUDA device: {exc}")
    if isinstance(exc, BuildError):
        return Failure(Status.BUILD_ERROR, str(exc), exc.log)
    if isinstance(exc, InlineMisuse):
        return Failure(Status.BUILD_ERROR, str(exc), detail)
    text = f"{type(exc).__name__}: {exc}".strip()
    first_line = text.splitlines()[0] if text else type(exc).__name__
    hit = next((m for e in exception_chain(exc) if (m := limit_message(e, limits))), None)
    if hit:
        first_line = f"{first_line} (the sandbox refused {hit})"
    where = exception_location(exc, solution_path)
    if device == "cpu" and any(m in text for m in _NO_CUDA_MARKERS):
        return Failure(Status.SKIPPED, f"needs a CUDA device ({first_line}) at {where}", detail)
    import torch
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text.lower() \
            or "can't allocate memory" in text:
        return Failure(Status.OOM, f"out of memory during {phase}: {first_line} at {where}", detail)
    if phase in ("load", "build"):
        return Failure(Status.LOAD_ERROR, f"{where}: {first_line}", detail)
    named = cuda_error(text, exc)
    if named and solution_ran:  # by cause, not by frame: the solution's kernel faulted
        return Failure(Status.RUNTIME_ERROR, f"{phase}: CUDA error: {named[0]} ({named[1]}), raised at {where}",
                       detail, cuda_error=named[0])
    owner = blame(exc, problem_path)
    if owner.owner == "harness":
        return Failure(Status.HARNESS_ERROR, f"harness error in phase '{phase}' (not the solution's fault): "
                       f"{first_line} at {owner.where or 'an unknown place'}", detail)
    if owner.owner == "problem":
        return Failure(Status.HARNESS_ERROR, f"the problem's reference code failed in phase '{phase}' (not the "
                       f"solution's fault): {first_line} at {owner.where}", detail)
    return Failure(Status.RUNTIME_ERROR, f"{phase}: {first_line} at {where}", detail)


def exception_chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    while exc is not None and exc not in found and len(found) < 10:
        found.append(exc)
        exc = exc.__cause__ or exc.__context__
    return found


def argument_notes(args: list, device: str) -> list[str]:
    """What looks wrong about the tensors passed to an extension function."""
    import torch
    notes = []
    for i, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor):
            continue
        what = f"argument {i} ({arg.dtype} {list(arg.shape)})"
        if device == "cuda" and arg.device.type != "cuda":
            notes.append(f"{what} is a {arg.device.type.upper()} tensor: CUDA code that dereferences it reads "
                         f"host memory (use None / an empty CUDA tensor, or check has_value / numel in C++)")
        elif arg.numel() and not arg.is_contiguous():
            notes.append(f"{what} is not contiguous (stride {list(arg.stride())}): call .contiguous() "
                         f"or index with its strides")
        elif arg.numel() and arg.data_ptr() % 16:
            notes.append(f"{what} is not 16-byte aligned (storage offset {arg.storage_offset()})")
    return notes


def failure(outcome: "Outcome", limit_hint: str = "") -> tuple[Status, str, str, str] | None:
    """(status, message, detail, phase) when a child (a worker, a build or compile step; its
    harness/isolate/isolation.py Outcome) did not finish cleanly."""
    phase = outcome.phase
    if outcome.timed_out:
        message = outcome.timeout_message or (f"timed out in phase '{phase}': no result after {outcome.limit_s:g} s "
                                              f"{limit_hint}; the worker was killed")
        return Status.TIMEOUT, message, outcome.log_tail, phase
    error = outcome.last("error")
    if error:
        return (Status(error["status"]), error["message"], error.get("detail", ""), error.get("phase", phase))
    if outcome.last("done") is None or outcome.returncode != 0:
        how = f"signal {outcome.signal_name}" if outcome.signal_name else f"exit code {outcome.returncode}"
        return (Status.CRASHED, f"worker died ({how}) in phase '{phase}' without reporting", outcome.log_tail, phase)
    return None


def limit_hint(outcome: "Outcome") -> str:
    return "(timeouts.build_s)" if outcome.phase == "build" else "(timeouts.run_s)"
