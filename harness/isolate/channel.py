"""Framed messages over a Unix socket: a JSON header and an optional binary payload.

The channels between the runner and a lane and between a lane and its worker carry only data: a
message is a JSON object (never a pickle: the worker side runs solution code, and what it sends
must not be able to run code in the process that reads it) and raw bytes whose meaning the
header states. Sizes are checked before anything is allocated.

Frame: 4-byte big-endian header length, 8-byte payload length, the header's UTF-8 JSON, the payload.
"""
from __future__ import annotations

import json
import select
import socket
import struct
import time
from typing import Any

_PREFIX = struct.Struct("!IQ")
MAX_HEADER_BYTES = 64 << 20


class ChannelClosed(Exception):
    """The other end closed the channel (or died)."""


class ProtocolError(Exception):
    """The other end sent something that is not a valid frame."""


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.sock.setblocking(True)

    @classmethod
    def from_fd(cls, fd: int) -> "Channel":
        return cls(socket.socket(fileno=fd))

    @staticmethod
    def pair() -> tuple["Channel", socket.socket]:
        """A channel for this process and the socket to hand to a child (pass its fileno)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.set_inheritable(True)
        return Channel(mine), theirs

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict[str, Any], payload: bytes | bytearray | memoryview | None = None) -> None:
        header = json.dumps(message, default=str).encode()
        size = len(payload) if payload is not None else 0
        try:
            self.sock.sendall(_PREFIX.pack(len(header), size) + header)
            if size:
                self.sock.sendall(payload)
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise ChannelClosed(str(exc)) from None

    def readable(self, timeout: float | None) -> bool:
        try:
            ready, _, _ = select.select([self.sock], [], [], timeout)
        except (ValueError, OSError) as exc:  # closed here (by a stop from another thread): fd -1
            raise ChannelClosed(f"the channel was closed: {exc}") from None
        return bool(ready)

    def recv(self, timeout: float | None = None, max_payload: int = 1 << 40,
             frame_s: float | None = None) -> tuple[dict[str, Any], bytearray] | None:
        """The next message and its payload (empty when none); None when no frame began within
        `timeout` seconds (None: wait). A frame once begun must complete within `frame_s` seconds of
        its first byte (default: `timeout`): how long the wait for it to begin took does not count,
        so a frame that begins at the end of a short poll is not cut off."""
        if not self.readable(timeout):
            return None
        frame_s = timeout if frame_s is None else frame_s
        deadline = None if frame_s is None else time.monotonic() + frame_s
        prefix = self._read(_PREFIX.size, deadline)
        header_len, payload_len = _PREFIX.unpack(prefix)
        if header_len > MAX_HEADER_BYTES or payload_len > max_payload:
            raise ProtocolError(f"frame too large (header {header_len} bytes, payload {payload_len} bytes)")
        try:
            message = json.loads(bytes(self._read(header_len, deadline)))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProtocolError(f"header is not JSON: {exc}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"header is a {type(message).__name__}, not an object")
        return message, self._read(payload_len, deadline) if payload_len else bytearray()

    def _read(self, size: int, deadline: float | None) -> bytearray:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            # bytes already waiting are read even at the deadline: only a sender that stalls fails
            if deadline is not None and not self.readable(max(0.0, deadline - time.monotonic())):
                raise ProtocolError(f"frame incomplete: {got} of {size} bytes before the time limit")
            try:
                n = self.sock.recv_into(view[got:], min(size - got, 1 << 24))
            except (ConnectionResetError, OSError) as exc:
                raise ChannelClosed(str(exc)) from None
            if n == 0:
                raise ChannelClosed("the other end closed the channel")
            got += n
        return buf

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Marks:
    """A worker's timing marks to its lane (harness/run/clock.py): one-byte messages on a socket of
    their own (SOCK_SEQPACKET), each stamped by the kernel as it is sent (SO_TIMESTAMPNS, the
    realtime clock), so that the lane knows when the worker sent a mark however late it reads it
    (a lane on a busy CPU reads milliseconds late). The worker can choose when it sends a mark, not
    what time it carries. The lane's end: `drain()`; the worker's: `send(kind)`."""

    CALL, RETURNED = b"c", b"r"

    def __init__(self, sock: socket.socket):
        self.sock = sock

    @staticmethod
    def pair() -> tuple["Marks", socket.socket]:
        """The lane's end and the socket to hand to the worker (pass its fileno)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mine.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        mine.setblocking(False)
        theirs.set_inheritable(True)
        return Marks(mine), theirs

    @classmethod
    def from_fd(cls, fd: int) -> "Marks":
        return cls(socket.socket(fileno=fd))

    def send(self, kind: bytes) -> None:
        try:
            self.sock.send(kind)
        except OSError as exc:
            raise ChannelClosed(f"timing marks: {exc}") from None

    def drain(self) -> list[tuple[bytes, float]]:
        """The marks sent since the last drain, in order: (kind, when it was sent, seconds of the
        realtime clock)."""
        out = []
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(16, socket.CMSG_SPACE(16))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not data:
                break
            stamp = time.time()
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(raw) >= 16:
                    seconds, nanoseconds = struct.unpack("qq", raw[:16])
                    stamp = seconds + nanoseconds * 1e-9
            out.append((bytes(data[:1]), stamp))
        return out

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # SCM_TIMESTAMPNS is the same number
