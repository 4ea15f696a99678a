"""``course_lib.lm``: several seeds trained as one vmapped model; the embeddings' balance;
the positional language model of Chapters 7-8 (every method at every length, causality,
the controls of the extrapolation experiment); the character vocabulary and batches."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import lm
from course_lib import position_hooks as H
from course_lib import positional as P
from course_lib.config import TransformerConfig
from tests.test_relative import _gen

DATA = torch.randint(0, 11, (600,), generator=torch.Generator().manual_seed(0))


def _models(method, n, **options):
    out = []
    for s in range(n):
        torch.manual_seed(s)
        out.append(
            lm.PositionalLM(
                TransformerConfig(
                    d_model=16, num_heads=2, num_layers=1, max_len=8, activation="gelu"
                ),
                11,
                method,
                **options,
            )
        )
    return out


@pytest.mark.parametrize("method", ["sinusoidal", "learned", "none", "t5", "rope", "shaw"])
def test_train_lm_seeds_equals_one_model_at_a_time(method):
    seeds = [3, 7]
    batched, single = _models(method, 2), _models(method, 2)
    losses = lm.train_lm_seeds(
        batched, DATA, 6, seeds=seeds, block=8, batch_size=4, lr=1e-2, progress=False
    )
    assert losses.shape == (6, 2)
    for s, (a, b) in enumerate(zip(batched, single, strict=True)):
        ref = lm.train_lm(b, DATA, 6, block=8, batch_size=4, lr=1e-2, seed=seeds[s], progress=False)
        assert torch.allclose(losses[:, s], torch.tensor(ref), atol=1e-4)
        for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
            # Adam turns rounding-level gradients (the key bias gets ~0) into lr-sized steps
            tol = 2e-2 if name.endswith("in_proj_bias") else 1e-4
            assert torch.allclose(p, q, atol=tol), (name, (p - q).abs().max())


@pytest.mark.parametrize("method", ["sinusoidal", "alibi"])
def test_train_lm_seeds_trains_a_single_model_as_train_lm_does(method):
    """One model (no after_backward) takes train_lm's own loop: the very same weights."""
    one, ref = _models(method, 1), _models(method, 1)
    losses = lm.train_lm_seeds(one, DATA, 6, seeds=[3], block=8, batch_size=4, progress=False)
    expected = lm.train_lm(ref[0], DATA, 6, block=8, batch_size=4, seed=3, progress=False)
    assert losses.shape == (6, 1) and losses[:, 0].tolist() == expected
    for p, q in zip(one[0].parameters(), ref[0].parameters(), strict=True):
        assert torch.equal(p, q)


def test_train_lm_seeds_sees_each_models_gradient_and_refuses_bad_input():
    seen = []
    models = _models("learned", 3)
    lm.train_lm_seeds(
        models,
        DATA,
        2,
        seeds=[0, 1, 2],
        block=8,
        batch_size=4,
        progress=False,
        after_backward=lambda p: seen.append(p["positions.weight"].grad.shape),
    )
    assert seen == [torch.Size([3, 8, 16])] * 2
    with pytest.raises(ValueError, match="one seed per model"):
        lm.train_lm_seeds(models, DATA, 2, seeds=[0], block=8, progress=False)


def test_train_lm_seeds_refuses_after_backward_where_it_cannot_vmap(monkeypatch):
    """Several models that cannot run under vmap train one after the other; a hook asked for
    there would never see the stacked gradients, so it is refused, naming the way out."""
    monkeypatch.setattr(lm, "_vmappable", lambda *args: False)
    with pytest.raises(ValueError, match=r"after_backward needs the models to run under vmap"):
        lm.train_lm_seeds(
            _models("learned", 2), DATA, 2, seeds=[0, 1], block=8, progress=False,
            after_backward=lambda p: None,
        )  # fmt: skip
    losses = lm.train_lm_seeds(
        _models("learned", 2), DATA, 2, seeds=[0, 1], block=8, progress=False
    )
    assert losses.shape == (2, 2)  # without the hook: one after the other


def test_train_lm_seeds_shows_a_single_model_its_gradient_in_train_lms_loop():
    """One model with after_backward: train_lm's loop and weights; the hook sees [1, ...]
    views of its parameters with the gradient before clipping (Chapter 7's row gradients)."""
    one, ref = _models("learned", 1), _models("learned", 1)
    seen = []

    def look(params):
        grads = [p.grad for p in params.values()]
        seen.append(
            (params["positions.weight"].grad.shape, torch.stack([g.norm() for g in grads]).norm())
        )
        assert params["positions.weight"].data_ptr() == one[0].positions.weight.data_ptr()

    options = dict(block=8, batch_size=4, lr=1e-2, progress=False, clip_norm=1e-3)
    losses = lm.train_lm_seeds(one, DATA, 5, seeds=[3], after_backward=look, **options)
    options.pop("progress")
    expected = lm.train_lm(ref[0], DATA, 5, seed=3, progress=False, **options)
    assert losses[:, 0].tolist() == expected
    for p, q in zip(one[0].parameters(), ref[0].parameters(), strict=True):
        assert torch.equal(p, q)
    assert [shape for shape, _ in seen] == [torch.Size([1, 8, 16])] * 5
    assert all(norm > 1e-3 for _, norm in seen)  # before clipping to 1e-3


def test_token_scale_gives_the_original_balance():
    d = 64
    torch.manual_seed(0)
    model = lm.PositionalLM(
        TransformerConfig(d_model=d, activation="gelu"),
        50,
        "sinusoidal",
        token_init_std=d**-0.5,
        token_scale=d**0.5,
    )
    tokens = model.embed.weight.norm(dim=1).mean().item() * model.token_scale
    assert math.isclose(tokens, math.sqrt(d), rel_tol=0.1)  # about sqrt(D), table sqrt(D/2)
    ids = torch.randint(0, 50, (2, 5))
    plain = lm.PositionalLM(
        TransformerConfig(d_model=d, activation="gelu"), 50, "none", token_scale=2.0
    )
    x = plain.embed(ids) * 2.0
    assert torch.allclose(plain.head(plain.blocks(x, is_causal=True)), plain(ids))
    with pytest.raises(ValueError, match="token_init_std and token_scale must be > 0"):
        lm.PositionalLM(TransformerConfig(activation="gelu"), 50, "none", token_scale=0.0)


# ---------------------------------------------------------------------------
# Chapter 8: the language model of the extrapolation experiment
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", H.POSITION_METHODS)
def test_lm_runs_at_every_length(method):
    torch.manual_seed(0)
    model = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=8, activation="gelu"),
        11,
        method,
    )
    data = torch.randint(0, 11, (200,), generator=_gen(5))
    assert model(data[:16].view(2, 8)).shape == (2, 8, 11)
    loss_1x = lm.evaluate_lm(model, data, 8, num_chars=64)
    loss_2x = lm.evaluate_lm(model, data, 16, num_chars=64)
    assert math.isnan(loss_2x) == (method == "learned")
    assert lm.evaluate_lm(model, data, 8, num_chars=64) == loss_1x  # deterministic
    # the value: the mean next-token cross-entropy over the same 64 targets, by hand
    model.eval()
    with torch.no_grad():
        logits = model(data[:64].view(8, 8))
    by_hand = torch.nn.functional.cross_entropy(logits.flatten(0, 1), data[1:65]).item()
    assert loss_1x == pytest.approx(by_hand, rel=1e-6)
    assert abs(loss_1x - math.log(11)) < 0.5  # untrained: close to uniform over 11 symbols


def test_lm_is_causal():
    """Changing a later token never changes the logits of earlier positions."""
    for method in H.POSITION_METHODS:
        torch.manual_seed(0)
        model = lm.PositionalLM(
            TransformerConfig(d_model=16, num_heads=2, num_layers=2, max_len=12, activation="gelu"),
            11,
            method,
        ).eval()
        x = torch.randint(0, 11, (1, 12), generator=_gen(6))
        y = x.clone()
        y[0, 7] = (y[0, 7] + 1) % 11
        with torch.no_grad():
            torch.testing.assert_close(model(x)[0, :7], model(y)[0, :7])


def test_evaluate_lm_is_nan_beyond_a_learned_table_only():
    torch.manual_seed(0)
    data = torch.randint(0, 11, (200,), generator=_gen(7))
    learned = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=8, activation="gelu"),
        11,
        "learned",
    )
    by_position = lm.evaluate_lm(learned, data, 16, num_chars=64, per_position=True)
    assert by_position.shape == (16,) and by_position.isnan().all()
    assert math.isfinite(lm.evaluate_lm(learned, data, 8, num_chars=64))
    assert learned.training  # the mode it was in is restored


# ---------------------------------------------------------------------------
# Chapter 7: the controls of the extrapolation experiment
# ---------------------------------------------------------------------------


def test_position_scale_and_offset_of_the_sinusoidal_model():
    torch.manual_seed(0)
    model = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, activation="gelu"),
        11,
        "sinusoidal",
    )
    ids = torch.randint(0, 11, (2, 8), generator=_gen(4))
    x = model.embed(ids)
    # offset: the table rows offset .. offset + T - 1 are added (checked through a hook on blocks)
    seen = {}
    handle = model.blocks.register_forward_pre_hook(lambda m, a: seen.update(x=a[0]))
    model(ids, offset=5)
    handle.remove()
    torch.testing.assert_close(seen["x"], x + P.sinusoidal_table(13, 16)[5:])
    scaled = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, activation="gelu"),
        11,
        "sinusoidal",
        position_scale=0.1,
    )
    handle = scaled.blocks.register_forward_pre_hook(lambda m, a: seen.update(x=a[0]))
    scaled(ids)
    handle.remove()
    torch.testing.assert_close(seen["x"], scaled.embed(ids) + 0.1 * P.sinusoidal_table(8, 16))


def test_offset_evaluation():
    torch.manual_seed(0)
    data = torch.randint(0, 11, (200,), generator=_gen(6))
    learned = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=16, activation="gelu"),
        11,
        "learned",
    )
    assert math.isfinite(lm.evaluate_lm(learned, data, 8, num_chars=64, offset=8))
    assert math.isnan(lm.evaluate_lm(learned, data, 8, num_chars=64, offset=9))
    # a relative method sees offsets j - i only: shifting every position changes nothing
    alibi = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, activation="gelu"), 11, "alibi"
    )
    assert lm.evaluate_lm(alibi, data, 8, num_chars=64, offset=100) == pytest.approx(
        lm.evaluate_lm(alibi, data, 8, num_chars=64), abs=1e-6
    )
    sinus = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, activation="gelu"),
        11,
        "sinusoidal",
    )
    assert lm.evaluate_lm(sinus, data, 8, num_chars=64, offset=100) != lm.evaluate_lm(
        sinus, data, 8, num_chars=64
    )


def test_position_scale_and_offset_errors_are_clear():
    with pytest.raises(ValueError, match="position_scale scales the sinusoidal table"):
        lm.PositionalLM(
            TransformerConfig(d_model=16, num_heads=2, activation="gelu"),
            11,
            "rope",
            position_scale=0.5,
        )
    model = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, activation="gelu"),
        11,
        "sinusoidal",
    )
    with pytest.raises(ValueError, match="offset must be an int >= 0"):
        model(torch.zeros(1, 4, dtype=torch.long), offset=-1)
    with pytest.raises(ValueError, match="offset must be an int >= 0"):
        lm.evaluate_lm(model, torch.zeros(100, dtype=torch.long), 8, num_chars=64, offset=-2)


def test_char_vocab_and_batches_errors():
    vocab = lm.CharVocab("abc")
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        vocab.encode("abz")
    with pytest.raises(ValueError, match=r"got \[2, 3\]"):
        lm.batches(torch.zeros(2, 3, dtype=torch.long), 4, 2, generator=torch.Generator())


# ---------------------------------------------------------------------------
# Speed (issue 32): the stacked seeds' optimizer runs foreach, with the same weights
# ---------------------------------------------------------------------------


def test_train_lm_seeds_foreach_adamw_gives_the_loops_weights(monkeypatch):
    fast = _models("rope", 2)
    lm.train_lm_seeds(fast, DATA, 4, seeds=[3, 7], block=8, batch_size=4, progress=False)
    adamw = torch.optim.AdamW  # the reference: AdamW's loop over tensors (the CPU default)
    monkeypatch.setattr(torch.optim, "AdamW", lambda *a, **k: adamw(*a, **(k | {"foreach": False})))
    slow = _models("rope", 2)
    lm.train_lm_seeds(slow, DATA, 4, seeds=[3, 7], block=8, batch_size=4, progress=False)
    for a, b in zip(fast, slow, strict=True):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.equal(p, q)


# --- members_lm_loss: the next-token loss of each member of a Stacked model (Chapter 11) ---


def test_members_lm_loss_is_each_members_lm_loss():
    from course_lib.ensemble import Stacked

    config = TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=8, activation="gelu")
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(lm.PositionalLM(config, 11, "learned"))
    x = torch.randint(11, (4, 8))
    y = torch.randint(11, (4, 8))
    got = lm.members_lm_loss(Stacked(models), (x, y))
    want = torch.stack([lm.lm_loss(m, (x, y)) for m in models])
    assert got.shape == (3,) and torch.allclose(got, want, atol=1e-6)
