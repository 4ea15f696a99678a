"""The toy copy / reverse task, the GRU encoder-decoder and the training loop (Chapter 1)."""

from __future__ import annotations

import pytest
import torch

from course_lib.seq2seq import (
    Seq2Seq,
    evaluate,
    make_batch,
    seq2seq_loss,
    sequence_accuracy,
    token_accuracy,
)
from course_lib.training import train


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------
# The task.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_batch_shapes_and_contents(task):
    b = make_batch(32, 6, 5, task=task, generator=_gen(0))
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
    """Seq2Seq(rnn='course') and rnn='torch' share parameter names and compute the same."""
    torch.manual_seed(0)
    ours, ref = Seq2Seq(6, 8, 12, rnn="course"), Seq2Seq(6, 8, 12, rnn="torch")
    ref.load_state_dict(ours.state_dict())
    b = make_batch(5, 4, 6, generator=_gen(1))
    with torch.no_grad():
        assert (ours(b.src, b.tgt_in) - ref(b.src, b.tgt_in)).abs().max().item() < 1e-5
    assert torch.equal(ours.greedy_decode(b.src, 4), ref.greedy_decode(b.src, 4))
    with pytest.raises(ValueError, match="rnn must be 'course' or 'torch'"):
        Seq2Seq(6, rnn="lstm")


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
    with pytest.raises(ValueError, match="shapes differ"):
        token_accuracy(pred[:, :2], tgt)


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
    with pytest.raises(ValueError, match="steps must be >= 0"):
        train(model, lambda: None, seq2seq_loss, steps=-1)
    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        train(
            model,
            lambda: None,
            lambda m, b: next(m.parameters()).sum() * float("nan"),
            steps=3,
            progress=False,
        )
