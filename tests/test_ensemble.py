"""Stacked members (course_lib.ensemble): the same numbers as separate models and runs."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from course_lib.config import TransformerConfig
from course_lib.ensemble import (
    BestPerMember,
    Stacked,
    clip_grad_norm_per_member,
    folded_attention,
    member_batches,
    train_stacked,
)
from course_lib.forecasting import NLinear
from course_lib.timeseries import PatchForecaster
from course_lib.training import Schedule, train, warmup_cosine

K = 3


def _forecasters(mode: str = "horizon") -> list[PatchForecaster]:
    models = []
    for seed in range(K):
        torch.manual_seed(seed)
        config = TransformerConfig(d_model=16, num_heads=2, num_layers=1, d_ff=32)
        models.append(PatchForecaster(config, 32, 8, 8, 4, n_exog=2, exog_mode=mode))
    return models


@pytest.mark.parametrize("mode", ["cross", "concat", "horizon"])
def test_stacked_forward_is_each_members_forward(mode):
    models = _forecasters(mode)
    stacked = Stacked(models).eval()
    x, e = torch.randn(K, 5, 32, 1) + 10, torch.randn(K, 5, 40, 2)
    out = stacked(x, e)
    ref = torch.stack([m.eval()(x[k], e[k]) for k, m in enumerate(models)])
    assert out.shape == (K, 5, 8, 1) and torch.allclose(out, ref, atol=1e-5)
    shared = stacked.shared(x[0], e[0])  # every member reads the same windows
    assert torch.allclose(shared, torch.stack([m(x[0], e[0]) for m in models]), atol=1e-5)
    member = stacked.member(1)  # an ordinary module with member 1's weights
    assert isinstance(member, PatchForecaster) and torch.allclose(member(x[1], e[1]), ref[1])
    with pytest.raises(ValueError, match=r"member dimension first, \[K=3"):
        stacked(x[0], e[0])
    with pytest.raises(IndexError, match="0..2"):
        stacked.member(3)
    with pytest.raises(ValueError, match="same class"):
        Stacked([models[0], NLinear(32, 8)])


def test_training_stacked_members_equals_separate_runs():
    """AdamW is elementwise and clipping is per member, so K members trained together
    on their own batches end where K separate train() runs on those batches end."""
    torch.manual_seed(0)
    batches = [(torch.randn(K, 4, 32, 1) * 3 + 5, torch.randn(K, 4, 8, 1)) for _ in range(6)]
    models = _forecasters("concat")
    for m in models:
        m.exog_mode, m.n_exog = None, 0  # no covariates: the plain encoder and head
        m.head = torch.nn.Linear(m.n_patches * 16, 8)
    stacked = Stacked(models)
    it = iter(batches)
    losses = train_stacked(
        stacked, lambda: next(it), lambda m, b: (m(b[0]) - b[1]).abs().flatten(1).mean(1), 6,
        1e-2, clip_norm=0.05, callbacks=[Schedule(warmup_cosine(2, 6))],
    )  # fmt: skip
    total = torch.zeros(6)
    for k, m in enumerate(models):  # the same batches, one model at a time
        it_k = iter(batches)
        total += torch.tensor(train(
            m, lambda it_k=it_k: next(it_k), lambda m_, b, k=k: (m_(b[0][k]) - b[1][k]).abs().mean(),
            6, 1e-2, clip_norm=0.05, callbacks=[Schedule(warmup_cosine(2, 6))], progress=False,
        ))  # fmt: skip
        # outputs, not every weight: the keys' bias gets a gradient of rounding noise
        # only (softmax ignores it), which Adam scales up differently in each run
        x = torch.randn(7, 32, 1) * 3 + 5
        with torch.no_grad():
            assert torch.allclose(stacked.member(k).eval()(x), m.eval()(x), atol=1e-4)
    assert torch.allclose(torch.tensor(losses), total, atol=1e-4)


def test_clip_per_member_matches_clip_grad_norm():
    grads = [torch.randn(K, 4, 5), torch.randn(K, 7)]
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    norms = clip_grad_norm_per_member(params, 1.0)
    for k in range(K):
        ref = [g[k].clone().requires_grad_() for g in grads]
        for r in ref:
            r.grad = r.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_(ref, 1.0)
        assert torch.isclose(norms[k], norm)
        for p, r in zip(params, ref, strict=True):
            assert torch.allclose(p.grad[k], r.grad, atol=1e-6)


def test_best_per_member_keeps_each_members_best_weights():
    torch.manual_seed(0)
    stacked = Stacked([NLinear(6, 2) for _ in range(K)])
    values = iter([[3.0, 1.0, 2.0], [1.0, 2.0, 2.0], [2.0, 0.5, 3.0]])  # evaluations 1..3

    def eval_fn(model):
        return torch.tensor(next(values))

    best = BestPerMember(eval_fn, every=1)
    snapshots = []

    def loss_fn(model, batch):
        snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})
        return (model(batch[0]) - batch[1]).pow(2).flatten(1).mean(1)

    batch = (torch.randn(K, 8, 6, 1), torch.randn(K, 8, 2, 1))
    train_stacked(stacked, lambda: batch, loss_fn, 3, 0.1, callbacks=[best])
    assert best.best_step.tolist() == [2, 3, 1] and best.best_value.tolist() == [1.0, 0.5, 2.0]
    after = {n: p.detach() for n, p in stacked.named_parameters()}
    # the weights after update s are the ones the loss of update s + 1 saw (or the final ones)
    finals = {n: p.detach().clone() for n, p in after.items()}
    states = snapshots[1:] + [finals]  # after updates 1, 2 and 3
    for n, p in after.items():
        for k, step in enumerate(best.best_step.tolist()):
            assert torch.equal(p[k], states[step - 1][n][k]), (n, k)


# ---------------------------------------------------------------------------
# Chapter 13: the ViT and the ConvNet as stacked members; per-member batches
# ---------------------------------------------------------------------------


def _vits(dropout: float = 0.0) -> list:
    from course_lib.vit import ViT

    config = TransformerConfig(
        d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=dropout, activation="gelu"
    )
    models = []
    for seed in range(K):
        torch.manual_seed(seed)
        models.append(ViT(config, 8, 2, 10))
    return models


def _convnets() -> list:
    from course_lib.convnet import ConvNet

    models = []
    for seed in range(K):
        torch.manual_seed(seed)
        models.append(ConvNet(8, 10, width=4))
    return models


@pytest.mark.parametrize("make", [_vits, _convnets])
def test_stacked_vit_and_convnet_forward_is_each_members(make):
    models = make()
    stacked = Stacked(models).eval()
    x = torch.randn(K, 5, 1, 8, 8)
    ref = torch.stack([m.eval()(x[k]) for k, m in enumerate(models)])
    assert torch.allclose(stacked(x), ref, atol=1e-5)
    assert torch.allclose(stacked.shared(x[0]), torch.stack([m(x[0]) for m in models]), atol=1e-5)


@pytest.mark.parametrize("make", [_vits, _convnets])
def test_training_stacked_vits_and_convnets_equals_separate_runs(make):
    """Chapter 13's sweep: each member its own data and stream, as separate runs see them."""
    data = [(torch.rand(n, 1, 8, 8), torch.randint(10, (n,))) for n in (7, 12, 30)]

    def loss(model, batch):  # cross-entropy of each member, [K]
        logits = model(batch[0])  # [K, B, 10]
        per_image = F.cross_entropy(logits.flatten(0, 1), batch[1].flatten(), reduction="none")
        return per_image.view(K, -1).mean(1)

    models = make()
    stacked = Stacked(models)
    gens = [torch.Generator().manual_seed(10 + k) for k in range(K)]
    losses = train_stacked(
        stacked, member_batches(data, 4, gens), loss, 5, 1e-2, weight_decay=0.05,
        callbacks=[Schedule(warmup_cosine(1, 5))],
    )  # fmt: skip
    total = torch.zeros(5)
    for k, m in enumerate(models):
        gen = torch.Generator().manual_seed(10 + k)
        x, y = data[k]

        def batch(x=x, y=y, gen=gen):
            rows = torch.randint(len(x), (4,), generator=gen)
            return x[rows], y[rows]

        total += torch.tensor(train(
            m, batch, lambda m_, b: F.cross_entropy(m_(b[0]), b[1]), 5, 1e-2, weight_decay=0.05,
            callbacks=[Schedule(warmup_cosine(1, 5))], progress=False,
        ))  # fmt: skip
        probe = torch.rand(6, 1, 8, 8)
        with torch.no_grad():
            assert torch.allclose(stacked.member(k).eval()(probe), m.eval()(probe), atol=1e-4)
    assert torch.allclose(torch.tensor(losses), total, atol=1e-4)


def test_stacked_vit_dropout_draws_differ_between_members():
    models = _vits(dropout=0.5)
    same = Stacked([models[0]] * K)  # K copies of one set of weights
    x = torch.rand(5, 1, 8, 8)
    out = same.shared(x)  # training mode: dropout on
    assert not torch.allclose(out[0], out[1]) and not torch.allclose(out[1], out[2])
    same.eval()
    out = same.shared(x)
    assert torch.allclose(out[0], out[1]) and torch.allclose(out[1], out[2])


def test_member_batches_draws_what_each_members_stream_would():
    data = [(torch.arange(n).float(), torch.arange(n) * 10) for n in (3, 50)]
    make = member_batches(data, 6, [torch.Generator().manual_seed(s) for s in (1, 2)])
    first, second = make(), make()
    assert first[0].shape == (2, 6) and first[1].shape == (2, 6)
    for k, (n, s) in enumerate([(3, 1), (50, 2)]):
        gen = torch.Generator().manual_seed(s)
        for got in (first, second):
            rows = torch.randint(n, (6,), generator=gen)
            assert torch.equal(got[0][k], rows.float()) and torch.equal(got[1][k], rows * 10)
    with pytest.raises(ValueError, match="one \\(tensors, generator\\) pair per member"):
        member_batches(data, 6, [torch.Generator()])
    with pytest.raises(ValueError, match="member 1 needs 2 tensors with the same number of rows"):
        member_batches([data[0], (torch.zeros(4), torch.zeros(5))], 6, [torch.Generator()] * 2)


# --- a learning-rate grid trained as one model; frozen weights stay frozen (Chapters 11, 12) ---


def _tiny_gpts(n: int, adapt=None):
    from course_lib import gpt

    torch.manual_seed(0)
    config = TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=8, activation="gelu")
    base = gpt.GPT(config, 11)
    return [adapt(copy.deepcopy(base)) if adapt else copy.deepcopy(base) for _ in range(n)]


def _lm_loss_per_member(model, window):
    x, y = window[:, :-1], window[:, 1:]  # [B, T]: every member reads the same windows
    logits = model.shared(x)  # [K, B, T, V]
    nll = torch.nn.functional.cross_entropy(
        logits.flatten(0, 2), y.expand(logits.shape[0], *y.shape).flatten(), reduction="none"
    )
    return nll.view(logits.shape[0], -1).mean(1)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_per_member_learning_rates_equal_separate_runs(method):
    """lr=[a, b, c]: member k ends where a separate train() run at lr[k] ends, on the same
    batches and schedule; with LoRA the frozen base is neither trained nor decayed."""
    from course_lib import gpt

    adapt = (lambda m: gpt.add_qv_lora(m, r=2, alpha=4.0)) if method == "lora" else None
    models = _tiny_gpts(K, adapt)
    lrs = (1e-3, 1e-2, 3e-2)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(11, (4, 9), generator=g) for _ in range(5)]
    stacked = Stacked(models)
    trainable = {n for n, p in stacked.named_parameters() if p.requires_grad}
    if method == "lora":
        assert trainable and all("lora" in n for n in trainable)  # only the factors
    before = {n: p.detach().clone() for n, p in stacked.named_parameters()}
    it = iter(batches)
    losses = train_stacked(
        stacked, lambda: next(it), _lm_loss_per_member, 5, lrs,
        callbacks=[Schedule(warmup_cosine(2, 5))],
    )  # fmt: skip
    total = torch.zeros(5)
    for k, lr in enumerate(lrs):
        alone = copy.deepcopy(models[k])  # Stacked copied the members: they did not train
        it_k = iter(batches)
        total += torch.tensor(train(
            alone, lambda it_k=it_k: next(it_k),
            lambda m, b: torch.nn.functional.cross_entropy(m(b[:, :-1]).flatten(0, 1), b[:, 1:].flatten()),
            5, lr, callbacks=[Schedule(warmup_cosine(2, 5))], progress=False,
        ))  # fmt: skip
        x = torch.randint(11, (3, 8), generator=g)
        with torch.no_grad():
            assert torch.allclose(stacked.member(k).eval()(x), alone.eval()(x), atol=1e-5)
    assert torch.allclose(torch.tensor(losses), total, atol=1e-4)
    for n, p in stacked.named_parameters():
        assert torch.equal(p, before[n]) == (n not in trainable), n  # frozen: bit for bit
    with pytest.raises(ValueError, match="one per member"):
        train_stacked(stacked, lambda: None, _lm_loss_per_member, 1, [1e-3, 1e-3])


@pytest.mark.parametrize("is_causal", [False, True])
def test_folded_attention_is_the_per_member_kernel_bit_for_bit(is_causal):
    # Stacked folds the members into the batch of PyTorch's fused CPU kernel (one call, not
    # K): the same outputs and gradients as the kernel run member by member, bit for bit
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 5, 2, 7, 4, requires_grad=True) for _ in range(3))  # [K, B, h, T, d]
    grad = torch.randn(3, 5, 2, 7, 4)
    fold = torch.func.vmap(lambda a, b, c: folded_attention(a, b, c, is_causal, 0.0))(q, k, v)
    loop = torch.stack(
        [F.scaled_dot_product_attention(q[i], k[i], v[i], is_causal=is_causal) for i in range(3)]
    )
    assert torch.equal(fold, loop)
    grads = [torch.autograd.grad(out, (q, k, v), grad) for out in (fold, loop)]
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    shared_kv = torch.func.vmap(  # keys and values without a member dimension (Stacked.shared)
        lambda a: folded_attention(a, k[0], v[0], is_causal, 0.0)
    )(q)
    assert torch.equal(
        shared_kv[2], F.scaled_dot_product_attention(q[2], k[0], v[0], is_causal=is_causal)
    )
    tq = torch.randn(3, 5, 2, 4, 7).transpose(-1, -2)  # a last stride of 7: PyTorch's math kernel
    loop = torch.stack([F.scaled_dot_product_attention(tq[i], k[i], v[i]) for i in range(3)])
    assert torch.equal(
        torch.func.vmap(lambda a, b, c: folded_attention(a, b, c, False, 0.0))(tq, k, v), loop
    )
