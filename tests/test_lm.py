"""``course_lib.lm``: several seeds trained as one vmapped model; the embeddings' balance."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import lm
from course_lib.config import TransformerConfig

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


@pytest.mark.parametrize("method", ["sinusoidal", "t5", "rope", "shaw"])
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
