"""Tensors handed from a worker to its lane without a copy to the host: CUDA IPC.

Worker side, `export(tensor)`: a description of the tensor (dtype, shape, strides) and where it
lives. A CUDA tensor is described by the IPC handle of the device allocation that holds it and
its byte offset there (driver API: cuMemGetAddressRange, cuIpcGetMemHandle), so nothing is
copied. Anything else, or memory that cannot be exported (e.g. the allocator's expandable
segments), goes as raw bytes in the message's payload.

Lane side, `Imports`: maps each allocation once (cuIpcOpenMemHandle), checks the described tensor
lies inside it, and gives a view of the worker's memory; the lane copies what it keeps
(`snapshot`) and closes the mappings before the worker goes on. Only data crosses: dtypes come
from a fixed list, sizes are checked, and nothing sent is unpickled or executed.

The driver is reached through ctypes (libcuda.so.1), in the context torch made current.
"""
from __future__ import annotations

import ctypes
from typing import Any

import torch

_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                               torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
                               torch.complex128)}


class HandoffError(Exception):
    """A tensor description that cannot be honoured (bad dtype, out of bounds, unmappable)."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


_driver = None


def _cuda():
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        ptr, size = ctypes.c_uint64, ctypes.c_size_t
        lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ptr), ctypes.POINTER(size), ptr]
        lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ptr]
        lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ptr), _Handle, ctypes.c_uint]
        lib.cuIpcCloseMemHandle.argtypes = [ptr]
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _driver = lib
    return _driver


def _check(rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(rc, ctypes.byref(name))
        raise HandoffError(f"{what}: CUDA driver error {rc} ({(name.value or b'?').decode()})")


def _address_range(address: int) -> tuple[int, int]:
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(_cuda().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(address)),
           "cuMemGetAddressRange")
    return base.value, size.value


def _describe(t: torch.Tensor) -> dict[str, Any]:
    return {"dtype": str(t.dtype), "shape": list(t.shape), "stride": list(t.stride()),
            "offset": t.storage_offset(), "device": t.device.type}


def _as_bytes(t: torch.Tensor) -> bytes:
    """The tensor's bytes, any size (ctypes.string_at takes a C int: 2 GiB and more failed)."""
    host = t.detach().to("cpu").contiguous()
    nbytes = host.numel() * host.element_size()
    if not nbytes:
        return b""
    return bytes(memoryview((ctypes.c_char * nbytes).from_address(host.data_ptr())))


def export(t: torch.Tensor, payload: list[bytes]) -> dict[str, Any]:
    """Worker side: describe `t`; bytes that must travel are appended to `payload` (the message's
    payload is their concatenation)."""
    meta = _describe(t)
    storage = t.untyped_storage()
    if t.is_cuda and storage.nbytes():
        try:
            base, size = _address_range(storage.data_ptr())
            handle = _Handle()
            _check(_cuda().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(base)), "cuIpcGetMemHandle")
            meta.update(kind="ipc", handle=bytes(handle).hex(), alloc_bytes=size,
                        storage_at=storage.data_ptr() - base, storage_bytes=storage.nbytes())
            return meta
        except (HandoffError, OSError) as exc:  # not exportable: fall back to bytes
            meta["ipc_error"] = str(exc)
    data = _as_bytes(t)
    meta.update(kind="bytes", payload_at=sum(len(p) for p in payload), nbytes=len(data),
                shape=list(t.shape), stride=list(t.contiguous().stride()) if t.numel() else list(t.stride()), offset=0)
    payload.append(data)
    return meta


class _CudaMemory:
    """__cuda_array_interface__ over raw device memory, for torch.as_tensor (no copy)."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}


class Imports:
    """Lane side: views of tensors a worker described. Use as a context manager: every mapping
    is closed on exit, after the device finished what was queued on it; views must not be used
    after that (take `snapshot`s)."""

    def __init__(self, device: str):
        self.device = device
        self.mapped: dict[str, tuple[int, int]] = {}   # handle -> (address, bytes)

    def __enter__(self) -> "Imports":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.mapped:
            torch.cuda.synchronize()
            for address, _ in self.mapped.values():
                _cuda().cuIpcCloseMemHandle(ctypes.c_uint64(address))
            self.mapped.clear()

    def _map(self, handle_hex: str) -> tuple[int, int]:
        if handle_hex not in self.mapped:
            raw = bytes.fromhex(handle_hex)
            if len(raw) != 64:
                raise HandoffError("an IPC handle is 64 bytes")
            torch.cuda.synchronize()  # torch's context is current on this thread
            address = ctypes.c_uint64()
            _check(_cuda().cuIpcOpenMemHandle_v2(ctypes.byref(address), _Handle.from_buffer_copy(raw), 1),
                   "cuIpcOpenMemHandle")
            base, size = _address_range(address.value)
            self.mapped[handle_hex] = (base, size)
        return self.mapped[handle_hex]

    def tensor(self, meta: dict[str, Any], payload: bytes | bytearray) -> torch.Tensor:
        """A view of the described tensor (ipc: the worker's memory; bytes: the payload)."""
        dtype = _DTYPES.get(meta.get("dtype"))
        if dtype is None:
            raise HandoffError(f"unsupported dtype {meta.get('dtype')!r}")
        shape, stride, offset = list(meta["shape"]), list(meta["stride"]), int(meta["offset"])
        if len(shape) != len(stride) or min(shape + [0]) < 0 or offset < 0:
            raise HandoffError("inconsistent shape, strides or offset")
        item = torch.empty((), dtype=dtype).element_size()
        if meta.get("kind") == "ipc":
            base, size = self._map(str(meta["handle"]))
            start, nbytes = int(meta["storage_at"]), int(meta["storage_bytes"])
            if start < 0 or nbytes < 0 or start + nbytes > size:
                raise HandoffError(f"storage [{start}, {start + nbytes}) outside its allocation of {size} bytes")
            raw = torch.as_tensor(_CudaMemory(base + start, nbytes), device=self.device)
        elif meta.get("kind") == "bytes":
            start, nbytes = int(meta["payload_at"]), int(meta["nbytes"])
            if start < 0 or nbytes < 0 or start + nbytes > len(payload):
                raise HandoffError("payload range outside the message")
            raw = torch.frombuffer(payload, dtype=torch.uint8, offset=start, count=nbytes) if nbytes \
                else torch.empty(0, dtype=torch.uint8)
        else:
            raise HandoffError(f"unknown tensor kind {meta.get('kind')!r}")
        if raw.numel() % item:
            raise HandoffError("storage size is not a multiple of the element size")
        typed = raw.view(dtype)
        if any(s == 0 for s in shape):
            return torch.empty(shape, dtype=dtype, device=typed.device)
        return typed.as_strided(shape, stride, offset)  # torch checks the view stays inside the storage

    def byte_range(self, meta: dict[str, Any]) -> tuple[str, int, int] | None:
        """(allocation, first byte, end) of an ipc tensor, for overlap checks; None otherwise."""
        if meta.get("kind") != "ipc" or not all(meta["shape"]):
            return None
        item = _DTYPES[meta["dtype"]].itemsize
        span = 1 + sum((n - 1) * abs(s) for n, s in zip(meta["shape"], meta["stride"]))
        start = int(meta["storage_at"]) + int(meta["offset"]) * item
        return str(meta["handle"]), start, start + span * item


def snapshot(view: torch.Tensor, device: str) -> torch.Tensor:
    """A copy in memory of our own, on `device` (the worker's memory may change after we let go)."""
    return view.to(device, copy=True)


def overlaps(a: tuple[str, int, int] | None, b: tuple[str, int, int] | None) -> bool:
    return a is not None and b is not None and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]
