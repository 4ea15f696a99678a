"""One contract for every ``nn.Module`` class that ``course_lib`` exports (issue 19).

Every class listed in the ``__all__`` of a ``course_lib`` module (``course_lib.grading``
excepted) that subclasses ``nn.Module`` has an entry in :data:`BUILD`: a small instance
and example inputs.  For each, in float32 and float64, on the CPU and on CUDA when
there is one:

* ``.to(device, dtype)`` moves every parameter and buffer, and the module holds no
  tensor outside them (a plain tensor attribute would be left behind by ``.to()``);
* the floating outputs have the module's dtype and device;
* in ``eval()`` the same input gives the same output twice, and that output is the
  one of the module in ``train()`` with every dropout rate set to zero: dropout is
  off in eval.  Modules are built with ``dropout=0.5`` wherever a dropout rate can
  be set, so dropout left on in eval cannot hide;
* in ``train()`` two calls differ, for every module that has dropout;
* float64 agrees with float32 (same weights) to float32 rounding.

:func:`test_every_exported_module_class_has_a_build_entry` fails when a new class is
exported without an entry, so a new module is held to the same contract.

Functions have their half of the contract in :mod:`tests.test_function_contracts`.

Also here: ``EncoderBlock.from_torch`` / ``DecoderBlock.from_torch`` keep the torch
layer's dtype and its activation (tanh-approximated GELU reproduced exactly or
refused, never silently replaced), and ``gat.GCNLayer`` runs in float64.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import Tensor, nn

import course_lib
from course_lib import (
    attention,
    bert,
    blocks,
    convnet,
    ensemble,
    forecasting,
    gat,
    gpt,
    lm,
    position_hooks,
    positional,
    rnn,
    seq2seq,
    timeseries,
    vit,
)
from course_lib import transformer as tf
from course_lib.config import TransformerConfig

pytestmark = pytest.mark.usefixtures("seed_and_one_thread")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64]
P = 0.5  # the dropout rate of every module that takes one
D, HEADS, FF = 8, 2, 16  # model width, heads (head width 4), feed-forward width
#: the Transformer models' trunk: one block, every dropout at P
CFG = TransformerConfig(d_model=D, num_heads=HEADS, num_layers=1, d_ff=FF, dropout=P, max_len=16)
#: Chapter 8's language model: GELU, d_ff = 4 D, no dropout
LM_CFG = CFG.replace(d_ff=4 * D, dropout=0.0, activation="gelu")


# ---------------------------------------------------------------------------
# Every exported nn.Module class
# ---------------------------------------------------------------------------


def exported_module_classes() -> dict[str, type[nn.Module]]:
    """``{name: class}`` of every nn.Module subclass in the ``__all__`` of a course_lib module."""
    found: dict[str, type[nn.Module]] = {}
    for info in pkgutil.iter_modules(course_lib.__path__):
        if info.name == "grading" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"course_lib.{info.name}")
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, nn.Module):
                if name in found and found[name] is not obj:
                    raise AssertionError(f"two exported classes are named {name}")
                found[name] = obj
    return found


# ---------------------------------------------------------------------------
# Small instances and example inputs
# ---------------------------------------------------------------------------


def _ids(high: int, *shape: int) -> Tensor:
    return torch.randint(high, shape)


def _x(*shape: int) -> Tensor:
    return torch.randn(*shape)


BERT_CFG = bert.BertConfig(
    vocab_size=20,
    hidden_size=D,
    num_hidden_layers=1,
    num_attention_heads=HEADS,
    intermediate_size=FF,
    max_position_embeddings=12,
    type_vocab_size=2,
    dropout=P,
)
EDGES = torch.tensor([[0, 1, 2, 3, 4, 1], [1, 2, 3, 4, 0, 0]])  # 5 nodes, node 0 gets two


def _graph() -> tuple[Tensor, Tensor]:
    return _x(5, 3), EDGES.clone()


def _with_hook(hook: nn.Module) -> tuple[nn.Module, tuple]:
    """A position hook has no forward: it is exercised by the attention that calls it."""
    for p in hook.parameters():  # T5's table starts at zero: make the hook do something
        nn.init.normal_(p, std=0.5)
    return attention.MultiHeadAttention(D, HEADS, P, position=hook), (_x(2, 5, D),)


def _adapter(base: nn.Linear, bottleneck: int) -> gpt.BottleneckAdapter:
    adapter = gpt.BottleneckAdapter(base, bottleneck)
    nn.init.normal_(adapter.up.weight, std=0.5)  # W_up starts at zero: make it do something
    return adapter


def _patch_forecaster(n_exog: int) -> tuple[nn.Module, tuple]:
    model = timeseries.PatchForecaster(CFG, 16, 4, patch_len=4, stride=4, n_exog=n_exog)
    x = _x(2, 16, 3) + 5.0
    return model, (x,) if not n_exog else (x, _x(2, 20, n_exog))


#: name -> () -> (module, example inputs).  The module is an instance of the class, or
#: (for a class without a forward of its own) a module that contains one and runs it.
BUILD: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    # attention
    "AdditiveAttention": lambda: (attention.AdditiveAttention(4, 6, 5), (_x(2, 3, 4), _x(2, 5, 6))),
    "LuongAttention": lambda: (
        attention.LuongAttention(4, 6, "concat"),
        (_x(2, 3, 4), _x(2, 5, 6)),
    ),
    "MultiHeadAttention": lambda: (attention.MultiHeadAttention(D, HEADS, P), (_x(2, 5, D),)),
    # transformer
    "FeedForward": lambda: (blocks.FeedForward(D, FF, P, "gelu"), (_x(2, 5, D),)),
    "EncoderBlock": lambda: (blocks.EncoderBlock(D, HEADS, FF, P), (_x(2, 5, D),)),
    "DecoderBlock": lambda: (
        blocks.DecoderBlock(D, HEADS, FF, P, norm_first=True),
        (_x(2, 5, D), _x(2, 4, D)),
    ),
    "Encoder": lambda: (tf.Encoder(CFG.replace(num_layers=2)), (_x(2, 5, D),)),
    "Decoder": lambda: (
        tf.Decoder(CFG.replace(num_layers=2, norm_first=False)),
        (_x(2, 5, D), _x(2, 4, D)),
    ),
    "EncoderDecoder": lambda: (tf.EncoderDecoder(CFG, 6), (_ids(6, 2, 5), _ids(7, 2, 4))),
    "EncoderOnly": lambda: (tf.EncoderOnly(CFG, 11, 3), (_ids(11, 2, 6),)),
    "DecoderOnly": lambda: (tf.DecoderOnly(CFG, 11), (_ids(11, 2, 6),)),
    # BERT, GPT, ViT
    "BertEncoder": lambda: (bert.BertEncoder(BERT_CFG), (_ids(20, 2, 6),)),
    "MaskedLM": lambda: (bert.MaskedLM(BERT_CFG), (_ids(20, 2, 6),)),
    "Classifier": lambda: (bert.Classifier(bert.BertEncoder(BERT_CFG), 3, P), (_ids(20, 2, 6),)),
    "GPT": lambda: (
        gpt.GPT(CFG.replace(d_ff=4 * D, activation="gelu"), 11),
        (_ids(11, 2, 6),),
    ),
    "LoRALinear": lambda: (gpt.LoRALinear(nn.Linear(4, 5), r=2), (_x(3, 4),)),
    "SliceLoRA": lambda: (gpt.SliceLoRA(_x(12, 4), r=2), (_x(12, 4),)),
    "BottleneckAdapter": lambda: (_adapter(nn.Linear(4, 5), 2), (_x(3, 4),)),
    "PatchEmbedding": lambda: (vit.PatchEmbedding(1, D, 2), (_x(2, 1, 4, 4),)),
    "ViT": lambda: (
        vit.ViT(CFG.replace(activation="gelu", eps=1e-6), 4, 2, 3),
        (_x(2, 1, 4, 4),),
    ),
    "ConvNet": lambda: (convnet.ConvNet(4, 3, width=2), (_x(2, 1, 4, 4),)),
    # positions (Chapters 7-8)
    "LearnedPositions": lambda: (positional.LearnedPositions(6, D), (4, 1)),
    "PositionHook": lambda: _with_hook(position_hooks.PositionHook()),
    "ShawPositions": lambda: _with_hook(position_hooks.ShawPositions(D // HEADS, 3)),
    "T5Bias": lambda: _with_hook(position_hooks.T5Bias(HEADS, 8, 16)),
    "ALiBi": lambda: _with_hook(position_hooks.ALiBi(HEADS)),
    "RoPE": lambda: _with_hook(position_hooks.RoPE(D // HEADS)),
    "PositionalLM": lambda: (
        lm.PositionalLM(LM_CFG, 11, "shaw"),
        (_ids(11, 2, 6),),
    ),
    # recurrent layers and seq2seq (Chapters 1-2)
    "RNN": lambda: (rnn.RNN(3, 4), (_x(2, 5, 3),)),
    "LSTM": lambda: (rnn.LSTM(3, 4), (_x(2, 5, 3),)),
    "GRU": lambda: (rnn.GRU(3, 4), (_x(2, 5, 3),)),
    "Seq2Seq": lambda: (seq2seq.Seq2Seq(6, 4, 8), (_ids(6, 2, 5), _ids(7, 2, 4))),
    "BahdanauSeq2Seq": lambda: (
        seq2seq.BahdanauSeq2Seq(6, 4, 8),
        (_ids(6, 2, 5), _ids(7, 2, 4)),
    ),
    "LuongSeq2Seq": lambda: (
        seq2seq.LuongSeq2Seq(6, 4, 8, score="dot", window=1),
        (_ids(6, 2, 5), _ids(7, 2, 4)),
    ),
    # the shared base (its own forward needs a model's start/step): local-p Luong
    "GRUEncoderDecoder": lambda: (
        seq2seq.LuongSeq2Seq(6, 4, 8, score="concat", window=1, align="predictive"),
        (_ids(6, 2, 5), _ids(7, 2, 4)),
    ),
    # time series (Chapter 10); RevIN has no forward: it runs inside the forecaster
    "Time2Vec": lambda: (timeseries.Time2Vec(3), (torch.arange(10.0).reshape(2, 5),)),
    "RevIN": lambda: _patch_forecaster(n_exog=2),
    "PatchForecaster": lambda: _patch_forecaster(n_exog=0),
    "NLinear": lambda: (forecasting.NLinear(16, 4), (_x(2, 16, 3),)),
    "DLinear": lambda: (forecasting.DLinear(16, 4, kernel=5), (_x(2, 16, 3) + 5.0,)),
    # members stacked by vmap (no dropout: its members live outside the module tree)
    "Stacked": lambda: (
        ensemble.Stacked([forecasting.NLinear(16, 4) for _ in range(2)]),
        (_x(2, 3, 16, 2),),
    ),
    "RelativeTimeBias": lambda: (
        timeseries.RelativeTimeBias(HEADS, [7.0, 52.0]),
        (_x(2, 5) * 10, _x(2, 6) * 10),
    ),
    # graphs (Chapter 14)
    "GCNLayer": lambda: (gat.GCNLayer(3, 4), _graph()),
    "GATLayer": lambda: (gat.GATLayer(3, 4, 2, dropout=P), _graph()),
    "GATv2Layer": lambda: (gat.GATv2Layer(3, 4, 2, dropout=P), _graph()),
    "MLP": lambda: (gat.MLP(3, 8, 2, dropout=P), _graph()),
    "GCN": lambda: (gat.GCN(3, 8, 2, dropout=P), _graph()),
    "GAT": lambda: (gat.GAT(3, 2, hidden=4, heads=2, dropout=P), _graph()),
}

#: Classes whose dropout cannot be set (so they are built with their fixed rate 0), and why.
FIXED_DROPOUT = {
    "PositionalLM": "Chapter 8's experiment model takes no dropout argument",
}


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _tensors(obj) -> Iterator[Tensor]:
    """Every tensor in a (nested) output: tensors, tuples, lists, dicts; None is skipped."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _move(inputs: tuple, device: str, dtype: torch.dtype) -> tuple:
    """Floating inputs to ``dtype`` and ``device``; integer ones (ids, edges) to ``device``."""
    return tuple(
        (x.to(device, dtype) if x.is_floating_point() else x.to(device))
        if isinstance(x, Tensor)
        else x
        for x in inputs
    )


def _dropout_rates(module: nn.Module) -> list[float]:
    """Every dropout rate inside ``module``: ``nn.Dropout.p`` and float ``dropout`` attributes."""
    rates = []
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            rates.append(m.p)
        elif isinstance(getattr(m, "dropout", None), float):
            rates.append(m.dropout)
    return rates


def _zero_dropout(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        elif isinstance(getattr(m, "dropout", None), float):
            m.dropout = 0.0


def _max_diff(a, b) -> float:
    ta, tb = list(_tensors(a)), list(_tensors(b))
    assert [t.shape for t in ta] == [t.shape for t in tb]
    diffs = [
        (x.double() - y.double()).abs().max().item()
        for x, y in zip(ta, tb, strict=True)
        if x.numel()
    ]
    return max(diffs, default=0.0)


def _build(name: str) -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    module, inputs = BUILD[name]()
    cls = exported_module_classes()[name]
    assert any(isinstance(m, cls) for m in module.modules()), f"BUILD[{name!r}] holds no {name}"
    return module, inputs


# ---------------------------------------------------------------------------
# The contract
# ---------------------------------------------------------------------------


def test_every_exported_module_class_has_a_build_entry():
    exported = exported_module_classes()
    assert len(exported) >= 30, sorted(exported)  # the walk found the library
    missing = sorted(set(exported) - set(BUILD))
    assert not missing, (
        f"exported nn.Module classes without a BUILD entry in {__name__}: {missing}; "
        "add one (small sizes, dropout > 0 where the constructor takes it)"
    )
    stale = sorted(set(BUILD) - set(exported))
    assert not stale, f"BUILD entries for classes no longer exported: {stale}"


@pytest.mark.parametrize("name", sorted(BUILD))
def test_dropout_is_set_wherever_it_can_be(name):
    """A module with a dropout rate is built with it > 0, so that the eval test below has
    something to catch; the constructor's own ``dropout`` argument counts as settable."""
    module, _ = _build(name)
    rates = _dropout_rates(module)
    takes_dropout = "dropout" in inspect.signature(type(module).__init__).parameters
    if name in FIXED_DROPOUT:
        assert not takes_dropout and not any(rates), f"{name} now takes a dropout: build it > 0"
    elif takes_dropout or rates:
        assert rates and all(r > 0 for r in rates), f"{name}: dropout rates {rates}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(BUILD))
def test_module_contract(name, dtype, device):
    module, inputs = _build(name)
    loose = [
        f"{mod_name or type(module).__name__}.{attr}"
        for mod_name, m in module.named_modules()
        for attr, value in vars(m).items()
        if isinstance(value, Tensor)
    ]
    assert not loose, f"tensors that are neither parameters nor buffers (.to() skips them): {loose}"

    module = module.to(device=device, dtype=dtype)
    for what, named in (("parameter", module.named_parameters), ("buffer", module.named_buffers)):
        for pname, t in named():
            assert t.device.type == device, f"{what} {pname} stayed on {t.device}"
            if t.is_floating_point():
                assert t.dtype == dtype, f"{what} {pname} is {t.dtype} after .to({dtype})"
    inputs = _move(inputs, device, dtype)

    module.eval()
    with torch.no_grad():
        first, second = module(*inputs), module(*inputs)
    outputs = list(_tensors(first))
    assert outputs, f"{name} returned no tensor"
    for t in outputs:
        assert t.device.type == device
        if t.is_floating_point():
            assert t.dtype == dtype, f"{name}: a {dtype} module returned {t.dtype}"
            assert torch.isfinite(t).all(), f"{name}: non-finite output"
    tol = 1e-6 if device == "cpu" else 1e-5  # CUDA's index_add_ may sum in any order
    assert _max_diff(first, second) <= tol, f"{name}: eval() is not deterministic"

    _zero_dropout(module)
    module.train()
    with torch.no_grad():
        no_dropout = module(*inputs)
    assert _max_diff(first, no_dropout) <= tol, (
        f"{name}: eval() output differs from train() with every dropout rate 0, "
        "so eval() does not switch dropout off"
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "name", [n for n in sorted(BUILD) if n not in FIXED_DROPOUT and _dropout_rates(BUILD[n]()[0])]
)
def test_dropout_is_on_in_train_mode(name, device):
    module, inputs = _build(name)
    module.to(device).train()
    inputs = _move(inputs, device, torch.float32)
    with torch.no_grad():
        first, second = module(*inputs), module(*inputs)
    assert _max_diff(first, second) > 1e-4, f"{name}: dropout {P} changed nothing in train()"


@pytest.mark.parametrize("name", sorted(BUILD))
def test_float64_agrees_with_float32(name):
    """The same weights in both precisions: a float32 constant or cast inside a float64
    computation would leave a float32-sized error."""
    module32, inputs = _build(name)
    module64 = copy.deepcopy(module32).double().eval()
    module32.eval()
    with torch.no_grad():
        out32 = module32(*_move(inputs, "cpu", torch.float32))
        out64 = module64(*_move(inputs, "cpu", torch.float64))
    scale = max((t.abs().max().item() for t in _tensors(out64) if t.is_floating_point()), default=1)
    assert _max_diff(out32, out64) <= 1e-4 * max(1.0, scale)


# ---------------------------------------------------------------------------
# from_torch keeps the layer's dtype and activation; GCN in float64
# ---------------------------------------------------------------------------


def _torch_layer(kind: str, **kw) -> nn.Module:
    cls = nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer
    return cls(D, HEADS, FF, dropout=0.0, batch_first=True, **kw).eval()


def _block_and_args(kind: str, layer: nn.Module, dtype: torch.dtype):
    block_cls = blocks.EncoderBlock if kind == "encoder" else blocks.DecoderBlock
    x = torch.randn(2, 5, D, dtype=dtype)
    args = (x,) if kind == "encoder" else (x, torch.randn(2, 4, D, dtype=dtype))
    return block_cls, args


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_from_torch_keeps_a_float64_layer_float64(kind, norm_first):
    layer = _torch_layer(kind, norm_first=norm_first).double()
    block_cls, args = _block_and_args(kind, layer, torch.float64)
    block = block_cls.from_torch(layer).eval()
    dtypes = {p.dtype for p in block.parameters()}
    assert dtypes == {torch.float64}, f"from_torch turned a float64 layer into {dtypes}"
    with torch.no_grad():
        out, ref = block(*args), layer(*args)
    assert out.dtype == torch.float64
    assert (out - ref).abs().max().item() < 1e-12


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_from_torch_reproduces_or_refuses_tanh_gelu(kind):
    """A tanh-approximated GELU is carried over exactly, or refused by name; exact GELU
    in its place (a 1e-4-sized silent mismatch) fails."""
    layer = _torch_layer(kind, activation=nn.GELU(approximate="tanh"))
    with torch.no_grad():  # large pre-activations, where the two GELUs differ most
        layer.linear1.weight.normal_(std=1.0)
    block_cls, args = _block_and_args(kind, layer, torch.float32)
    try:
        block = block_cls.from_torch(layer).eval()
    except ValueError as err:
        assert "GELU" in str(err) and "tanh" in str(err), f"refused without naming it: {err}"
        return
    # The reference is the layer's Python path (train() with dropout 0): its eval() fast
    # path (torch._transformer_encoder_layer_fwd, PyTorch 2.13) computes exact GELU for
    # any nn.GELU, ignoring approximate="tanh", so it is not the layer's documented function.
    with torch.no_grad():
        diff = (block(*args) - layer.train()(*args)).abs().max().item()
    assert diff < 1e-6, f"tanh-GELU layer reproduced with an error of {diff:.2e}"


def test_gcn_layer_returns_float64_for_float64_input():
    layer = gat.GCNLayer(3, 4).double()
    x, edges = _graph()
    out = layer(x.double(), edges)
    assert out.dtype == torch.float64


# ---------------------------------------------------------------------------
# No narrower dtype inside: every op of a float64 forward sees float64 only
# ---------------------------------------------------------------------------


class _FloatDtypes:
    """Records the dtype of every floating tensor that any aten op receives (while
    ``when()`` is true, by default always)."""

    def __init__(self, when: Callable[[], bool] = lambda: True) -> None:
        self.when = when

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        seen = self.seen = []
        when = self.when

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if when():
                    for t in _tensors((args, kwargs or {})):
                        if t.is_floating_point():
                            seen.append((str(func), t.dtype))
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


#: Variants the BUILD table (one entry per class) does not reach.
VARIANTS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    f"PositionalLM-{kind}": (
        lambda kind=kind: (
            lm.PositionalLM(LM_CFG, 11, kind),
            (_ids(11, 2, 6),),
        )
    )
    for kind in ("sinusoidal", "learned", "none", "shaw", "t5", "alibi", "rope")
}


#: Where a float32 op inside a float64 forward is torch's (or transformers') own choice.
NARROWER_ALLOWED = {
    "T5Bias": (
        "T5's bucket of an offset is an integer computed with a float32 log, as in "
        "transformers' T5Attention._relative_position_bucket; no activation is float32",
        {
            "aten._to_copy.default",
            "aten.clamp.default",
            "aten.div.Tensor",
            "aten.log.default",
            "aten.mul.Tensor",
        },
    ),
}
NARROWER_ALLOWED["PositionalLM-t5"] = NARROWER_ALLOWED["T5Bias"]


def _variant_or_build(name: str) -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return VARIANTS[name]() if name in VARIANTS else _build(name)


@pytest.mark.parametrize("name", sorted(BUILD) + sorted(VARIANTS))
def test_float64_forward_never_meets_float32(name):
    """A module in float64 computes in float64 throughout: a float32 table or constant
    added inside (as PositionalLM's sinusoidal table once was) promotes silently and
    keeps the output float64, but its rounding is float32's; here it fails by name."""
    module, inputs = _variant_or_build(name)
    module = module.to(torch.float64).eval()
    inputs = _move(inputs, "cpu", torch.float64)
    with torch.no_grad(), _FloatDtypes() as record:
        module(*inputs)
    exempt = NARROWER_ALLOWED.get(name, ("", set()))[1]
    narrower = sorted({op for op, dtype in record.seen if dtype != torch.float64} - exempt)
    assert record.seen, "the recorder saw no op: it is not recording"
    assert not narrower, f"{name} in float64 passes float32/bf16 tensors to {narrower}"


@pytest.mark.parametrize("name", sorted(BUILD) + sorted(VARIANTS))
def test_bfloat16_modules_return_bfloat16(name):
    """In bfloat16, floating outputs stay bfloat16, as torch's own layers keep it."""
    module, inputs = _variant_or_build(name)
    module = module.to(torch.bfloat16).eval()
    with torch.no_grad():
        out = module(*_move(inputs, "cpu", torch.bfloat16))
    dtypes = {t.dtype for t in _tensors(out) if t.is_floating_point()}
    assert dtypes <= {torch.bfloat16}, f"{name} in bfloat16 returns {dtypes}"


def test_the_dtype_recorder_catches_a_float32_constant():
    class Leaky(nn.Module):
        def forward(self, x):
            return x + torch.ones(x.shape[-1])  # a float32 constant

    with _FloatDtypes() as record:
        Leaky()(torch.zeros(2, 3, dtype=torch.float64))
    assert any(dtype == torch.float32 for _, dtype in record.seen)
