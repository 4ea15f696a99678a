"""The toy copy / reverse task, the GRU encoder-decoders and the training loop (Chapters 1-2)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.masks import window_mask
from course_lib.rnn import GRU
from course_lib.seq2seq import (
    BahdanauSeq2Seq,
    LuongSeq2Seq,
    Seq2Seq,
    Seq2SeqBatch,
    evaluate,
    make_batch,
    seq2seq_loss,
    sequence_accuracy,
    token_accuracy,
)
from course_lib.training import train


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5) -> bool:
    return a.shape == b.shape and (a - b).abs().max().item() <= atol


# ---------------------------------------------------------------------------
# The task.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_batch_shapes_and_contents(task):
    b = make_batch(32, 6, 5, task=task, generator=_gen(0))
    assert isinstance(b, Seq2SeqBatch)
    for t in (b.src, b.tgt, b.tgt_in):
        assert t.shape == (32, 6) and t.dtype == torch.long
    assert b.bos == 5
    assert 0 <= b.src.min() and b.src.max() < 5
    expected = b.src if task == "copy" else b.src.flip(1)
    assert torch.equal(b.tgt, expected)
    # teacher forcing input: BOS, then the target shifted right by one
    assert (b.tgt_in[:, 0] == 5).all()
    assert torch.equal(b.tgt_in[:, 1:], b.tgt[:, :-1])


def test_batches_are_reproducible_from_the_generator_seed():
    a = make_batch(16, 7, 8, generator=_gen(42))
    b = make_batch(16, 7, 8, generator=_gen(42))
    c = make_batch(16, 7, 8, generator=_gen(43))
    assert torch.equal(a.src, b.src)
    assert not torch.equal(a.src, c.src)
    g = _gen(42)
    first, second = make_batch(16, 7, 8, generator=g), make_batch(16, 7, 8, generator=g)
    assert torch.equal(first.src, a.src) and not torch.equal(second.src, a.src)


def test_make_batch_rejects_bad_arguments():
    with pytest.raises(ValueError, match="task must be one of"):
        make_batch(4, 3, 5, task="sort")
    with pytest.raises(ValueError, match="length must be >= 1, got 0"):
        make_batch(4, 0, 5)
    with pytest.raises(ValueError, match="num_symbols must be >= 2, got 1"):
        make_batch(4, 3, 1)


# ---------------------------------------------------------------------------
# The model.
# ---------------------------------------------------------------------------


def test_forward_and_decode_shapes():
    torch.manual_seed(0)
    model = Seq2Seq(6, emb_dim=8, hidden_size=12)
    b = make_batch(5, 4, 6, generator=_gen(0))
    assert model(b.src, b.tgt_in).shape == (5, 4, 6)
    assert model.encode(b.src).shape == (1, 5, 12)
    pred = model.greedy_decode(b.src, 7)
    assert pred.shape == (5, 7) and pred.dtype == torch.long
    assert 0 <= pred.min() and pred.max() < 6  # BOS is never an output class


def test_course_gru_and_torch_gru_give_the_same_model():
    """Seq2Seq(gru=rnn.GRU) and gru=nn.GRU share parameter names and compute the same."""
    torch.manual_seed(0)
    ours, ref = Seq2Seq(6, 8, 12, gru=GRU), Seq2Seq(6, 8, 12, gru=nn.GRU)
    ref.load_state_dict(ours.state_dict())
    b = make_batch(5, 4, 6, generator=_gen(1))
    with torch.no_grad():
        assert (ours(b.src, b.tgt_in) - ref(b.src, b.tgt_in)).abs().max().item() < 1e-5
    assert torch.equal(ours.greedy_decode(b.src, 4), ref.greedy_decode(b.src, 4))
    for wrong in ("torch", nn.LSTM, nn.GRU(8, 12)):  # a string, another layer, an instance
        with pytest.raises(ValueError, match=r"gru must be the class course_lib.rnn.GRU or torch"):
            Seq2Seq(6, gru=wrong)


def test_decoder_sees_the_source_only_through_the_context_vector():
    """Two sources with the same final encoder state get the same logits."""
    torch.manual_seed(0)
    model = Seq2Seq(6, 8, 12)
    b = make_batch(3, 5, 6, generator=_gen(2))
    c = model.encode(b.src)
    other_src = make_batch(3, 5, 6, generator=_gen(3)).src
    model.encode = lambda src: c  # pretend other_src encodes to the same c
    with torch.no_grad():
        assert torch.equal(model(other_src, b.tgt_in), model(b.src, b.tgt_in))


def test_greedy_decode_takes_the_argmax_given_its_own_prefix():
    torch.manual_seed(0)
    model = Seq2Seq(6, 8, 12)
    b = make_batch(4, 5, 6, generator=_gen(4))
    pred = model.greedy_decode(b.src, 5)
    bos = torch.full((4, 1), model.bos)
    with torch.no_grad():
        logits = model(b.src, torch.cat([bos, pred[:, :-1]], dim=1))  # teacher-force own output
    assert torch.equal(logits.argmax(-1), pred)


def test_accuracies():
    tgt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    pred = torch.tensor([[1, 2, 3], [4, 0, 6]])
    assert token_accuracy(pred, tgt) == pytest.approx(5 / 6)
    assert sequence_accuracy(pred, tgt) == pytest.approx(1 / 2)
    assert token_accuracy(tgt, tgt) == sequence_accuracy(tgt, tgt) == 1.0
    with pytest.raises(
        ValueError, match=r"token_accuracy: pred must be \[B=2, T=3\], got \[2, 2\]"
    ):
        token_accuracy(pred[:, :2], tgt)


def test_step_by_step_teacher_forcing_equals_the_parallel_one():
    """The loop that every model inherits (decode_steps) gives Seq2Seq's parallel logits."""
    torch.manual_seed(0)
    model = Seq2Seq(6, 8, 12)
    b = make_batch(4, 5, 6, generator=_gen(5))
    with torch.no_grad():
        logits, weights = model.forward_with_weights(b.src, b.tgt_in)
        assert _close(logits, model(b.src, b.tgt_in)) and weights is None
    with pytest.raises(ValueError, match="Seq2Seq: has no attention, so no weights to return"):
        model.greedy_decode(b.src, 3, return_weights=True)
    with pytest.raises(ValueError, match=r"Seq2Seq: src must be \[B, S\], got \[4\]"):
        model.encode(b.src[:, 0])


def test_parameter_names_and_order_are_those_of_the_trained_models():
    """The state_dict keys, in order: checkpoints and seeded initialisations stay valid."""
    base = ["src_emb.weight", "tgt_emb.weight"] + [
        f"{gru}.{p}_l0"
        for gru in ("encoder", "decoder")
        for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]
    assert list(Seq2Seq(6, 8, 12).state_dict()) == base + ["out.weight", "out.bias"]
    assert list(BahdanauSeq2Seq(6, 8, 12).state_dict()) == base + [
        "attention.v",
        "attention.w_query.weight",
        "attention.w_key.weight",
        "out.weight",
        "out.bias",
    ]
    local_p = LuongSeq2Seq(6, 8, 12, score="concat", window=1, align="predictive")
    assert list(local_p.state_dict()) == base + [
        "attention.weight",
        "attention.v",
        "combine.weight",
        "out.weight",
        "out.bias",
        "w_p.weight",
        "v_p.weight",
    ]


# ---------------------------------------------------------------------------
# Chapter 2: the seq2seq models with attention.
# ---------------------------------------------------------------------------

ATTENTION_MODELS = [
    lambda gru: BahdanauSeq2Seq(6, 8, 12, gru=gru),
    lambda gru: LuongSeq2Seq(6, 8, 12, score="general", gru=gru),
    lambda gru: LuongSeq2Seq(6, 8, 12, score="dot", window=2, gru=gru),
    lambda gru: LuongSeq2Seq(6, 8, 12, score="concat", window=1, align="predictive", gru=gru),
]


@pytest.mark.usefixtures("seed_and_one_thread")
@pytest.mark.parametrize("make", ATTENTION_MODELS)
def test_attention_seq2seq_shapes_and_greedy_decoding(make):
    model = make(GRU)
    b = make_batch(4, 5, 6, generator=_gen(0))
    logits, w = model.forward_with_weights(b.src, b.tgt_in)
    assert logits.shape == (4, 5, 6) and w.shape == (4, 5, 5)
    pred, wd = model.greedy_decode(b.src, 5, return_weights=True)
    assert pred.shape == (4, 5) and wd.shape == (4, 5, 5)
    assert torch.equal(model.alignments(b.src, 5), wd)
    # greedy decoding = argmax of teacher forcing on its own prefix
    bos = torch.full((4, 1), model.bos)
    with torch.no_grad():
        again, w_again = model.forward_with_weights(b.src, torch.cat([bos, pred[:, :-1]], 1))
    assert torch.equal(again.argmax(-1), pred)
    assert _close(w_again, wd)


@pytest.mark.usefixtures("seed_and_one_thread")
@pytest.mark.parametrize("make", ATTENTION_MODELS)
def test_course_and_torch_gru_give_the_same_attention_model(make):
    ours, ref = make(GRU), make(nn.GRU)
    ref.load_state_dict(ours.state_dict())
    b = make_batch(3, 4, 6, generator=_gen(1))
    with torch.no_grad():
        assert _close(ours(b.src, b.tgt_in), ref(b.src, b.tgt_in))
    assert torch.equal(ours.greedy_decode(b.src, 4), ref.greedy_decode(b.src, 4))


@pytest.mark.usefixtures("seed_and_one_thread")
def test_global_weights_sum_to_one_and_local_weights_stay_in_the_window():
    b = make_batch(3, 9, 6, generator=_gen(2))
    glob = LuongSeq2Seq(6, 8, 12)
    _, w = glob.forward_with_weights(b.src, b.tgt_in)
    assert torch.allclose(w.sum(-1), torch.ones(3, 9))
    local_m = LuongSeq2Seq(6, 8, 12, window=2)  # p_t = t
    _, w = local_m.forward_with_weights(b.src, b.tgt_in)
    assert torch.equal(w > 0, window_mask(9, 9, 2).expand(3, 9, 9))
    assert torch.allclose(w.sum(-1), torch.ones(3, 9))
    _, w = local_m.greedy_decode(b.src, 9, return_weights=True)
    assert torch.equal(w > 0, window_mask(9, 9, 2).expand(3, 9, 9))
    local_p = LuongSeq2Seq(6, 8, 12, window=2, align="predictive")
    _, w = local_p.forward_with_weights(b.src, b.tgt_in)
    assert ((w > 0).sum(-1) <= 5).all()  # at most 2 * window + 1 keys
    assert (w.sum(-1) <= 1 + 1e-6).all()  # the Gaussian only shrinks the weights
    with pytest.raises(ValueError, match="align must be 'monotonic' or 'predictive'"):
        LuongSeq2Seq(6, window=2, align="fixed")
    with pytest.raises(ValueError, match="window must be >= 1 or None, got 0"):
        LuongSeq2Seq(6, window=0)
    with pytest.raises(
        ValueError, match=r"gru must be the class course_lib.rnn.GRU or torch.nn.GRU"
    ):
        BahdanauSeq2Seq(6, gru=nn.LSTM)


@pytest.mark.usefixtures("seed_and_one_thread")
def test_bahdanau_model_learns_to_reverse_short_sequences():
    model = BahdanauSeq2Seq(5, 8, 32, gru=nn.GRU)
    test = make_batch(300, 4, 5, task="reverse", generator=_gen(99))
    gen = _gen(0)
    train(
        model,
        lambda: make_batch(32, 4, 5, task="reverse", generator=gen),
        seq2seq_loss,
        steps=300,
        lr=1e-2,
        progress=False,
    )
    tok, _ = evaluate(model, test)
    assert tok > 0.9, tok


# ---------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------


def test_a_tiny_model_learns_to_copy_short_sequences():
    """About 3 s on 2 CPU cores (no timing assert: shared CI machines vary)."""
    torch.manual_seed(0)
    model = Seq2Seq(5, emb_dim=8, hidden_size=32)
    test = make_batch(500, 3, 5, generator=_gen(999))
    assert evaluate(model, test)[1] < 0.2  # untrained: mostly wrong
    gen = _gen(0)
    losses = train(
        model,
        lambda: make_batch(32, 3, 5, generator=gen),
        seq2seq_loss,
        steps=250,
        lr=1e-2,
        progress=False,
    )
    assert len(losses) == 250
    assert sum(losses[-10:]) / 10 < 0.2 * sum(losses[:10]) / 10
    tok, seq = evaluate(model, test)
    assert tok > 0.95 and seq > 0.9, (tok, seq)
    assert model.training  # evaluate restores the mode


def test_train_is_reproducible_and_clips():
    def run(clip):
        torch.manual_seed(0)
        model = Seq2Seq(5, 8, 16)
        gen = _gen(0)
        return train(
            model,
            lambda: make_batch(8, 3, 5, generator=gen),
            seq2seq_loss,
            steps=5,
            lr=1e-2,
            clip_norm=clip,
            progress=False,
        )

    assert run(1.0) == run(1.0)
    assert run(1e-6) != run(None)  # a tiny clip norm changes the updates


def test_train_rejects_bad_arguments_and_stops_on_nan():
    model = Seq2Seq(5, 8, 16)
    with pytest.raises(ValueError, match=r"steps must be >= 0, got -1"):
        train(model, lambda: None, seq2seq_loss, steps=-1)
    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        train(
            model,
            lambda: None,
            lambda m, b: next(m.parameters()).sum() * float("nan"),
            steps=3,
            progress=False,
        )


@pytest.mark.usefixtures("seed_and_one_thread")
@pytest.mark.parametrize("gru", [GRU, nn.GRU])
def test_bahdanau_training_path_equals_its_steps(gru):
    """forward_with_weights computes U h_j once; the step-by-step equations, same numbers."""
    model = BahdanauSeq2Seq(6, 8, 12, gru=gru)
    b = make_batch(4, 7, 6, generator=_gen(3))
    fast, w_fast = model.forward_with_weights(b.src, b.tgt_in)
    slow, _, w_slow = model.decode_steps(b.src, 7, b.tgt_in)  # step() at every position
    assert _close(fast, slow) and _close(w_fast, w_slow)
    grads = []
    for logits in (fast, slow):
        model.zero_grad()
        F.cross_entropy(logits.flatten(0, 1), b.tgt.flatten()).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(_close(g, h) for g, h in zip(*grads, strict=True))
