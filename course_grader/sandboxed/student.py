"""The student's side of grading: runs one notebook's cells, then answers calls.

Started by the judge (:mod:`course_grader.judge`) as
``python -m course_grader.sandboxed.student FD`` inside the submission's sandbox.
This process holds **only the student's code**: no test, no reference value,
no score. It talks to the judge on the socket ``FD`` in messages of plain data
(:mod:`course_grader.sandboxed.wire`):

1. it receives the job (the code cells and the limits), sets its resource
   limits (and, when the sandbox started as root, drops to an unprivileged
   user of its own), sends its output (fd 1 and 2) to a file in its private
   ``/tmp``, then runs the cells top to bottom in one namespace, like "Run all"
   in Jupyter, except that a failing cell does not stop the next ones;
   ``sys.exit()`` stops the notebook; IPython-only lines arrive as
   ``get_ipython()`` calls and are answered without running anything
   (``%time`` and ``%%time`` still run their code). It reports each cell that
   failed, then ``cells-done`` with what it saw the code do (flags);
2. then it answers requests: ``resolve`` (what the notebook defines under the
   names a test needs), ``call`` (call one of them with arguments, which may
   include the judge's own functions as callbacks), ``backward`` (gradients
   through a call's result), ``getattr`` and ``release``.

Whatever the student's code does to this process (patching ``torch``,
replacing this module's functions, walking its frames, writing on the
socket), the judge gets plain data, checks it itself, and decides.
"""

from __future__ import annotations

import builtins
import importlib
import linecache
import os
import socket
import sys
import traceback
import types
from typing import Any

from course_grader.sandboxed import messages, wire
from course_grader.sandboxed.messages import (
    PORTABLE_ERRORS,
    Backward,
    Bye,
    Call,
    Callback,
    CallbackReply,
    Cell,
    CellFailed,
    CellsDone,
    ErrorReport,
    GetAttr,
    Reply,
    Resolve,
    Setup,
    Started,
    read_request,
)
from course_grader.sandboxed.rlimits import drop_privileges, set_limits

__all__ = ["main"]

_TIMED_MAGICS = {"time", "timeit", "capture", "prun"}


class _NeutralShell:
    """Answers the ``get_ipython()`` calls of a submission without running anything."""

    def __init__(self, namespace: dict) -> None:
        self._ns = namespace
        self.neutralised: list[str] = []

    def _run(self, code: str) -> None:
        exec(compile(code, "<magic>", "exec"), self._ns)

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> None:
        if name.lstrip("%") in _TIMED_MAGICS and line.strip():
            self._run(line)
        else:
            self.neutralised.append(f"%{name} {line}".strip())

    def run_cell_magic(self, name: str, line: str, cell: str) -> None:
        if name.lstrip("%") in _TIMED_MAGICS:
            self._run(cell)
        else:
            self.neutralised.append(f"%%{name} {line}".strip())

    def system(self, cmd: str) -> None:
        self.neutralised.append(f"!{cmd}")

    def getoutput(self, cmd: str, split: bool = True) -> list:
        self.neutralised.append(f"!{cmd}")
        return []

    def __getattr__(self, name: str):  # any other shell API: a no-op
        return lambda *args, **kwargs: None


# -- errors as the judge sees them ---------------------------------------------------------------


def _is_student_file(filename: str) -> bool:
    return filename.startswith("<cell ") or filename == "<magic>"


def _student_frame(tb) -> traceback.FrameSummary | None:
    frames = [f for f in traceback.extract_tb(tb) if _is_student_file(f.filename)]
    return frames[-1] if frames else None


def _short(exc: BaseException, limit: int = 200) -> str:
    try:
        text = " ".join(str(exc).split())
    except Exception:  # noqa: BLE001 - a hostile __str__
        text = ""
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _where(frame: traceback.FrameSummary | None) -> tuple[str, str]:
    """("code cell 3, line 4", "the line's text") of a frame in the student's cells."""
    if frame is None:
        return "", ""
    name = frame.filename
    place = (
        f"code cell {name[6:-1]}, line {frame.lineno}"
        if name.startswith("<cell ")
        else f"line {frame.lineno}"
    )
    line = (frame.line or linecache.getline(name, frame.lineno or 0)).strip()
    return place, line[:120]


def error_report(exc: BaseException, unsendable: bool = False) -> ErrorReport:
    """What the judge needs to re-create and explain an exception from the student's code."""
    place, line = _where(_student_frame(exc.__traceback__))
    return ErrorReport(
        type=type(exc).__name__ if type(exc).__name__ in PORTABLE_ERRORS else "",
        name=type(exc).__name__[:60],
        summary=_short(exc),
        where=place,
        line=line,
        exit=isinstance(exc, SystemExit),
        memory=isinstance(exc, MemoryError) or "can't allocate memory" in _short(exc),
        unsendable=unsendable,
    )


# -- the codec: the judge's objects in, the student's objects out -------------------------------


class CallbackError(RuntimeError):
    """A function of the grader, called from the student's code, raised (the message says what)."""


class _Callback:
    """The judge's function (a test's decoder step, say), callable from the student's code."""

    def __init__(self, server: _Server, cid: int, type_name: str, generation: int) -> None:
        self._server, self._cid, self._type = server, cid, type_name
        self._generation = generation

    def __call__(self, *args, **kwargs):
        return self._server.callback(self, args, kwargs)

    def __getattr__(self, name: str):
        raise AttributeError(
            f"the grader's {self._type} runs in the grader's process: "
            f"only calling it is possible here, not .{name}"
        )

    def __repr__(self) -> str:
        return f"<the grader's {self._type}>"


class _StudentCodec(wire.Codec):
    def __init__(self, server: _Server, grad: bool = False) -> None:
        self.server = server
        self.grad = grad
        self.inputs: list = []  # tensors of the arguments that require grad, in order
        self.outputs: list = []  # tensors of the result that require grad, in order
        self.generators: list = []

    # arguments from the judge
    def tensor_in(self, t, requires_grad: bool):
        if requires_grad and self.grad and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
            self.inputs.append(t)
        return t

    def decode_tag(self, tag: str, data: dict, blobs: list[bytes], depth: int) -> Any:
        import torch

        body = data[tag]
        if tag == "cb":
            return _Callback(self.server, int(body[0]), str(body[1]), self.server.generation)
        if tag == "ref":
            return self.server.handles[int(body)]
        if tag == "gen":
            g = torch.Generator()
            g.set_state(wire.decode(body, blobs, self, depth + 1))
            self.generators.append(g)
            return g
        if tag == "mod":
            return self._module(body, blobs, depth)
        if tag == "dc":
            module, name = str(body[0]).rsplit(".", 1)
            cls = getattr(importlib.import_module(module), name)
            fields = wire.decode(body[1], blobs, self, depth + 1)
            try:
                return cls(**fields)
            except TypeError:
                obj = object.__new__(cls)
                for k, v in fields.items():
                    object.__setattr__(obj, k, v)
                return obj
        if tag == "dti":
            import pandas as pd

            values = wire.decode(body[0], blobs, self, depth + 1)
            index = pd.DatetimeIndex(values.numpy().astype("datetime64[ns]"), name=body[2])
            return index.tz_localize("UTC").tz_convert(body[1]) if body[1] else index
        raise wire.ProtocolError(f"unknown tag {tag!r}")

    def _module(self, body: list, blobs: list[bytes], depth: int):
        import torch

        path, attrs, params, buffers, children = body
        module_name, name = str(path).rsplit(".", 1)
        cls = getattr(importlib.import_module(module_name), name)
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            raise wire.ProtocolError(f"{path} is not a torch.nn module")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        for key, value in wire.decode(attrs, blobs, self, depth + 1).items():
            object.__setattr__(module, key, value)
        for key, value in wire.decode(params, blobs, self, depth + 1).items():
            module.register_parameter(
                key, None if value is None else torch.nn.Parameter(value.detach().clone())
            )
        for key, value in wire.decode(buffers, blobs, self, depth + 1).items():
            module.register_buffer(key, value)
        for key, value in wire.decode(children, blobs, self, depth + 1).items():
            module.add_module(key, value)
        if hasattr(module, "_init_flat_weights"):
            module._init_flat_weights()
        return module

    # results to the judge
    def encode_other(self, value: Any, blobs: list[bytes]) -> Any:
        hid = self.server.new_handle(value)
        return {"obj": [hid, type(value).__name__[:60], callable(value)]}

    def tensor_flag(self, t) -> bool:
        if self.grad and t.requires_grad and t.is_floating_point():
            self.outputs.append(t)
            return True
        return False


# -- the server -----------------------------------------------------------------------------------


class _Server:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.handles: dict[int, Any] = {}
        self.graphs: dict[int, tuple[list, list]] = {}
        self.next_id = 1
        self.generation = 0  # bumped by release: callbacks of an earlier test stop working
        self.callback_seq = 0
        self.namespace: dict = {}

    def new_handle(self, value: Any) -> int:
        hid = self.next_id
        self.next_id += 1
        self.handles[hid] = value
        return hid

    def send(self, header: dict, blobs: list[bytes] = ()) -> None:
        wire.send(self.sock, header, blobs)

    # the judge's function, called by the student's code
    def callback(self, cb: _Callback, args: tuple, kwargs: dict) -> Any:
        if cb._generation != self.generation:
            raise CallbackError(
                f"the grader's {cb._type} belonged to an earlier check and is gone; "
                "do not keep the functions a test passes you"
            )
        self.callback_seq += 1
        seq = self.callback_seq
        codec = _StudentCodec(self)
        blobs: list[bytes] = []
        try:
            data = wire.encode({"args": list(args), "kwargs": kwargs}, blobs, codec)
        except wire.Unsendable as exc:
            raise CallbackError(f"cannot pass this to the grader's {cb._type}: {exc}") from None
        self.send(Callback(cb._cid, seq, data).to_header(), blobs)
        header, blobs = wire.recv(self.sock)
        reply = CallbackReply.read(header)
        if reply.seq != seq:
            raise wire.ProtocolError("unexpected message while waiting for a callback")
        if reply.err is not None:
            raise CallbackError(reply.err)
        return wire.decode(reply.ok, blobs, _StudentCodec(self))

    def handle(self, header: dict, blobs: list[bytes]) -> bool:
        """Answer one request of the judge; False when it says goodbye."""
        try:
            request, rid = read_request(header)
        except ValueError as err:
            raise wire.ProtocolError(str(err)) from None
        if isinstance(request, Bye):
            return False
        if isinstance(request, Resolve):
            self._resolve(rid, request.names)
        elif isinstance(request, Call | GetAttr):
            self._call(rid, request, blobs)
        elif isinstance(request, Backward):
            self._backward(rid, request, blobs)
        else:  # Release
            self.handles.clear()
            self.graphs.clear()
            self.generation += 1
            self.send(Reply(rid).to_header())
        return True

    def _resolve(self, rid, names: list) -> None:
        out = {}
        for name in names:
            if name not in self.namespace:
                out[name] = {"missing": True}
                continue
            value = self.namespace[name]
            if callable(value):
                out[name] = {
                    "obj": [self.new_handle(value), type(value).__name__[:60], True],
                }
            else:
                out[name] = {"value": value}
        plain = {k: v["value"] for k, v in out.items() if "value" in v}
        codec = _StudentCodec(self)
        try:
            vblobs: list[bytes] = []
            encoded = wire.encode(plain, vblobs, codec)
        except Exception as exc:  # noqa: BLE001
            self.send(Reply(rid, err=error_report(exc, unsendable=True)).to_header())
            return
        meta = {k: v for k, v in out.items() if "value" not in v}
        self.send(Reply(rid, {"values": encoded, "meta": meta}).to_header(), vblobs)

    def _call(self, rid, request: Call | GetAttr, blobs: list[bytes]) -> None:
        import torch

        grad = isinstance(request, Call) and bool(request.grad)
        codec = _StudentCodec(self, grad=grad)
        target = self.handles.get(request.target)
        if target is None:
            missing = ErrorReport(name="LookupError", summary="no such object")
            self.send(Reply(rid, err=missing).to_header())
            return
        try:
            payload = wire.decode(request.data, blobs, codec)
            if isinstance(request, Call):
                with torch.set_grad_enabled(grad):
                    result = target(*payload["args"], **payload["kwargs"])
            else:
                result = getattr(target, payload["name"])
        except BaseException as exc:  # noqa: B036 - anything the student's code raises
            if isinstance(exc, wire.ProtocolError | wire.Closed):
                raise
            self.send(Reply(rid, err=error_report(exc)).to_header())
            return
        gens, graph = None, None
        rblobs: list[bytes] = []
        codec.outputs = []
        try:
            if codec.generators:
                gens = [wire.encode(g.get_state(), rblobs) for g in codec.generators]
            data = wire.encode(result, rblobs, codec)
        except Exception as exc:  # noqa: BLE001 - an unsendable or hostile result
            self.send(Reply(rid, err=error_report(exc, unsendable=True)).to_header())
            return
        if codec.inputs and codec.outputs:
            graph = self.new_handle(None)
            self.graphs[graph] = (codec.inputs, codec.outputs)
        self.send(Reply(rid, data, gens=gens, graph=graph).to_header(), rblobs)

    def _backward(self, rid, request: Backward, blobs: list[bytes]) -> None:
        import torch

        inputs, outputs = self.graphs[int(request.graph)]
        grads = wire.decode(request.data, blobs)
        pairs = [(o, g) for o, g in zip(outputs, grads, strict=True) if g is not None]
        try:
            got = torch.autograd.grad(
                [o for o, _ in pairs],
                inputs,
                [g.to(o.dtype) for o, g in pairs],
                allow_unused=True,
                retain_graph=True,
            )
        except BaseException as exc:  # noqa: B036
            self.send(Reply(rid, err=error_report(exc)).to_header())
            return
        gb: list[bytes] = []
        self.send(Reply(rid, wire.encode(list(got), gb)).to_header(), gb)


# -- cells --------------------------------------------------------------------------------------


def _run_cells(cells: list[Cell], namespace: dict, server: _Server) -> None:
    for cell in cells:
        number, source = cell.number, cell.source
        filename = f"<cell {number}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            code = compile(source, filename, "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            line = getattr(exc, "lineno", None)
            where = f", line {line}" if line else ""
            msg = getattr(exc, "msg", None) or _short(exc)
            reason = f"code cell {number}{where}: {type(exc).__name__}: {msg}"
            server.send(messages.header(CellFailed(number, "syntax-error", reason)))
            continue
        try:
            exec(code, namespace)
        except SystemExit:
            reason = f"code cell {number} called sys.exit(); later cells were not run"
            server.send(messages.header(CellFailed(number, "exit", reason)))
            return
        except BaseException as exc:  # noqa: B036 - the student's code may raise anything
            report = error_report(exc)
            kind = "memory-limit" if report.memory else "cell-error"
            where = report.where
            if where.startswith(f"code cell {number}, "):
                text = f"code cell {number}, {where.split(', ', 1)[1]}: {report.summary}"
            elif where:
                text = f"code cell {number}: {report.summary} ({where}: {report.line})"
            else:
                text = f"code cell {number}: {report.summary}"
            server.send(messages.header(CellFailed(number, kind, text)))


def main() -> None:
    """Serve one submission on the socket whose fd is ``sys.argv[1]``."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    drop_privileges()
    head, _ = wire.recv(sock)
    setup = Setup.from_header(head)
    set_limits(setup.limits)
    os.closerange(3, sock.fileno())
    os.closerange(sock.fileno() + 1, 4096)
    log = os.open(
        "/tmp/output.log" if setup.sandboxed else os.devnull,
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
        0o600,
    )
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)

    server = _Server(sock)
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    shell = _NeutralShell(namespace)
    namespace["get_ipython"] = lambda: shell
    namespace["display"] = lambda *objs, **kwargs: print(*objs)
    sys.modules["__main__"] = module
    sys.argv = ["notebook"]
    server.namespace = namespace

    server.send(messages.header(Started()))
    _run_cells(setup.cells, namespace, server)
    server.send(messages.header(CellsDone(tuple(shell.neutralised[:20]))))
    try:
        while True:
            header, blobs = wire.recv(sock)
            if not server.handle(header, blobs):
                break
    except (wire.Closed, wire.ProtocolError, OSError):
        pass
    os._exit(0)  # skip interpreter teardown: the student's atexit hooks or threads do not matter


if __name__ == "__main__":
    main()
