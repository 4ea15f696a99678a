"""Every public function keeps its input's dtype, as torch's own equivalent does (issue 28).

The modules' half of the contract is :mod:`tests.test_module_contracts`.  Here, every
function in the ``__all__`` of a model module of ``course_lib`` (every module but
``grading/`` and the infrastructure of :data:`NOT_MODEL_MODULES`) is either

* in :data:`FUNCTIONS`: called on float32, float64 and bfloat16 inputs, every floating
  tensor it returns must have that dtype (the peer each mirrors, ``F.softmax``,
  ``F.cross_entropy``, ``F.scaled_dot_product_attention``, ``nn.GRUCell``,
  ``torch.optim.AdamW``, ..., keeps all three); or
* in :data:`RETURNS_NUMBERS` when it returns Python numbers: it must run in all three
  dtypes (a float32 layer inside once refused float64 features); or
* in :data:`EXEMPT`, with the reason no floating input makes sense for it.

:func:`test_every_public_function_is_covered_or_exempt` fails on a new function that is
in neither, and on an entry whose function no longer exists, so the next function
that computes in float32 behind its caller's back fails at once.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
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
    embeddings,
    ensemble,
    forecasting,
    gat,
    gat_training,
    gpt,
    lm,
    masks,
    positional,
    relative,
    rnn,
    seq2seq,
    sparse,
    swin,
    time_encoding,
    timeseries,
    training,
    vit,
)
from tests.test_module_contracts import (
    BERT_CFG,
    CFG,
    HEADS,
    NARROWER_ALLOWED,
    D,
    _FloatDtypes,
    _tensors,
)

pytestmark = pytest.mark.usefixtures("seed_and_one_thread")

#: Infrastructure, not models: notebook set-up, the sweep, display, data files, the
#: long-run records, shape checks (``grading/`` is skipped as a package).
NOT_MODEL_MODULES = {"runtime", "sweep", "show", "data", "long_runs", "shapes"}
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def public_functions() -> dict[str, Callable]:
    """``{"module.name": function}`` of every function exported by a model module, named
    after the module that defines it (a re-export is the same function)."""
    found: dict[str, Callable] = {}
    for info in pkgutil.iter_modules(course_lib.__path__):
        if info.name == "grading" or info.name in NOT_MODEL_MODULES or info.name[0] == "_":
            continue
        module = importlib.import_module(f"course_lib.{info.name}")
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                home = obj.__module__.removeprefix("course_lib.")
                found[f"{home}.{name}"] = obj
    return found


_IN_SETUP = [0]  # > 0 while an entry builds its model or inputs (not recorded)


@contextlib.contextmanager
def _setup() -> Iterator[None]:
    """Building a model or an input (float32 initialisers, then ``.to(dtype)``) is not the
    function under test: the float64 recorder below skips what runs in here."""
    _IN_SETUP[0] += 1
    try:
        yield
    finally:
        _IN_SETUP[0] -= 1


def _f(*shape: int, dtype: torch.dtype) -> Tensor:
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def _ids(high: int, *shape: int) -> Tensor:
    return torch.randint(high, shape)


def _sparse_features(t: torch.dtype) -> sparse.SparseFeatures:
    with _setup():
        return sparse.SparseFeatures(_f(5, 4, dtype=t) * (torch.rand(5, 4) < 0.5))


def _adamw(t: torch.dtype) -> list[Tensor]:
    param, state = _f(3, 4, dtype=t), {}
    for _ in range(2):
        training.adamw_step(param, _f(3, 4, dtype=t), state, lr=0.1, weight_decay=0.1)
    return [param, state["m"], state["v"]]


def _clip(t: torch.dtype) -> list[Tensor]:
    params = [nn.Parameter(_f(3, 4, dtype=t)), nn.Parameter(_f(5, dtype=t))]
    for p in params:
        p.grad = _f(*p.shape, dtype=t) * 10
    return [training.clip_grad_norm(params, 1.0), *(p.grad for p in params)]


def _gpt(t: torch.dtype) -> gpt.GPT:
    with _setup():
        return gpt.GPT(CFG.replace(d_ff=4 * D, activation="gelu", dropout=0.0), 11).to(t).eval()


def _with_gpt(transform: Callable[[nn.Module], nn.Module], t: torch.dtype) -> list[Tensor]:
    """A transformed model's parameters and output keep the model's dtype."""
    model = _gpt(t)
    with _setup():  # the new layers are initialised in float32, then cast to the model's
        model = transform(model)
    with torch.no_grad():
        return [model(_ids(11, 2, 6)), *model.parameters()]


def _vit(t: torch.dtype) -> vit.ViT:
    with _setup():
        return vit.ViT(CFG.replace(activation="gelu", eps=1e-6, dropout=0.0), 4, 2, 3).to(t).eval()


def _weights(t: torch.dtype) -> Tensor:
    """Attention weights [layers, B, h, T, T] with T = 2 * 2 + 1 (a 2 x 2 patch grid)."""
    return torch.softmax(_f(2, 2, HEADS, 5, 5, dtype=t), dim=-1)


def _recurrent(t: torch.dtype) -> rnn.GRU:
    with _setup():
        return rnn.GRU(3, 4).to(t)


def _cell(cell: Callable, t: torch.dtype, gates: int, state: bool = False) -> object:
    x, h = _f(2, 3, dtype=t), _f(2, 4, dtype=t)
    w_ih, w_hh = _f(gates * 4, 3, dtype=t), _f(gates * 4, 4, dtype=t)
    b_ih, b_hh = _f(gates * 4, dtype=t), _f(gates * 4, dtype=t)
    return cell(x, (h, h.clone()) if state else h, w_ih, w_hh, b_ih, b_hh)


def _seq2seq(t: torch.dtype) -> seq2seq.Seq2Seq:
    with _setup():
        return seq2seq.Seq2Seq(6, 4, 8).to(t)


def _seq2seq_loss(t: torch.dtype) -> Tensor:
    return seq2seq.seq2seq_loss(_seq2seq(t), seq2seq.make_batch(2, 5, 5))


def _mlm_loss(t: torch.dtype) -> Tensor:
    with _setup():
        model = bert.MaskedLM(BERT_CFG).to(t).eval()
    ids = _ids(20, 2, 6)
    labels = torch.full_like(ids, -100)
    labels[:, ::2] = ids[:, ::2]
    return bert.mlm_loss(model, (ids, labels))


def _lm_loss(t: torch.dtype) -> Tensor:
    ids = _ids(11, 2, 7)
    return lm.lm_loss(_gpt(t), (ids[:, :-1], ids[:, 1:]))


def _members_lm_loss(t: torch.dtype) -> Tensor:
    ids = _ids(11, 2, 7)
    stacked = ensemble.Stacked([_gpt(t), _gpt(t)])
    return lm.members_lm_loss(stacked, (ids[:, :-1], ids[:, 1:]))


def _torch_layer(t: torch.dtype) -> dict[str, Tensor]:
    with _setup():
        return nn.TransformerEncoderLayer(D, HEADS, 16, batch_first=True).to(t).state_dict()


def _slopes(t: torch.dtype) -> Tensor:
    with _setup():  # float32 slopes (documented), cast as ALiBi's buffer is
        return relative.alibi_slopes(4).to(t)


def _shaw(t: torch.dtype) -> object:
    q, k, v = (_f(2, HEADS, 5, 4, dtype=t) for _ in range(3))
    return relative.shaw_attention(
        q, k, v, _f(7, 4, dtype=t), _f(7, 4, dtype=t), mask=masks.causal_mask(5)
    )


#: name -> dtype -> the function's floating outputs, on inputs of that dtype.
FUNCTIONS: dict[str, Callable[[torch.dtype], object]] = {
    # attention (Chapters 2-3)
    "attention.dot_score": lambda t: attention.dot_score(
        _f(2, 3, 4, dtype=t), _f(2, 5, 4, dtype=t)
    ),
    "attention.general_score": lambda t: attention.general_score(
        _f(2, 3, 4, dtype=t), _f(2, 5, 6, dtype=t), _f(4, 6, dtype=t)
    ),
    "attention.additive_score": lambda t: attention.additive_score(
        _f(2, 3, 4, dtype=t),
        _f(2, 5, 6, dtype=t),
        _f(3, 4, dtype=t),
        _f(3, 6, dtype=t),
        _f(3, dtype=t),
    ),
    "attention.concat_score": lambda t: attention.concat_score(
        _f(2, 3, 4, dtype=t), _f(2, 5, 4, dtype=t), _f(3, 8, dtype=t), _f(3, dtype=t)
    ),
    "attention.attend": lambda t: [
        attention.attend(_f(2, 3, 5, dtype=t), _f(2, 5, 4, dtype=t)),
        attention.attend(_f(2, 3, 5, dtype=t), _f(2, 5, 4, dtype=t), masks.causal_mask(3, 5)),
    ],
    "attention.scaled_dot_product_attention": lambda t: [
        attention.scaled_dot_product_attention(
            *(_f(2, 3, 4, dtype=t), _f(2, 5, 4, dtype=t), _f(2, 5, 4, dtype=t)),
            masks.to_additive_mask(masks.causal_mask(3, 5), t),
            return_weights=True,
        ),
        attention.scaled_dot_product_attention(
            *(_f(2, 3, 4, dtype=t), _f(2, 5, 4, dtype=t), _f(2, 5, 4, dtype=t)),
            masks.causal_mask(3, 5),  # a fully masked row is allowed to be zero
            scale=0.3,
            dropout_p=0.5,
        ),
        attention.scaled_dot_product_attention(
            *(_f(2, 4, 4, dtype=t) for _ in range(3)), is_causal=True
        ),
    ],
    "attention.cosine_attention": lambda t: [
        attention.cosine_attention(
            *(_f(2, 3, 4, dtype=t), _f(2, 5, 4, dtype=t), _f(2, 5, 4, dtype=t)),
            5.0,
            return_weights=True,
        ),
        attention.cosine_attention(  # a learned scale, in the model's dtype
            *(_f(2, 3, 4, dtype=t), _f(2, 5, 4, dtype=t), _f(2, 5, 4, dtype=t)),
            torch.tensor(5.0, dtype=t),
            masks.causal_mask(3, 5),
        ),
    ],
    # masks
    "masks.masked_softmax": lambda t: [
        masks.masked_softmax(_f(2, 3, 5, dtype=t), masks.causal_mask(3, 5)),
        masks.masked_softmax(_f(3, 5, dtype=t), torch.arange(3)[:, None] > 0),  # row 0 fully masked
        masks.masked_softmax(_f(3, 5, dtype=t), masks.to_additive_mask(masks.causal_mask(3, 5), t)),
    ],
    "masks.to_additive_mask": lambda t: masks.to_additive_mask(masks.causal_mask(3, 3), t),
    "masks.merge_masks": lambda t: masks.merge_masks(
        masks.causal_mask(3, 3), masks.to_additive_mask(masks.causal_mask(3, 3), t)
    ),
    "masks.to_torch_mask": lambda t: masks.to_torch_mask(_f(3, 3, dtype=t), "mha"),
    "masks.from_torch_mask": lambda t: masks.from_torch_mask(_f(3, 3, dtype=t), "mha"),
    # positions (Chapters 7-8); a table built from integers takes a dtype= argument
    "positional.sinusoidal_table": lambda t: positional.sinusoidal_table(6, 8, dtype=t),
    "positional.shift_matrix": lambda t: positional.shift_matrix(2.0, 8, dtype=t),
    "relative.shaw_key_bias": lambda t: relative.shaw_key_bias(
        _f(2, 5, 4, dtype=t), _f(7, 4, dtype=t), 6
    ),
    "relative.shaw_value_term": lambda t: relative.shaw_value_term(
        torch.softmax(_f(2, 5, 6, dtype=t), -1), _f(7, 4, dtype=t)
    ),
    "relative.shaw_attention": _shaw,
    "relative.t5_bias": lambda t: [
        relative.t5_bias(_f(32, 2, dtype=t), 5),
        relative.t5_bias(_f(32, 2, dtype=t), 5, 7, bidirectional=True),
    ],
    "relative.alibi_bias": lambda t: relative.alibi_bias(_slopes(t), 5),
    "relative.rope_cos_sin": lambda t: [
        relative.rope_cos_sin(6, 8, dtype=t),
        relative.rope_cos_sin(
            torch.tensor([3, 0, 9]), 8, convention="interleaved", scaling_factor=2.0, dtype=t
        ),
    ],
    "relative.rotate_half": lambda t: relative.rotate_half(_f(2, 6, 8, dtype=t)),
    "relative.apply_rope": lambda t: [
        relative.apply_rope(_f(2, 6, 8, dtype=t), *relative.rope_cos_sin(6, 8, dtype=t)),
        relative.apply_rope(
            _f(2, 6, 8, dtype=t),
            *relative.rope_cos_sin(6, 8, convention="interleaved", dtype=t),
            convention="interleaved",
        ),
    ],
    "time_encoding.time_encoding": lambda t: time_encoding.time_encoding(
        _f(5, dtype=t), _f(4, dtype=t)
    ),
    # embeddings (Chapter 5)
    "embeddings.one_hot": lambda t: embeddings.one_hot(_ids(6, 2, 3), 6, dtype=t),
    "embeddings.embedding_lookup": lambda t: embeddings.embedding_lookup(
        _f(6, 4, dtype=t), _ids(6, 2, 3)
    ),
    "embeddings.one_hot_embedding": lambda t: embeddings.one_hot_embedding(
        _f(6, 4, dtype=t), _ids(6, 2, 3)
    ),
    "embeddings.ppmi": lambda t: embeddings.ppmi(
        embeddings.cooccurrence_matrix(_ids(6, 40), 6).to(t)
    ),
    "embeddings.nearest_neighbours": lambda t: embeddings.nearest_neighbours(
        _f(6, 4, dtype=t), _f(4, dtype=t), 3
    ),
    # recurrent cells (Chapter 1)
    "rnn.rnn_cell": lambda t: _cell(rnn.rnn_cell, t, 1),
    "rnn.lstm_cell": lambda t: _cell(rnn.lstm_cell, t, 4, state=True),
    "rnn.gru_cell": lambda t: _cell(rnn.gru_cell, t, 3),
    "rnn.gru_cell_notes": lambda t: _cell(rnn.gru_cell_notes, t, 3),
    "rnn.gru_step": lambda t: rnn.gru_step(_recurrent(t), _f(2, 3, dtype=t), _f(2, 4, dtype=t)),
    "rnn.input_jacobian_norms": lambda t: rnn.input_jacobian_norms(
        _recurrent(t), _f(2, 5, 3, dtype=t)
    ),
    # losses of a model in that dtype (F.cross_entropy keeps it)
    "seq2seq.seq2seq_loss": _seq2seq_loss,
    "bert.mlm_loss": _mlm_loss,
    "lm.lm_loss": _lm_loss,
    "lm.members_lm_loss": _members_lm_loss,
    "bert.mean_pool": lambda t: bert.mean_pool(
        _f(2, 5, 4, dtype=t), torch.ones(2, 5, dtype=torch.long)
    ),
    # GPT (Chapter 11): sampling probabilities, and model transforms keep the model's dtype
    "gpt.next_token_probs": lambda t: [
        gpt.next_token_probs(_f(2, 7, dtype=t), 0.8, 3),
        gpt.next_token_probs(_f(2, 7, dtype=t)),
    ],
    "gpt.add_lora": lambda t: _with_gpt(lambda m: gpt.add_lora(m, r=2), t),
    "gpt.merge_lora": lambda t: _with_gpt(lambda m: gpt.merge_lora(gpt.add_lora(m, r=2)), t),
    "gpt.add_qv_lora": lambda t: _with_gpt(lambda m: gpt.add_qv_lora(m, r=2), t),
    "gpt.add_adapters": lambda t: _with_gpt(lambda m: gpt.add_adapters(m, bottleneck=2), t),
    "blocks.from_torch_state_dict": lambda t: blocks.from_torch_state_dict(_torch_layer(t)),
    # ViT and Swin (Chapter 13)
    "vit.patchify": lambda t: vit.patchify(_f(2, 1, 4, 4, dtype=t), 2),
    "vit.attention_rollout": lambda t: vit.attention_rollout(_weights(t)),
    "vit.cls_attention_map": lambda t: vit.cls_attention_map(_weights(t), 2),
    "vit.permute_patches": lambda t: vit.permute_patches(
        _f(2, 1, 4, 4, dtype=t), torch.tensor([3, 1, 0, 2]), 2
    ),
    "vit.with_permuted_positions": lambda t: [
        *vit.with_permuted_positions(_vit(t), torch.tensor([3, 1, 0, 2])).parameters()
    ],
    "swin.window_attention": lambda t: swin.window_attention(
        *(_f(2, HEADS, 16, 4, dtype=t) for _ in range(3)), 4, 4, 2, shift=1
    ),
    # graphs (Chapter 14)
    "gat.segment_softmax": lambda t: gat.segment_softmax(
        _f(6, 2, dtype=t), torch.tensor([0, 0, 1, 1, 1, 2]), 3
    ),
    "sparse.linear": lambda t: [
        sparse.linear(_sparse_features(t), _f(3, 4, dtype=t), _f(3, dtype=t)),
        sparse.linear(_f(5, 4, dtype=t), _f(3, 4, dtype=t), _f(3, dtype=t)),
    ],
    "sparse.dropout": lambda t: [
        sparse.dropout(_sparse_features(t), 0.5).to_dense(),
        sparse.dropout(_f(5, 4, dtype=t), 0.5),
    ],
    # time series (Chapter 10)
    "timeseries.patchify": lambda t: timeseries.patchify(_f(2, 3, 10, dtype=t), 4, 2, True),
    "forecasting.windows": lambda t: forecasting.windows(_f(20, 2, dtype=t), 6, 3, [0, 5, 11]),
    "forecasting.naive_forecast": lambda t: forecasting.naive_forecast(_f(2, 8, 3, dtype=t), 4),
    "forecasting.seasonal_naive_forecast": lambda t: forecasting.seasonal_naive_forecast(
        _f(2, 8, 3, dtype=t), 5, 3
    ),
    "forecasting.seasonal_naive_drift_forecast": lambda t: (
        forecasting.seasonal_naive_drift_forecast(_f(2, 8, 3, dtype=t), 5, 3)
    ),
    "forecasting.moving_average_decomposition": lambda t: forecasting.moving_average_decomposition(
        _f(2, 8, 3, dtype=t), 5
    ),
    # training (Chapter 9)
    "training.label_smoothing_cross_entropy": lambda t: [
        training.label_smoothing_cross_entropy(
            _f(6, 4, dtype=t), torch.tensor([0, 1, 2, 3, 0, -100])
        ),
        training.label_smoothing_cross_entropy(_f(2, 4, dtype=t), torch.tensor([1, 2]), 0.0),
    ],
    "training.clip_grad_norm": _clip,
    "training.adamw_step": _adamw,
    "training.drop_path": lambda t: training.drop_path(_f(4, 3, dtype=t), 0.5),
}

#: Functions that take floating inputs (or a model) and return Python numbers: they run
#: in every dtype (``nn.Linear``, ``F.cross_entropy`` do) and return finite numbers.
RETURNS_NUMBERS: dict[str, Callable[[torch.dtype], object]] = {
    "bert.linear_probe": lambda t: bert.linear_probe(
        _f(20, 4, dtype=t), _ids(3, 20), _f(10, 4, dtype=t), _ids(3, 10), steps=5
    ),
    "gat_training.accuracy": lambda t: gat_training.accuracy(
        _f(6, 3, dtype=t), _ids(3, 6), torch.tensor([1, 1, 0, 1, 0, 1], dtype=torch.bool)
    ),
    "gpt.evaluate": lambda t: gpt.evaluate(_gpt(t), _ids(11, 200), block=8, num_chars=64),
    "lm.evaluate_lm": lambda t: lm.evaluate_lm(_gpt(t), _ids(11, 200), 8, num_chars=64),
    "seq2seq.evaluate": lambda t: seq2seq.evaluate(_seq2seq(t), seq2seq.make_batch(2, 5, 5)),
}

_INT = "returns integers (ids, indices, counts), no floating tensor"
_BOOL = "returns a boolean mask"
_NO_TENSOR = "takes and returns no tensor"
_LOOP = "a training or evaluation loop: it runs the model in the model's dtype (covered by test_module_contracts, and MixedPrecision by test_callbacks)"
_FLOAT = "integer predictions and targets in, a Python float out"
_IO = "copies weights into a model's existing parameters (load_state_dict casts to them) or reads/writes files"
_MODEL = "builds an nn.Module: its dtype is covered by test_module_contracts"

#: name -> why no floating input makes sense for it.
EXEMPT: dict[str, str] = {
    "attention.record_attention": "a context manager that collects the weights a model computes; "
    "their dtype is the model's (test_module_contracts)",
    "bert.mask_tokens": _INT,
    "bert.block_parameters": _NO_TENSOR,
    "bert.encoder_parameters": _NO_TENSOR,
    "bert.load_hf_bert": _IO,
    "callbacks.rng_state": _NO_TENSOR + " (RNG state)",
    "callbacks.set_rng_state": _NO_TENSOR + " (RNG state)",
    "config.check_config": _NO_TENSOR,
    "distributed.make_model": "Chapter 9's DDP demo: a float32 model from a seed, no tensor input",
    "distributed.make_data": "Chapter 9's DDP demo: float32 data from a seed, no tensor input",
    "distributed.sgd_steps": _LOOP,
    "distributed.train_single": _LOOP,
    "distributed.ddp_worker": _LOOP,
    "distributed.run_ddp": _LOOP,
    "embeddings.cooccurrence_matrix": "integer ids in, float64 counts out (exact counts)",
    "embeddings.ppmi_svd_embeddings": "integer ids in; the SVD runs in float64 and the "
    "vectors are float32 by contract (documented)",
    "gat_training.receptive_field": _INT + " (edge lists and node ids from a graph and a mask)",
    "ensemble.member_batches": "returns a function that selects rows of the tensors it is "
    "given (indexing keeps any dtype); tested in test_ensemble",
    "ensemble.train_stacked": _LOOP,
    "forecasting.ets_forecast": "fits statsmodels' Holt-Winters in NumPy float64 (any "
    "floating input is converted), returns float32 forecasts as the trained models' targets",
    "gat.add_self_loops": _INT,
    "gat.coalesce": _INT,
    "gat.to_dense_adjacency": _BOOL,
    "gat_training.fit_node_classifier": _LOOP,
    "gat_training.fit_seeds": _LOOP,
    "gpt.save_checkpoint": _IO,
    "gpt.load_checkpoint": _IO,
    "gpt.sample": _INT,
    "gpt.load_gpt2_weights": _IO,
    "lm.batches": _INT,
    "lm.train_lm": _LOOP,
    "lm.train_lm_seeds": _LOOP,
    "masks.causal_mask": _BOOL,
    "masks.padding_mask": _BOOL,
    "masks.window_mask": _BOOL,
    "masks.check_mask": "a check: returns None",
    "params.count_parameters": _NO_TENSOR,
    "position_hooks.rope_scaling": "a context manager that rescales a model's RoPE hooks; "
    "the hooks' dtype is covered by test_module_contracts",
    "position_hooks.position_hook": _MODEL,
    "positional.sinusoidal_frequencies": "takes no tensor: float64 frequencies (documented), "
    "from which sinusoidal_table builds a table of any dtype= (covered above)",
    "relative.relative_positions": _INT,
    "relative.shaw_indices": _INT,
    "relative.t5_relative_position_bucket": _INT,
    "relative.alibi_slopes": "takes no tensor: float32 slopes (documented), cast by ALiBi's "
    "buffer to the module's dtype; alibi_bias is covered above",
    "relative.rope_permutation": _INT,
    "rnn.make_gru": _MODEL,
    "seq2seq.make_batch": _INT,
    "seq2seq.sequence_accuracy": _FLOAT,
    "swin.window_ids": _INT,
    "swin.window_attention_mask": _BOOL,
    "timeseries.calendar_features": "takes a pandas DatetimeIndex, no tensor: float32 "
    "features, as the data the forecasters train on",
    "timeseries.num_patches": _NO_TENSOR,
    "tokenization.pre_tokenize": _NO_TENSOR + " (text)",
    "tokenization.word_counts": _NO_TENSOR + " (text)",
    "tokenization.merge_pair": _NO_TENSOR + " (text)",
    "tokenization.train_bpe": _NO_TENSOR + " (text)",
    "tokenization.wordpiece_tokenize": _NO_TENSOR + " (text)",
    "training.train": _LOOP,
    "training.warmup_cosine": _NO_TENSOR + " (a learning-rate multiplier)",
    "training.warmup_inverse_sqrt": _NO_TENSOR + " (a learning-rate multiplier)",
    "training.torch_warmup_cosine": _NO_TENSOR + " (a learning-rate scheduler)",
    "unigram.metaspace_pre_tokenize": _NO_TENSOR + " (text)",
    "unigram.train_unigram": _NO_TENSOR + " (text)",
}


def test_every_public_function_is_covered_or_exempt():
    public = public_functions()
    assert len(public) >= 100, sorted(public)  # the walk found the library
    tables = {"FUNCTIONS": FUNCTIONS, "RETURNS_NUMBERS": RETURNS_NUMBERS, "EXEMPT": EXEMPT}
    listed = [name for table in tables.values() for name in table]
    twice = sorted({name for name in listed if listed.count(name) > 1})
    assert not twice, f"in more than one of {list(tables)}: {twice}"
    missing = sorted(set(public) - set(listed))
    assert not missing, (
        f"public functions without a dtype contract: {missing}; add each to FUNCTIONS in "
        f"{__name__} (called on float32, float64 and bfloat16 inputs; RETURNS_NUMBERS if it "
        "returns Python numbers), or, if no floating input makes sense for it, to EXEMPT "
        "with the reason"
    )
    stale = sorted(set(listed) - set(public))
    assert not stale, (
        f"FUNCTIONS/RETURNS_NUMBERS/EXEMPT entries for functions no longer exported: {stale}"
    )


#: Functions whose torch equivalent has no bfloat16 kernel on the CPU (xfail, strict: the
#: test fails once torch gains one, to move the function back under the contract).
TORCH_LACKS_BFLOAT16 = {
    "sparse.linear": "torch's sparse CSR matmul (addmm_out_sparse_csr_impl_mkl) has no "
    "bfloat16 kernel on the CPU (torch 2.13); the dense path keeps bfloat16",
}


def _cases() -> list:
    return [
        pytest.param(
            name,
            dtype,
            id=f"{name}-{str(dtype)[6:]}",
            marks=pytest.mark.xfail(
                raises=NotImplementedError, strict=True, reason=TORCH_LACKS_BFLOAT16[name]
            ),
        )
        if dtype == torch.bfloat16 and name in TORCH_LACKS_BFLOAT16
        else pytest.param(name, dtype, id=f"{name}-{str(dtype)[6:]}")
        for name in sorted(FUNCTIONS)
        for dtype in DTYPES
    ]


@pytest.mark.parametrize(("name", "dtype"), _cases())
def test_function_keeps_its_input_dtype(name, dtype):
    torch.manual_seed(0)
    out = FUNCTIONS[name](dtype)
    dtypes = {t.dtype for t in _tensors(out) if t.is_floating_point()}
    assert dtypes == {dtype}, f"{name} on {dtype} inputs returns {dtypes}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(RETURNS_NUMBERS))
def test_function_runs_in_every_dtype(name, dtype):
    torch.manual_seed(0)
    out = RETURNS_NUMBERS[name](dtype)
    numbers = out if isinstance(out, tuple) else (out,)
    assert all(isinstance(x, float) and math.isfinite(x) for x in numbers), f"{name}: {out}"


def _float64_only() -> _FloatDtypes:
    """Records the ops (outside :func:`_setup`) that receive floating tensors; see
    :func:`_narrower`."""
    return _FloatDtypes(when=lambda: not _IN_SETUP[0])


def _narrower(record: _FloatDtypes) -> set[str]:
    """The ops that received a floating tensor narrower than float64."""
    return {op for op, dtype in record.seen if dtype != torch.float64}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_float64_function_never_meets_float32(name):
    """On float64 inputs every op computes in float64: a float32 constant or mask inside
    keeps the output float64 (promotion) but rounds it like float32; here it fails."""
    torch.manual_seed(0)
    with _float64_only() as record:
        FUNCTIONS[name](torch.float64)
    exempt = NARROWER_ALLOWED["T5Bias"][1] if name == "relative.t5_bias" else set()
    narrower = sorted(_narrower(record) - exempt)
    assert not narrower, f"{name} on float64 inputs passes float32/bf16 tensors to {narrower}"


def test_the_float64_recorder_catches_a_float32_constant():
    with _float64_only() as record:
        torch.zeros(3, dtype=torch.float64) + torch.ones(3)
    assert _narrower(record) == {"aten.add.Tensor"}
