"""Plain data across the boundary between the grader and a student's process.

Both sides of a graded submission (the trusted judge, which holds the tests,
and the sandboxed student process, which holds only the student's code) talk
through one socket, in messages that carry **plain data only**: ``None``,
booleans, numbers, strings, bytes, lists, tuples, dicts, sets, tensors and
NumPy arrays of numbers, ``torch.dtype``, ``torch.Size`` and a few more. A
message is a JSON header followed by raw byte blobs (a tensor's bytes); it is
decoded by building exactly those types, never by unpickling, ``torch.load``
or importing anything named in the message, so whatever bytes a hostile
student writes on the socket, the judge gets plain values or a
:class:`ProtocolError`.

A value that is not plain data is handed to a *codec hook* (see
:class:`Codec`): the judge turns its own functions into callbacks and sends
``torch.nn`` modules by value; the student side turns its own objects (a class
instance, a function) into handles the judge can call. Neither side ever
rebuilds the other's objects.

Framing: ``>II`` (header length, number of blobs), the UTF-8 JSON header, then
each blob as ``>Q`` length and bytes. Every read has a deadline
(:class:`Timeout`) and a size limit.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = [
    "ProtocolError",
    "Timeout",
    "Closed",
    "Codec",
    "encode",
    "decode",
    "send",
    "recv",
    "DTYPES",
]

MAX_HEADER = 8 * 1024 * 1024
MAX_MESSAGE = 1024 * 1024 * 1024
MAX_DEPTH = 64

DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    )
}
NP_DTYPES = {
    name: np.dtype(name)
    for name in (
        "bool",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message of plain data."""


class Timeout(Exception):
    """No complete message arrived before the deadline."""


class Closed(Exception):
    """The other side closed the connection (its process ended)."""


class Unsendable(TypeError):
    """A value that is not plain data, and that the codec has no hook for."""


class Codec:
    """How one side encodes what is not plain data, and decodes the other side's tags.

    The base codec accepts plain data only. Subclasses override
    :meth:`encode_other` (return a JSON-able tag for an object, or raise
    :class:`Unsendable`) and :meth:`decode_tag` (for the extra tags they accept).
    """

    def tensor_flag(self, tensor: torch.Tensor) -> bool:
        """The flag sent with a tensor (whether it takes part in autograd); False by default."""
        return False

    def tensor_in(self, tensor: torch.Tensor, flag: bool) -> torch.Tensor:
        """A decoded tensor, given the flag it came with; kept as it is by default."""
        return tensor

    def encode_other(self, value: Any, blobs: list[bytes]) -> Any:
        raise Unsendable(f"a {type(value).__name__} object cannot be sent (not plain data)")

    def decode_tag(self, tag: str, body: dict, blobs: list[bytes], depth: int) -> Any:
        raise ProtocolError(f"unknown tag {tag!r}")


PLAIN = Codec()


# -- tensors -----------------------------------------------------------------------------------


def tensor_bytes(t: torch.Tensor) -> tuple[str, list[int], bytes]:
    """(dtype name, shape, raw bytes) of a dense CPU copy of ``t``."""
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.to("cpu").resolve_conj().resolve_neg().contiguous()
    name = str(t.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise Unsendable(f"tensors of dtype {t.dtype} cannot be sent")
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return name, [int(s) for s in t.shape], data


def tensor_from_bytes(name: Any, shape: Any, data: bytes) -> torch.Tensor:
    """A new tensor from :func:`tensor_bytes`' output; ``ProtocolError`` if inconsistent."""
    dtype = DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise ProtocolError(f"bad tensor dtype {name!r}")
    if not (
        isinstance(shape, list)
        and len(shape) <= 32
        and all(type(s) is int and 0 <= s < 2**40 for s in shape)
    ):
        raise ProtocolError("bad tensor shape")
    numel = math.prod(shape)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if numel * itemsize != len(data):
        raise ProtocolError("tensor size does not match its bytes")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    if dtype == torch.bool:  # any byte but 0 is True: no bool tensor holding a 2
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(shape) != 0
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape).clone()


# -- values ------------------------------------------------------------------------------------


def _is_plain_scalar(value: Any) -> bool:
    return value is None or type(value) in (bool, int, float, str)


def encode(value: Any, blobs: list[bytes], codec: Codec = PLAIN, depth: int = 0) -> Any:
    """``value`` as JSON-able data, appending tensor and byte blobs to ``blobs``."""
    if depth > MAX_DEPTH:
        raise Unsendable("the value is nested too deeply to send")
    if _is_plain_scalar(value):
        if type(value) is float and not math.isfinite(value):
            return {"f": repr(value)}
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int) and not isinstance(value, torch.Tensor):
        return int.__int__(value) if type(value) is not int else value
    if isinstance(value, float):
        return encode(float.__float__(value), blobs, codec, depth)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, torch.Tensor):
        name, shape, data = tensor_bytes(value)
        blobs.append(data)
        return {"T": [len(blobs) - 1, name, shape, bool(codec.tensor_flag(value))]}
    if isinstance(value, np.ndarray):
        if value.dtype.name not in NP_DTYPES:
            raise Unsendable(f"NumPy arrays of dtype {value.dtype} cannot be sent")
        arr = np.ascontiguousarray(value)
        blobs.append(arr.tobytes())
        return {"N": [len(blobs) - 1, arr.dtype.name, list(arr.shape)]}
    if isinstance(value, np.generic) and value.dtype.name in NP_DTYPES:
        return encode(value.item(), blobs, codec, depth + 1)
    if isinstance(value, complex):
        return {"c": [float(value.real), float(value.imag)]}
    if isinstance(value, bytes | bytearray):
        blobs.append(bytes(value))
        return {"b": len(blobs) - 1}
    if isinstance(value, torch.Size):
        return {"sz": [int(s) for s in value]}
    if isinstance(value, torch.dtype):
        return {"dt": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"dev": str(value)}
    if type(value) is tuple or (isinstance(value, tuple) and not hasattr(value, "_fields")):
        return {"t": [encode(v, blobs, codec, depth + 1) for v in tuple.__iter__(value)]}
    if isinstance(value, list):
        return [encode(v, blobs, codec, depth + 1) for v in list.__iter__(value)]
    if isinstance(value, dict):
        return {
            "d": [
                [encode(k, blobs, codec, depth + 1), encode(v, blobs, codec, depth + 1)]
                for k, v in dict.items(value)
            ]
        }
    if isinstance(value, set | frozenset):
        return {
            "s": [encode(v, blobs, codec, depth + 1) for v in value],
            "frozen": isinstance(value, frozenset),
        }
    if isinstance(value, slice):
        return {
            "sl": [
                encode(x, blobs, codec, depth + 1) for x in (value.start, value.stop, value.step)
            ]
        }
    if value is Ellipsis:
        return {"el": 0}
    return codec.encode_other(value, blobs)


def _blob(blobs: list[bytes], index: Any) -> bytes:
    if type(index) is not int or not 0 <= index < len(blobs):
        raise ProtocolError("bad blob index")
    return blobs[index]


def decode(data: Any, blobs: list[bytes], codec: Codec = PLAIN, depth: int = 0) -> Any:
    """The value :func:`encode` made, built from plain types only."""
    if depth > MAX_DEPTH + 1:
        raise ProtocolError("nested too deeply")
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is float:
        return data
    if type(data) is list:
        return [decode(v, blobs, codec, depth + 1) for v in data]
    if type(data) is not dict or len(data) not in (1, 2):
        raise ProtocolError("malformed value")
    tag = next(iter(data))
    body = data[tag]
    if type(tag) is str and tag in _LEAVES:
        return _LEAVES[tag](body, blobs)
    if tag == "T":
        if not (type(body) is list and len(body) == 4 and type(body[3]) is bool):
            raise ProtocolError("malformed tensor")
        return codec.tensor_in(tensor_from_bytes(body[1], body[2], _blob(blobs, body[0])), body[3])
    if tag in ("t", "d", "s", "sl"):
        return _container(tag, data, blobs, codec, depth)
    if type(tag) is not str:
        raise ProtocolError("malformed value")
    return codec.decode_tag(tag, data, blobs, depth)


def _container(tag: str, data: dict, blobs: list[bytes], codec: Codec, depth: int) -> Any:
    """A tuple, dict, set or slice, its items decoded."""
    body = data[tag]
    if type(body) is not list:
        raise ProtocolError(f"malformed {_CONTAINERS[tag]}")
    if tag == "t":
        return tuple(decode(v, blobs, codec, depth + 1) for v in body)
    if tag == "sl":
        if len(body) != 3:
            raise ProtocolError("malformed slice")
        return slice(*(decode(x, blobs, codec, depth + 1) for x in body))
    if tag == "s":
        try:
            items = [decode(v, blobs, codec, depth + 1) for v in body]
            return frozenset(items) if data.get("frozen") is True else set(items)
        except TypeError:
            raise ProtocolError("unhashable set item") from None
    out = {}
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise ProtocolError("malformed dict item")
        key = decode(pair[0], blobs, codec, depth + 1)
        try:
            out[key] = decode(pair[1], blobs, codec, depth + 1)
        except TypeError:
            raise ProtocolError("unhashable dict key") from None
    return out


_CONTAINERS = {"t": "tuple", "d": "dict", "s": "set", "sl": "slice"}


def _special_float(body: Any, blobs: list[bytes]) -> float:
    if body not in ("nan", "inf", "-inf"):
        raise ProtocolError("bad float")
    return float(body)


def _array(body: Any, blobs: list[bytes]) -> np.ndarray:
    if not (type(body) is list and len(body) == 3 and body[1] in NP_DTYPES):
        raise ProtocolError("malformed array")
    dtype = NP_DTYPES[body[1]]
    raw = _blob(blobs, body[0])
    shape = body[2]
    if not (type(shape) is list and all(type(s) is int and s >= 0 for s in shape)):
        raise ProtocolError("bad array shape")
    if math.prod(shape) * dtype.itemsize != len(raw):
        raise ProtocolError("array size does not match its bytes")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def _complex(body: Any, blobs: list[bytes]) -> complex:
    if not (type(body) is list and len(body) == 2 and all(type(x) is float for x in body)):
        raise ProtocolError("malformed complex")
    return complex(body[0], body[1])


def _size(body: Any, blobs: list[bytes]) -> torch.Size:
    if not (type(body) is list and all(type(s) is int for s in body)):
        raise ProtocolError("malformed size")
    return torch.Size(body)


def _dtype(body: Any, blobs: list[bytes]) -> torch.dtype:
    if body not in DTYPES:
        raise ProtocolError("bad dtype")
    return DTYPES[body]


def _device(body: Any, blobs: list[bytes]) -> torch.device:
    if body not in ("cpu", "cuda", "mps") and not (
        isinstance(body, str) and body.startswith("cuda:") and body[5:].isdigit()
    ):
        raise ProtocolError("bad device")
    return torch.device(body)


_LEAVES: dict[str, Callable[[Any, list[bytes]], Any]] = {
    "f": _special_float,
    "N": _array,
    "c": _complex,
    "b": lambda body, blobs: bytes(_blob(blobs, body)),
    "sz": _size,
    "dt": _dtype,
    "dev": _device,
    "el": lambda body, blobs: Ellipsis,
}


# -- framing -----------------------------------------------------------------------------------


def send(sock: socket.socket, header: dict, blobs: list[bytes] = ()) -> None:
    """Write one message: a JSON header and its blobs."""
    head = json.dumps(header, allow_nan=False, separators=(",", ":")).encode()
    parts = [struct.pack(">II", len(head), len(blobs)), head]
    for blob in blobs:
        parts += [struct.pack(">Q", len(blob)), blob]
    if sum(len(b) for b in blobs) < 1 << 20:
        sock.sendall(b"".join(parts))
    else:
        for part in parts:
            sock.sendall(part)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout()
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            chunk = sock.recv(min(n - got, 1 << 20))
        except TimeoutError:
            raise Timeout() from None
        except (ConnectionResetError, BrokenPipeError):
            raise Closed() from None
        if not chunk:
            raise Closed()
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(
    sock: socket.socket, deadline: float | None = None, limit: int = MAX_MESSAGE
) -> tuple[dict, list[bytes]]:
    """Read one message (header, blobs) before ``deadline`` (``time.monotonic()``)."""
    head_len, n_blobs = struct.unpack(">II", _recv_exact(sock, 8, deadline))
    if head_len > min(limit, MAX_HEADER) or n_blobs > 1_000_000:
        raise ProtocolError("message too large")
    try:
        header = json.loads(_recv_exact(sock, head_len, deadline))
    except (ValueError, RecursionError, MemoryError):
        raise ProtocolError("the header is not valid JSON") from None
    if type(header) is not dict:
        raise ProtocolError("the header is not a JSON object")
    blobs, total = [], head_len
    for _ in range(n_blobs):
        (size,) = struct.unpack(">Q", _recv_exact(sock, 8, deadline))
        total += size
        if total > limit:
            raise ProtocolError(f"message larger than {limit // 2**20} MB")
        blobs.append(_recv_exact(sock, size, deadline))
    return header, blobs


def describe(value: Any) -> str:
    """A short description of a value's type for messages (``Tensor``, ``tuple``...)."""
    name = getattr(value, "remote_type", None)
    return name if isinstance(name, str) else type(value).__name__


def call_name(name: str, args: tuple, kwargs: dict, summarize: Callable[[Any], str]) -> str:
    """``f(Tensor(3, 4), 2, top_k=5)``: what was called, for feedback."""
    parts = [summarize(a) for a in args] + [f"{k}={summarize(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"
