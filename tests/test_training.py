"""Chapter 9: the training loop (resume, early stopping, autocast) and the training practices."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from course_lib import distributed
from course_lib.callbacks import amp_needs_scaler
from course_lib.training import (
    Callback,
    Checkpoint,
    EarlyStopping,
    MixedPrecision,
    Schedule,
    adamw_step,
    clip_grad_norm,
    drop_path,
    label_smoothing_cross_entropy,
    rng_state,
    set_rng_state,
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
    schedule = Schedule(warmup_cosine(5, 40))
    early = EarlyStopping(lambda m: m(val).pow(2).mean().item(), every=10)
    callbacks = [schedule, early]
    checkpoint = None
    if tmp_path is not None:
        checkpoint = Checkpoint(tmp_path / "ck.pt", every=10, resume=resume)
        callbacks.insert(0, checkpoint)  # listed first, it still runs last (order = 1)
    losses = train(model, make_batch, _loss, 40, 3e-3, callbacks=callbacks, progress=False)
    return model, (losses, schedule.lrs, early.evals, checkpoint)


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    ref_model, ref = _run(None)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, fail_at=25)  # crashes during step 25; the last checkpoint is step 20
    model, (losses, lrs, evals, checkpoint) = _run(tmp_path, resume=True)
    assert checkpoint.resumed_from == 20
    assert losses == ref[0] and lrs == ref[1] and evals == ref[2]
    assert len(lrs) == 40 and len(evals) == 4
    for (name, a), b in zip(
        model.state_dict().items(), ref_model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_resume_needs_the_rng(tmp_path, monkeypatch):
    import course_lib.callbacks as cb

    _, (ref, *_) = _run(None)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, fail_at=25)
    monkeypatch.setattr(cb, "set_rng_state", lambda state: None)  # forget the random state
    _, (losses, *_) = _run(tmp_path, resume=True)
    assert losses[:20] == ref[:20] and losses[20:] != ref[20:]


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


def test_early_stopping_restores_best():
    torch.manual_seed(0)
    model = _model()
    values = iter([3.0, 1.0, 2.0, 2.5, 9.0, 9.0])
    snapshots = {}

    def eval_fn(m):
        snapshots[len(snapshots)] = m[0].weight.detach().clone()
        return next(values)

    early = EarlyStopping(eval_fn, every=5, patience=2)
    losses = train(model, _make_batch, _loss, 100, progress=False, callbacks=[early])
    assert early.stopped_early and len(losses) == 20 and early.best_step == 10
    assert torch.equal(model[0].weight, snapshots[1])


def test_early_stopping_without_patience_only_records():
    early = EarlyStopping(lambda m: 1.0, every=3, restore_best=False)
    losses = train(_model(), _make_batch, _loss, 10, progress=False, callbacks=[early])
    assert len(losses) == 10 and not early.stopped_early
    assert [step for step, _ in early.evals] == [3, 6, 9, 10]  # and after the last step


def test_bf16_autocast_runs_the_forward_pass_in_bfloat16():
    torch.manual_seed(0)
    dtypes = []

    def loss_fn(model, batch):
        logits = model(batch[0])
        dtypes.append(logits.dtype)
        return nn.functional.cross_entropy(logits, batch[1])

    model = _model()
    mixed = MixedPrecision()
    losses = train(model, _make_batch, loss_fn, 5, progress=False, callbacks=[mixed])
    assert dtypes == [torch.bfloat16] * 5 and all(math.isfinite(v) for v in losses)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32
    assert mixed.scaler is None and mixed.skipped == []  # bfloat16: no loss scaling
    train(model, _make_batch, loss_fn, 1, progress=False)  # without the callback: float32
    assert dtypes[-1] == torch.float32


def _amp_run(dtype, steps=60, loss_fn=_loss, clip_norm=1.0):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    callbacks = [] if dtype is None else [MixedPrecision(dtype)]
    losses = train(
        model, _make_batch, loss_fn, steps, 3e-3, clip_norm=clip_norm, callbacks=callbacks,
        progress=False,
    )  # fmt: skip
    return model, losses, (callbacks or [None])[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mixed_precision_training_matches_float32(dtype):
    _, ref, _ = _amp_run(None)
    model, losses, mixed = _amp_run(dtype)
    gap = max(abs(a - b) for a, b in zip(losses, ref, strict=True))
    assert gap < 0.01, gap  # measured: 7e-4 in bfloat16, 7e-5 in float16
    assert ref[-1] < 0.8 * ref[0] and losses[-1] < 0.8 * losses[0]  # both trained
    assert (mixed.scaler is not None) == (dtype == torch.float16)


def test_float16_scales_the_loss_and_skips_a_step_whose_gradient_is_inf():
    calls = 0

    def loss_fn(model, batch):  # at step 4, a finite loss whose scaled gradient overflows
        nonlocal calls
        calls += 1
        return _loss(model, batch) * (1e35 if calls == 4 else 1.0)

    snapshots = []

    class Snap(Callback):
        def on_step(self, run):
            snapshots.append(run.model[0].weight.detach().clone())

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    mixed = MixedPrecision(torch.float16)
    train(model, _make_batch, loss_fn, 6, 3e-3, callbacks=[mixed, Snap()], progress=False)
    assert isinstance(mixed.scaler, torch.amp.GradScaler) and mixed.scaler.is_enabled()
    assert mixed.skipped == [4]
    assert mixed.scales == [2.0**16] * 4 + [2.0**15] * 3  # halved after the bad step only
    assert torch.equal(snapshots[3], snapshots[2])  # step 4 left the weights alone ...
    assert not torch.equal(snapshots[4], snapshots[3])  # ... step 5 updated them again


def test_float16_checkpoint_restores_the_scaler(tmp_path):
    def run(crash_at=None, resume=False):
        torch.manual_seed(0 if not resume else 1)
        model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
        calls = 0

        def make_batch():
            nonlocal calls
            calls += 1
            if calls == crash_at:
                raise KeyboardInterrupt
            return _make_batch()

        def loss_fn(model, batch):  # an overflowing step before the checkpoint
            return _loss(model, batch) * (1e35 if len(mixed.scales) == 3 else 1.0)

        mixed = MixedPrecision(torch.float16)
        callbacks = [mixed, Checkpoint(tmp_path / "fp16.pt", every=5, resume=resume)]
        losses = train(model, make_batch, loss_fn, 10, 3e-3, callbacks=callbacks, progress=False)
        return model, losses, mixed

    ref_model, ref_losses, ref_mixed = run()
    with pytest.raises(KeyboardInterrupt):
        run(crash_at=8)
    model, losses, mixed = run(resume=True)
    assert ref_mixed.skipped == [3] and mixed.skipped == [3]
    assert mixed.scales == ref_mixed.scales and mixed.scaler.get_scale() == 2.0**15
    assert losses == ref_losses
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), ref_model.parameters(), strict=True)
    )


def test_mixed_precision_errors_name_the_fix(monkeypatch):
    with pytest.raises(ValueError, match="leave MixedPrecision out"):
        MixedPrecision(torch.float32)
    with pytest.raises(ValueError, match="model.to"):
        train(_model().to("meta"), _make_batch, _loss, 1, progress=False,
              callbacks=[MixedPrecision()])  # fmt: skip
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(ValueError, match=r"MixedPrecision\(torch.float16\)"):
        amp_needs_scaler("cuda", torch.bfloat16)
    assert amp_needs_scaler("cuda", torch.float16) and not amp_needs_scaler("cpu", torch.bfloat16)


def test_rng_state_restores_from_tensors_that_are_not_cpu_byte_tensors(tmp_path):
    # torch.load(..., map_location="cuda") hands set_rng_state CUDA tensors, which
    # torch.set_rng_state rejects ("RNG state must be a torch.ByteTensor"); so does any
    # tensor that is not a CPU uint8 one, which reproduces the check on the CPU.
    state = rng_state()
    expected = torch.rand(5)
    moved = dict(state, torch=state["torch"].to(torch.int64))
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.set_rng_state(moved["torch"])
    set_rng_state(moved)
    assert torch.equal(torch.rand(5), expected)
    # A checkpoint whose random state was saved as such a tensor still resumes exactly.
    ref_model, ref = _run(None)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, fail_at=25)
    saved = torch.load(tmp_path / "ck.pt", weights_only=False)
    saved["rng"]["torch"] = saved["rng"]["torch"].to(torch.int64)
    torch.save(saved, tmp_path / "ck.pt")
    model, (losses, *_) = _run(tmp_path, resume=True)
    assert losses == ref[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_resume_on_cuda_and_float16_with_a_scaler(tmp_path):
    def run(crash_at=None, resume=False):
        torch.manual_seed(0 if not resume else 1)
        model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
        model = model.cuda()
        calls = 0

        def make_batch():
            nonlocal calls
            calls += 1
            if calls == crash_at:
                raise KeyboardInterrupt
            x = torch.randn(16, 4, device="cuda")
            return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()

        mixed = MixedPrecision(torch.float16)
        callbacks = [mixed, Checkpoint(tmp_path / "cuda.pt", every=10, resume=resume)]
        losses = train(model, make_batch, _loss, 30, 3e-3, callbacks=callbacks, progress=False)
        return model, losses, mixed

    ref_model, ref_losses, ref_mixed = run()
    assert ref_mixed.scaler.is_enabled() and ref_losses[-1] < ref_losses[0]
    with pytest.raises(KeyboardInterrupt):
        run(crash_at=25)
    model, losses, _ = run(resume=True)  # loads with map_location=cuda: the RNG state too
    assert max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True)) < 1e-4
    for a, b in zip(model.parameters(), ref_model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)


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
