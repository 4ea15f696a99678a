"""Chapter 9: the training loop's callbacks (checkpoint and resume, early stopping, the
learning-rate schedule, mixed precision, the random state).

Covers course_lib.callbacks; the loop itself is tested in test_training.py, whose small
model, batches and loss these tests share.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_lib.callbacks import (
    Callback,
    Checkpoint,
    EarlyStopping,
    MixedPrecision,
    Schedule,
    amp_needs_scaler,
    rng_state,
    set_rng_state,
)
from course_lib.training import train, warmup_cosine
from tests.test_training import _loss, _make_batch, _model


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
