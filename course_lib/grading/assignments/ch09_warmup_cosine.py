"""Visible tests of exercise ``ch09-warmup-cosine``: learning-rate schedules (chapter 9).

The warmup-cosine schedule is compared with PyTorch's own schedulers
(``LinearLR`` then ``CosineAnnealingLR``, chained by ``SequentialLR``); the
inverse-square-root schedule with the formula of the Transformer paper.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.expect import expect_number
from course_lib.grading.registry import test

ASSIGNMENT = "ch09-warmup-cosine"
TITLE = "Learning-rate schedules: warmup, cosine, inverse square root"


def _torch_rates(peak: float, warmup: int, total: int, min_lr: float) -> list[float]:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=peak)
    sched = torch.optim.lr_scheduler
    linear = sched.LinearLR(opt, 1.0 / warmup, 1.0, total_iters=warmup - 1)
    cosine = sched.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
    chained = sched.SequentialLR(opt, [linear, cosine], milestones=[warmup - 1])
    rates = []
    for _ in range(total):
        rates.append(opt.param_groups[0]["lr"])  # the rate of update s = len(rates)
        opt.step()
        chained.step()
    return rates


@test("q1", points=1)
def warmup_is_linear_up_to_the_peak(warmup_cosine_lr):
    """climbs linearly: s / warmup * peak_lr for s <= warmup"""
    for s in (1, 2, 5, 10):
        expect_number(
            "the rate",
            warmup_cosine_lr(s, 0.5, 10, 100),
            0.5 * s / 10,
            tol=1e-12,
            context=f"step {s}, peak 0.5, warmup 10, total 100",
        )


@test("q1", points=3)
def matches_torch_schedulers(warmup_cosine_lr):
    """equals torch's LinearLR + CosineAnnealingLR at every step, with and without a floor"""
    for peak, warmup, total, min_lr in ((1e-3, 4, 20, 0.0), (0.3, 10, 57, 0.03)):
        for s, expected in enumerate(_torch_rates(peak, warmup, total, min_lr), start=1):
            expect_number(
                "the rate",
                warmup_cosine_lr(s, peak, warmup, total, min_lr),
                expected,
                tol=1e-9 * peak,
                context=f"step {s}, peak {peak}, warmup {warmup}, total {total}, min_lr {min_lr}",
            )


@test("q2", points=2)
def inverse_sqrt_is_the_transformer_schedule(inverse_sqrt_lr):
    """equals d^-0.5 min(s^-0.5, s warmup^-1.5), rescaled so that the peak is peak_lr"""
    d, warmup, peak = 512, 4000, 7e-4
    for s in (1, 1000, 3999, 4000, 4001, 16000, 100000):
        paper = d**-0.5 * min(s**-0.5, s * warmup**-1.5)
        expect_number(
            "the rate",
            inverse_sqrt_lr(s, peak, warmup),
            paper * peak / (d * warmup) ** -0.5,
            tol=1e-12,
            context=f"step {s}, warmup {warmup}",
        )
