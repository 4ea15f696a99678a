"""Chapter 9: the training loop (resume, early stopping, autocast) and the training practices."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_lib import distributed
from course_lib.training import (
    StochasticDepth,
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


def _run(tmp_path, fail_at: int | None = None, resume: bool = False):
    torch.manual_seed(0 if not resume else 123)  # a resumed run starts from other weights/RNG
    model = _model()
    calls = 0

    def make_batch():
        nonlocal calls
        calls += 1
        if fail_at is not None and calls == fail_at:
            raise KeyboardInterrupt("simulated crash")
        return _make_batch()

    val = torch.randn(32, 4, generator=torch.Generator().manual_seed(7))  # fixed held-out set
    result = train(
        model,
        make_batch,
        _loss,
        steps=40,
        lr=3e-3,
        progress=False,
        schedule=warmup_cosine(5, 40),
        eval_fn=lambda m: m(val).pow(2).mean().item(),
        eval_every=10,
        checkpoint=None if tmp_path is None else tmp_path / "ck.pt",
        checkpoint_every=10,
        resume=resume,
    )
    return model, result


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    ref_model, ref = _run(None)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, fail_at=25)  # crashes during step 25; the last checkpoint is step 20
    model, res = _run(tmp_path, resume=True)
    assert res.resumed_from == 20
    assert list(res) == list(ref) and res.lrs == ref.lrs and res.evals == ref.evals
    for (name, a), b in zip(
        model.state_dict().items(), ref_model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_resume_needs_the_rng(tmp_path, monkeypatch):
    import course_lib.training as tr

    _, ref = _run(None)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, fail_at=25)
    monkeypatch.setattr(tr, "set_rng_state", lambda state: None)  # forget the random state
    _, res = _run(tmp_path, resume=True)
    assert list(res)[:20] == list(ref)[:20] and list(res)[20:] != list(ref)[20:]


def test_backwards_compatible_default():
    torch.manual_seed(0)
    losses = train(_model(), _make_batch, _loss, steps=5, progress=False)
    assert isinstance(losses, list) and len(losses) == 5 and losses.lrs == [1e-3] * 5


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


def test_drop_path_and_stochastic_depth():
    torch.manual_seed(0)
    x = torch.ones(2000, 3)
    y = drop_path(x, 0.25)
    kept = y[:, 0] != 0
    assert torch.equal(y[kept], torch.full_like(y[kept], 1 / 0.75))  # whole rows, rescaled
    assert abs(kept.float().mean().item() - 0.75) < 0.03
    assert torch.equal(drop_path(x, 0.25, training=False), x)
    block = StochasticDepth(nn.Linear(3, 3), 0.5).eval()
    assert torch.equal(block(x[:4]), x[:4] + block.block(x[:4]))
    with pytest.raises(ValueError):
        drop_path(x, 1.0)


def test_early_stopping_restores_best():
    torch.manual_seed(0)
    model = _model()
    values = iter([3.0, 1.0, 2.0, 2.5, 9.0, 9.0])
    snapshots = {}

    def eval_fn(m):
        snapshots[len(snapshots)] = m[0].weight.detach().clone()
        return next(values)

    res = train(
        model, _make_batch, _loss, 100, progress=False, eval_fn=eval_fn, eval_every=5, patience=2
    )
    assert res.stopped_early and len(res) == 20 and res.best_step == 10
    assert torch.equal(model[0].weight, snapshots[1])


def test_bf16_autocast_on_cpu_and_errors():
    torch.manual_seed(0)
    losses = train(_model(), _make_batch, _loss, 5, progress=False, amp_dtype=torch.bfloat16)
    assert all(math.isfinite(v) for v in losses)
    with pytest.raises(ValueError, match="float16"):
        train(_model(), _make_batch, _loss, 1, progress=False, amp_dtype=torch.float16)
    with pytest.raises(ValueError, match="checkpoint"):
        train(_model(), _make_batch, _loss, 1, progress=False, resume=True)


def test_ddp_two_processes_equal_one_process():
    ddp = distributed.run_ddp(world_size=2, steps=5, timeout=60)
    single = distributed.train_single(steps=5)
    init = distributed.make_model().state_dict()
    for k in single:
        assert torch.allclose(ddp[k], single[k], atol=1e-6), k
    assert any(not torch.allclose(single[k], init[k]) for k in single)  # it did train


def test_ddp_timeout_kills_the_ranks_and_says_so():
    # Starting Python and importing torch alone takes longer than this.
    with pytest.raises(RuntimeError, match=r"did not finish within 0.2 s(.|\n)*--- rank 1"):
        distributed.run_ddp(world_size=2, steps=5, timeout=0.2)
