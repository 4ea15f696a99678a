"""The boundary between the judge and the student's process (issue 13, item 1).

The wire format carries plain data only and rejects anything else with a
``ProtocolError`` (whatever bytes arrive); a session in the sandbox answers the
judge's calls with plain data, gradients, generator draws, callbacks into the
judge and objects that stay in the student's process; each call has its own
deadline. Needs ``bwrap`` for the session tests (CI installs it).
"""

from __future__ import annotations

import json
import os
import socket
import struct

import pytest
import torch
from torch import nn

from course_grader.remote import RemoteObject, Session, StudentGone
from course_grader.sandbox import Limits
from course_grader.sandboxed import wire
from course_grader.sandboxed.messages import Cell
from course_lib.grading.expect import TestFailed
from course_lib.grading.runner import RemoteError, student_error


def _roundtrip(value):
    blobs: list[bytes] = []
    data = wire.encode(value, blobs)
    return wire.decode(json.loads(json.dumps(data)), blobs)


@pytest.mark.parametrize("dtype", sorted(wire.DTYPES.values(), key=str), ids=str)
def test_tensors_of_every_dtype_cross_exactly(dtype):
    base = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) - 11.5
    t = base.to(dtype) if dtype != torch.bool else base > 0
    for value in (t, t.transpose(0, 2), t[0, 0, 0], t[:0]):  # non-contiguous, 0-dim, empty
        back = _roundtrip(value)
        assert type(back) is torch.Tensor and back.dtype == value.dtype
        assert back.shape == value.shape and torch.equal(back, value)


def test_plain_values_cross_with_their_types():
    value = {
        "a": [1, 2.5, None, True, "x", b"\x00\xff"],
        3: (float("nan"), float("inf"), -0.0, 1 + 2j),
        (1, "k"): {1, 2},
        "sizes": (torch.Size([2, 3]), torch.float64, torch.device("cpu"), slice(1, None, 2)),
    }
    back = _roundtrip(value)
    assert back["a"] == value["a"] and back[(1, "k")] == {1, 2}
    assert type(back[3]) is tuple and back[3][0] != back[3][0] and back[3][1:] == value[3][1:]
    assert back["sizes"] == value["sizes"]


def test_subclasses_arrive_as_plain_values():
    class Anything(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    class Liar(torch.Tensor):
        def __eq__(self, other):
            return True

    back = _roundtrip([Anything(3), torch.zeros(2).as_subclass(Liar), nn.Parameter(torch.ones(1))])
    assert type(back[0]) is int and back[0] != 4
    assert type(back[1]) is torch.Tensor and type(back[2]) is torch.Tensor
    with pytest.raises(wire.Unsendable):
        _roundtrip(object())


DEEP: list = [1]
for _ in range(100):
    DEEP = [DEEP]


@pytest.mark.parametrize(
    "data",
    [
        {"T": [0, "object", [1], False]},
        {"T": [0, "float32", [3], False]},  # 3 floats, 4 bytes
        {"T": [0, "float32", [-1], False]},
        {"N": [0, "O", [1]]},
        {"import": "os"},
        {"d": [[[1], 2]]},  # unhashable key
        {"f": "1e999"},
        {"b": 7},
        DEEP,
    ],
    ids=lambda d: str(d)[:20],
)
def test_decoding_rejects_anything_but_plain_data(data):
    with pytest.raises(wire.ProtocolError):
        wire.decode(data, [b"\x00\x00\x00\x00"])


def test_garbage_on_the_socket_is_a_protocol_error_not_a_crash():
    garbage = [
        b"\xff" * 8,  # a 4 GB header
        struct.pack(">II", 5, 0) + b"hello",  # not JSON
        struct.pack(">II", 2, 0) + b"[]",  # not an object
        struct.pack(">II", 6, 0) + b"[" * 6,
        struct.pack(">II", 2, 1) + b"{}" + struct.pack(">Q", 2**40),  # a 1 TB blob
    ]
    for data in garbage:
        a, b = socket.socketpair()
        a.sendall(data)
        with pytest.raises(wire.ProtocolError):
            wire.recv(b, deadline=None, limit=1 << 20)
        a.close()
        b.close()
    a, b = socket.socketpair()
    a.sendall(struct.pack(">II", 100, 0) + b"{")  # a message that never ends
    import time

    with pytest.raises(wire.Timeout):
        wire.recv(b, deadline=time.monotonic() + 0.2)
    a.close()
    with pytest.raises(wire.Closed):
        wire.recv(b, deadline=time.monotonic() + 1)


NOTEBOOK = """
import torch


def weighted(x, w):
    return (x * w).sum(), x.detach() * 2


def draw(generator):
    return torch.rand(3, generator=generator)


def use(step, x):
    return step(x) + 1


def apply(module, x):
    return module(x)


class Counter:
    def __init__(self, start):
        self.total = start

    def add(self, n):
        self.total += n
        return self.total


def boom(x):
    return undefined_name + x


def hang():
    while True:
        pass


ANSWER = 42
"""


@pytest.fixture(scope="module")
def session():
    s = Session([Cell(1, NOTEBOOK)], Limits(), cells_timeout=60, call_timeout=3)
    events, kind, reason = s.start()
    assert kind is None, (kind, reason, events)
    yield s
    s.close()


def test_names_resolve_to_proxies_and_values(session):
    found = session.namespace(["weighted", "ANSWER", "no_such_name"])
    assert isinstance(found["weighted"], RemoteObject) and found["ANSWER"] == 42
    assert "no_such_name" not in found


def test_gradients_flow_through_the_students_function(session):
    weighted = session.namespace(["weighted"])["weighted"]
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    total, doubled = weighted(x, w)
    assert total.requires_grad and not doubled.requires_grad
    (3 * total).backward()
    assert torch.allclose(x.grad, 3 * w.detach()) and torch.allclose(w.grad, 3 * x.detach())
    with torch.no_grad():
        total, _ = weighted(x, w)
    assert not total.requires_grad


def test_a_generator_advances_as_if_used_here(session):
    draw = session.namespace(["draw"])["draw"]
    g, here = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(draw(g), torch.rand(3, generator=here))
    assert torch.equal(draw(g), torch.rand(3, generator=here))


def test_callbacks_modules_and_remote_objects(session):
    names = session.namespace(["use", "apply", "Counter"])
    seen = []

    def step(x):
        seen.append(x)
        return x * 10

    assert torch.equal(names["use"](step, torch.ones(2)), torch.full((2,), 11.0))
    assert len(seen) == 1 and torch.equal(seen[0], torch.ones(2))
    linear = nn.Linear(3, 2)
    x = torch.randn(5, 3)
    with torch.no_grad():
        assert torch.allclose(names["apply"](linear, x), linear(x))
    counter = names["Counter"](10)
    assert isinstance(counter, RemoteObject) and type(counter).__name__ == "Counter"
    assert counter.add(5) == 15 and counter.total == 15
    session.end_test()
    with pytest.raises(RemoteError, match="no such object"):
        counter.add(1)  # objects of an earlier test are released


def test_a_callback_that_fails_fails_the_test(session):
    use = session.namespace(["use"])["use"]

    def strict(x):
        raise TestFailed("step expects token ids")

    with pytest.raises(TestFailed, match="step expects token ids"):
        use(strict, torch.ones(1))


def test_student_errors_keep_their_type_and_place(session):
    boom = session.namespace(["boom"])["boom"]
    with pytest.raises(NameError) as info:
        boom(1)
    assert isinstance(info.value, RemoteError)
    message = student_error(info.value)
    assert "NameError: name 'undefined_name' is not defined" in message
    assert "code cell 1, line" in message and "undefined_name + x" in message


def test_each_call_has_its_own_deadline(session):
    hang = session.namespace(["hang"])["hang"]
    with pytest.raises(StudentGone, match="did not return within 3 s") as info:
        hang()
    assert info.value.kind == "timeout" and session.dead
    with pytest.raises(StudentGone, match="not checked"):
        hang()
    assert session.proc.poll() is not None  # the whole sandbox is gone
    assert not os.path.exists(f"/proc/{session.proc.pid}")
