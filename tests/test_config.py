"""TransformerConfig (course_lib.config): validation, and the same models as before it.

The models took their sizes as seven separate signatures until commit
``e34b2d4``; they now take one :class:`TransformerConfig`.  So that no chapter's
numbers move, :func:`test_same_parameters_as_before_the_config` builds each
model both ways under the same seed -- the old way from that commit's source
(``git show``), the new way from this checkout -- and asserts identical state
dicts (names, order, values) and identical outputs.  It is skipped where git or
that commit is not available (an installed copy of the course).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from course_lib import gpt, lm, timeseries, transformer, vit
from course_lib.config import TransformerConfig
from course_lib.position_hooks import POSITION_METHODS

BEFORE = "e34b2d4447eb97e9c8a55d4f5f77d8e8777284cd"  # the last commit before the config
ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("seed_and_one_thread")


def test_d_ff_defaults_to_four_d_model_and_replace_revalidates():
    c = TransformerConfig(d_model=16, num_heads=2)
    assert c.d_ff == 64 and c.to_dict()["d_ff"] == 64
    assert TransformerConfig(**c.to_dict()) == c
    assert c.replace(num_layers=5).num_layers == 5
    with pytest.raises(ValueError, match="multiple of num_heads"):
        c.replace(num_heads=3)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(d_model=10, num_heads=4), r"d_model \(10\) must be a multiple of num_heads \(4\)"),
        (dict(num_layers=0), "num_layers must be a positive int"),
        (dict(d_ff=2.5), "d_ff must be a positive int"),
        (dict(dropout=1.0), r"dropout must be in \[0, 1\)"),
        (dict(activation="tanh"), "activation must be one of"),
        (dict(eps=0.0), "eps must be > 0"),
    ],
)
def test_bad_config_names_the_fix(changes, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**changes)


def test_a_model_given_sizes_instead_of_a_config_says_how_to_build_it():
    with pytest.raises(TypeError, match=r"DecoderOnly\(TransformerConfig\("):
        transformer.DecoderOnly(10, 32)


def test_config_is_frozen_and_kept_by_the_model():
    c = TransformerConfig(d_model=16, num_heads=2, num_layers=1)
    model = transformer.DecoderOnly(c, 11)
    assert model.config is c and model.blocks.config is c
    with pytest.raises(AttributeError):
        c.d_model = 32


# --- the same models as before ------------------------------------------------------------


def _old_source(module: str) -> str:
    try:
        out = subprocess.run(
            ["git", "show", f"{BEFORE}:course_lib/{module}.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"git or commit {BEFORE[:7]} not available")
    return out.stdout


@contextlib.contextmanager
def _as(name: str, module: types.ModuleType):
    """While loading an old module, ``import course_lib.<name>`` gives the old ``module``."""
    full = f"course_lib.{name}"
    saved = sys.modules[full]
    sys.modules[full] = module
    try:
        yield
    finally:
        sys.modules[full] = saved


def _load_old(module: str, old_transformer: types.ModuleType | None = None) -> types.ModuleType:
    mod = types.ModuleType(f"_old_{module}")
    code = compile(_old_source(module), f"{BEFORE[:7]}:course_lib/{module}.py", "exec")
    with _as("transformer", old_transformer) if old_transformer else contextlib.nullcontext():
        exec(code, mod.__dict__)
    return mod


@pytest.fixture(scope="module")
def old():
    tf = _load_old("transformer")
    return types.SimpleNamespace(
        transformer=tf,
        gpt=_load_old("gpt", tf),
        lm=_load_old("lm", tf),
        vit=_load_old("vit"),
        timeseries=_load_old("timeseries", tf),
    )


def _ids(vocab, b=2, t=6):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(1))


def _x(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(2))


def _cases():
    """(name, old builder, new builder, inputs): the sizes the chapters and tests use."""
    small = dict(d_model=16, num_heads=2, num_layers=2, d_ff=32)
    post = TransformerConfig(**small, dropout=0.1, max_len=16, norm_first=False)
    cases = [
        (
            "Encoder pre-norm",
            lambda o: o.transformer.Encoder(2, 16, 2, 32, norm_first=True),
            lambda: transformer.Encoder(TransformerConfig(**small)),
            lambda: (_x(2, 5, 16),),
        ),
        (
            "Encoder post-norm, final norm",
            lambda o: o.transformer.Encoder(2, 16, 2, 32, 0.1, final_norm=True),
            lambda: transformer.Encoder(post, final_norm=True),
            lambda: (_x(2, 5, 16),),
        ),
        (
            "Decoder post-norm",
            lambda o: o.transformer.Decoder(2, 16, 2, 32, activation="gelu"),
            lambda: transformer.Decoder(
                TransformerConfig(**small, norm_first=False, activation="gelu")
            ),
            lambda: (_x(2, 4, 16), _x(2, 5, 16)),
        ),
        (
            "EncoderDecoder",
            lambda o: o.transformer.EncoderDecoder(
                6, 16, 2, 2, 32, 0.1, max_len=16, norm_first=False
            ),
            lambda: transformer.EncoderDecoder(post, 6),
            lambda: (_ids(6), _ids(6, t=4)),
        ),
        (
            "EncoderDecoder, defaults",
            lambda o: o.transformer.EncoderDecoder(9),
            lambda: transformer.EncoderDecoder(TransformerConfig(d_ff=128), 9),
            lambda: (_ids(9), _ids(9, t=4)),
        ),
        (
            "EncoderOnly",
            lambda o: o.transformer.EncoderOnly(11, 3, 16, 2, 1, 32, max_len=16),
            lambda: transformer.EncoderOnly(
                TransformerConfig(**small | dict(num_layers=1), max_len=16), 11, 3
            ),
            lambda: (_ids(11),),
        ),
        (
            "DecoderOnly",
            lambda o: o.transformer.DecoderOnly(11, 16, 2, 1, 32, activation="gelu"),
            lambda: transformer.DecoderOnly(
                TransformerConfig(**small | dict(num_layers=1), activation="gelu"), 11
            ),
            lambda: (_ids(11),),
        ),
        (
            "GPT",
            lambda o: o.gpt.GPT(50, d_model=32, num_heads=4, num_layers=2, max_len=16),
            lambda: gpt.GPT(
                TransformerConfig(d_model=32, num_heads=4, max_len=16, activation="gelu"), 50
            ),
            lambda: (_ids(50),),
        ),
        (
            "ViT",
            lambda o: o.vit.ViT(8, 4, 10, d_model=16, num_layers=2, num_heads=2, d_ff=32),
            lambda: vit.ViT(TransformerConfig(**small, activation="gelu", eps=1e-6), 8, 4, 10),
            lambda: (_x(2, 1, 8, 8),),
        ),
    ]
    for method in POSITION_METHODS:
        cases.append(
            (
                f"PositionalLM {method}",
                lambda o, m=method: o.lm.PositionalLM(
                    11, m, d_model=16, num_heads=2, num_layers=1, max_len=8
                ),
                lambda m=method: lm.PositionalLM(
                    TransformerConfig(
                        d_model=16, num_heads=2, num_layers=1, max_len=8, activation="gelu"
                    ),
                    11,
                    m,
                ),
                lambda: (_ids(11),),
            )
        )
    for n_exog, mode in [(0, "cross"), (2, "cross"), (2, "concat"), (2, "horizon")]:
        cases.append(
            (
                f"PatchForecaster {n_exog} {mode}",
                lambda o, n=n_exog, m=mode: o.timeseries.PatchForecaster(
                    48, 12, patch_len=8, stride=4, d_model=16, num_heads=2, n_exog=n, exog_mode=m
                ),
                lambda n=n_exog, m=mode: timeseries.PatchForecaster(
                    TransformerConfig(d_model=16, num_heads=2, d_ff=64),
                    48,
                    12,
                    patch_len=8,
                    stride=4,
                    n_exog=n,
                    exog_mode=m,
                ),
                lambda n=n_exog: (_x(2, 48, 1), _x(2, 60, n) if n else None),
            )
        )
    return cases


@pytest.mark.parametrize(
    ("name", "build_old", "build_new", "inputs"), _cases(), ids=[c[0] for c in _cases()]
)
def test_same_parameters_as_before_the_config(old, name, build_old, build_new, inputs):
    torch.manual_seed(0)
    before = build_old(old).eval()
    torch.manual_seed(0)
    after = build_new().eval()
    a, b = before.state_dict(), after.state_dict()
    assert list(a) == list(b), name
    for key in a:
        assert torch.equal(a[key], b[key]), f"{name}: {key}"
    with torch.no_grad():
        assert torch.equal(before(*inputs()), after(*inputs())), name
