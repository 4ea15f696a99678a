"""Chapter 9: the training loop and the training practices (schedules, label smoothing,
clipping, AdamW, drop path).

Covers course_lib.training; its callbacks (resume, early stopping, autocast) are tested in
test_callbacks.py, data-parallel training in test_distributed.py.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from course_lib.training import (
    adamw_step,
    clip_grad_norm,
    drop_path,
    label_smoothing_cross_entropy,
    torch_warmup_cosine,
    train,
    warmup_cosine,
    warmup_inverse_sqrt,
)


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))


def _make_batch():
    x = torch.randn(8, 4)  # draws from the global RNG: resume must restore it
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def _loss(model, batch):
    x, y = batch
    return label_smoothing_cross_entropy(model(x), y, 0.1)


def test_the_core_loop_returns_one_loss_per_step_and_updates_the_weights():
    torch.manual_seed(0)
    model = _model()
    before = model[0].weight.detach().clone()
    losses = train(model, _make_batch, _loss, steps=5, progress=False)
    assert type(losses) is list and len(losses) == 5 and all(type(v) is float for v in losses)
    assert not torch.equal(model[0].weight, before)
    assert model.training  # left in training mode
    with pytest.raises(ValueError, match="steps must be >= 0, got -1"):
        train(model, _make_batch, _loss, steps=-1, progress=False)
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        train(model, _make_batch, _loss, steps=1, progress=False)


def test_the_default_optimizer_is_torch_adamw_to_the_bit():
    # train's AdamW runs foreach (fewer Python calls per step); the weights must be
    # exactly those of torch.optim.AdamW's default, so no chapter's numbers move.
    torch.manual_seed(0)
    ours = _model()
    theirs = copy.deepcopy(ours)
    torch.manual_seed(1)
    train(ours, _make_batch, _loss, 20, 1e-2, weight_decay=0.1, progress=False)
    torch.manual_seed(1)
    train(theirs, _make_batch, _loss, 20, 1e-2, progress=False,
          optimizer=lambda p: torch.optim.AdamW(p, 1e-2, weight_decay=0.1))  # fmt: skip
    assert all(
        torch.equal(a, b) for a, b in zip(ours.parameters(), theirs.parameters(), strict=True)
    )


def test_the_loop_stops_on_a_non_finite_loss():
    with pytest.raises(FloatingPointError, match="step 2"):
        values = iter([1.0, 1.0, float("nan")])
        train(
            _model(),
            _make_batch,
            lambda m, b: _loss(m, b) * 0 + next(values),
            5,
            progress=False,
        )


def test_warmup_cosine_values_and_torch_equivalent():
    f = warmup_cosine(4, 12, min_ratio=0.1)
    assert [f(t) for t in range(4)] == [0.25, 0.5, 0.75, 1.0]  # s / warmup
    assert f(7) == pytest.approx(0.1 + 0.9 * 0.5)  # s = 8: halfway through the decay
    assert f(11) == pytest.approx(0.1)  # s = total: the floor
    p = [nn.Parameter(torch.zeros(1))]
    opt_a, opt_b = torch.optim.SGD(p, lr=0.5), torch.optim.SGD(p, lr=0.5)
    sched_a = torch.optim.lr_scheduler.LambdaLR(opt_a, f)
    sched_b = torch_warmup_cosine(opt_b, 4, 12, min_ratio=0.1)
    for _ in range(12):
        assert opt_a.param_groups[0]["lr"] == pytest.approx(opt_b.param_groups[0]["lr"], abs=1e-12)
        opt_a.step(), opt_b.step(), sched_a.step(), sched_b.step()


def test_inverse_sqrt_is_the_transformer_schedule():
    d, w = 512, 4000
    f = warmup_inverse_sqrt(w)
    for s in (1, 100, 3999, 4000, 4001, 10_000, 100_000):
        vaswani = d**-0.5 * min(s**-0.5, s * w**-1.5)  # Vaswani et al. (2017), eq. (3)
        assert f(s - 1) * (d * w) ** -0.5 == pytest.approx(vaswani, rel=1e-12)
    assert f(w - 1) == 1.0 and f(4 * w - 1) == 0.5


def test_label_smoothing_matches_torch():
    torch.manual_seed(0)
    logits, target = torch.randn(10, 7), torch.randint(0, 7, (10,))
    target[3] = -100
    for eps in (0.0, 0.1, 0.3):
        ref = nn.CrossEntropyLoss(label_smoothing=eps)(logits, target)
        assert torch.allclose(label_smoothing_cross_entropy(logits, target, eps), ref, atol=1e-6)
    logits3, target3 = torch.randn(2, 5, 6), torch.randint(0, 5, (2, 6))
    ref = nn.CrossEntropyLoss(label_smoothing=0.2)(logits3, target3)
    assert torch.allclose(label_smoothing_cross_entropy(logits3, target3, 0.2), ref, atol=1e-6)
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothing_cross_entropy(logits, target, 1.5)


def test_clip_grad_norm_matches_torch():
    torch.manual_seed(0)
    a, b = _model(), _model()
    b.load_state_dict(a.state_dict())
    x = torch.randn(5, 4) * 30
    for m in (a, b):
        m.eval()
        m(x).pow(2).sum().backward()
    na = clip_grad_norm(a.parameters(), 0.5)
    nb = nn.utils.clip_grad_norm_(b.parameters(), 0.5)
    assert na == pytest.approx(nb.item(), rel=1e-6) and na > 0.5
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa.grad, pb.grad, atol=1e-7)


@pytest.mark.parametrize(
    ("decoupled", "torch_optimizer"), [(True, torch.optim.AdamW), (False, torch.optim.Adam)]
)
def test_adamw_step_matches_torch(decoupled, torch_optimizer):
    # decoupled: AdamW; not decoupled: torch's Adam, whose weight_decay is an L2 term in the gradient.
    torch.manual_seed(0)
    start = torch.randn(5, 3)
    reference = nn.Parameter(start.clone())
    opt = torch_optimizer([reference], lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    ours, state = start.clone(), {}
    for _ in range(20):
        grad = torch.randn(5, 3)
        reference.grad = grad.clone()
        opt.step()
        adamw_step(ours, grad, state, 1e-2, (0.8, 0.99), 1e-6, 0.1, decoupled=decoupled)
    assert state["t"] == 20
    torch.testing.assert_close(ours, reference.detach(), atol=1e-6, rtol=0)


def test_adamw_step_l2_is_not_decoupled_decay():
    start, grad = torch.ones(4), torch.full((4,), 0.01)
    decayed = []
    for decoupled in (True, False):
        w = start.clone()
        adamw_step(w, grad, {}, 0.1, weight_decay=0.5, decoupled=decoupled)
        decayed.append(w)
    assert (decayed[0] - decayed[1]).abs().max() > 1e-2


def test_adamw_step_rejects_bad_input():
    with pytest.raises(ValueError, match="one shape"):
        adamw_step(torch.zeros(3), torch.zeros(4), {}, 0.1)
    with pytest.raises(ValueError, match="betas"):
        adamw_step(torch.zeros(3), torch.zeros(3), {}, 0.1, betas=(0.9, 1.0))


def test_drop_path():
    torch.manual_seed(0)
    x = torch.ones(2000, 3)
    y = drop_path(x, 0.25)
    kept = y[:, 0] != 0
    assert torch.equal(y[kept], torch.full_like(y[kept], 1 / 0.75))  # whole rows, rescaled
    assert abs(kept.float().mean().item() - 0.75) < 0.03
    assert torch.equal(drop_path(x, 0.25, training=False), x)
    with pytest.raises(ValueError):
        drop_path(x, 1.0)


def test_label_smoothing_returns_float32_under_autocast_as_cross_entropy():
    """Under autocast the loss is float32, as F.cross_entropy's: a float16 loss scaled by
    GradScaler's 2**16 would overflow. Outside autocast it keeps the logits' dtype."""
    logits, target = torch.randn(6, 5), torch.randint(0, 5, (6,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = nn.Linear(5, 5)(logits)
        ref = nn.functional.cross_entropy(low, target, label_smoothing=0.1)
        out = label_smoothing_cross_entropy(low, target, 0.1)
    assert low.dtype == torch.bfloat16 and ref.dtype == out.dtype == torch.float32
    assert label_smoothing_cross_entropy(logits.double(), target, 0.1).dtype == torch.float64
