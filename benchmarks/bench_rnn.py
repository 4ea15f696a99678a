"""Recurrent layers, forward + backward: ``course_lib.rnn.LSTM`` / ``GRU`` vs ``nn.LSTM`` / ``nn.GRU``.

Chapter 1's model size (B = 64, T = 16, D = 16, H = 64).  Ours is a Python
loop over time steps of the cell written from the equations; torch's is one
fused kernel.  Reported only: a teaching loop is not expected to match it
(issue 18).  The weights are copied and the outputs checked equal first.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from benchmarks.harness import Config, compare, time_side_by_side
from course_lib import rnn


def forward_backward(model: nn.Module, x: Tensor, grad: Tensor):
    """A call running the layer forward and backward on ``x`` (the outputs' gradient ``grad``)."""

    def call():
        x.grad = None
        model.zero_grad(set_to_none=True)
        model(x)[0].backward(grad)

    return call


def run(cfg: Config) -> list[dict]:
    dev = cfg.device
    b, t, d, h = (2, 3, 4, 5) if cfg.quick else (64, 16, 16, 64)
    rows = []
    for ours_cls, torch_cls in ((rnn.LSTM, nn.LSTM), (rnn.GRU, nn.GRU)):
        torch.manual_seed(0)
        peer = torch_cls(d, h, batch_first=True).to(dev)
        ours = ours_cls(d, h).to(dev)
        ours.load_state_dict(peer.state_dict())
        x = torch.randn(b, t, d, device=dev, requires_grad=True)
        grad = torch.randn(b, t, h, device=dev)
        with torch.no_grad():
            torch.testing.assert_close(ours(x)[0], peer(x)[0])

        times, repeats = time_side_by_side(
            {"ours": forward_backward(ours, x, grad), "peer": forward_backward(peer, x, grad)}, cfg
        )
        rows.append(
            {
                "group": "recurrent",
                "what": f"{torch_cls.__name__} layer forward + backward",
                "size": f"B={b}, T={t}, D={d}, H={h}",
                "ours": f"course_lib.rnn.{ours_cls.__name__}",
                "peer": f"nn.{torch_cls.__name__}",
                "metric": "time",
                "repeats": repeats,
                "goal_ratio": None,
                **compare(times, "ours", "peer"),
            }
        )
    return rows
