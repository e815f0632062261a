"""The private channel between the trusted judge and a candidate runner.

Messages are plain Python data (dicts, lists, numbers, strings) and tensors, framed over a
socket pair that only the two processes hold, never over stdout or exit codes: what a
candidate prints proves nothing.

Tensors cross in two ways:

- CPU tensors as their bytes (dtype, shape, strides, offset, data): a copy, so neither
  side can touch the other's memory. CPU workloads are small by design.
- CUDA tensors by CUDA IPC (torch's ``reduce_tensor``): the receiver maps the sender's
  device memory, no copy. The judge therefore only ever sends *clones* it can afford to
  have scribbled on, and checks its own copies afterwards.

The receiving side unpickles with an allowlist: only torch dtypes/devices/sizes, tensor
and storage rebuild functions and plain containers can be named. A runner cannot make
the judge import or call anything else (a tensor subclass defined by the candidate, or
``os.system``, is refused with :class:`ChannelError`).

Not covered: confidentiality from a process with the same uid that can ptrace either side.
"""

from __future__ import annotations

import io
import pickle
import socket
from multiprocessing.connection import Connection
from typing import Any

import torch

MAX_MESSAGE = 1 << 31


class ChannelError(RuntimeError):
    """The peer sent something that is not a valid message (or hung up)."""


def _rebuild_cpu(dtype: torch.dtype, size: tuple, stride: tuple, offset: int,
                 numel_storage: int, data: bytes) -> torch.Tensor:
    if not numel_storage:
        return torch.empty(size, dtype=dtype)
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype)
    return torch.as_strided(flat, size, stride, offset).clone()


def _reduce_tensor(t: torch.Tensor) -> tuple:
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    t = t.detach()
    if t.is_cuda:
        from torch.multiprocessing.reductions import reduce_tensor

        return reduce_tensor(t)
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.numel() == 0:
        return (_rebuild_cpu, (t.dtype, tuple(t.shape), tuple(t.stride()), 0, 0, b""))
    # send only the span of storage the view covers
    lo = t.storage_offset()
    hi = lo + 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    span = torch.as_strided(t, (hi - lo,), (1,), lo).contiguous()
    data = span.view(torch.uint8).numpy().tobytes() if span.dtype != torch.bool else \
        span.to(torch.uint8).numpy().tobytes()
    if span.dtype == torch.bool:
        return (_rebuild_bool, (tuple(t.shape), tuple(t.stride()), data))
    return (_rebuild_cpu, (t.dtype, tuple(t.shape), tuple(t.stride()), 0, hi - lo, data))


def _rebuild_bool(size: tuple, stride: tuple, data: bytes) -> torch.Tensor:
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.bool) if data else \
        torch.empty(0, dtype=torch.bool)
    return torch.as_strided(flat, size, stride, 0).clone()


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return _reduce_tensor(obj)
        return NotImplemented


_ALLOWED_TORCH = {"device", "Size", "Tensor", "UntypedStorage", "TypedStorage"}
_ALLOWED = {
    ("solforge.bench.runner.channel", "_rebuild_cpu"),
    ("solforge.bench.runner.channel", "_rebuild_bool"),
    ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"),
    ("torch.multiprocessing.reductions", "rebuild_typed_storage"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
    ("torch.storage", "_LegacyStorage"),
    ("torch.nn.parameter", "Parameter"),
    ("builtins", "complex"),
    ("builtins", "slice"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and (name in _ALLOWED_TORCH
                                  or isinstance(getattr(torch, name, None), torch.dtype)):
            return getattr(torch, name)
        if (module, name) in _ALLOWED:
            mod = __import__(module, fromlist=[name])
            return getattr(mod, name)
        raise ChannelError(f"refused to unpickle {module}.{name}: not a tensor or plain data")


def dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=5).dump(obj)
    return buf.getvalue()


def loads(data: bytes) -> Any:
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except ChannelError:
        raise
    except Exception as e:
        raise ChannelError(f"malformed message: {type(e).__name__}: {e}") from None


class Channel:
    """One end of the judge/runner socket pair."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(Connection(fd))

    def send(self, obj: Any) -> None:
        self.conn.send_bytes(dumps(obj))

    def recv(self, timeout: float | None = None) -> Any:
        if timeout is not None and not self.conn.poll(timeout):
            raise TimeoutError(f"no message within {timeout:.1f} s")
        try:
            data = self.conn.recv_bytes(MAX_MESSAGE)
        except (EOFError, OSError) as e:
            raise ChannelError(f"peer hung up ({type(e).__name__})") from None
        return loads(data)

    def poll(self, timeout: float = 0.0) -> bool:
        return self.conn.poll(timeout)

    def close(self) -> None:
        self.conn.close()


def socket_pair() -> tuple[Channel, socket.socket]:
    """A channel for this side and the raw socket to hand to the child (inheritable fd)."""
    ours, theirs = socket.socketpair()
    theirs.set_inheritable(True)
    return Channel(Connection(ours.detach())), theirs
