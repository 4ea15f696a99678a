"""One Seq2Seq per length trained as one (course_lib.by_length): the numbers of separate runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib import rnn, seq2seq
from course_lib.by_length import CopyByLength, _PackedGRU
from course_lib.ensemble import Stacked, train_stacked
from course_lib.training import train

pytestmark = pytest.mark.usefixtures("seed_and_one_thread")


def _reference(gi, h0, w_hh, b_hh, lengths):
    """rnn.gru_cell member by member, step by step (autograd): every state, padded, and the last."""
    states, last = [], []
    for k, length in enumerate(lengths):
        h, rows = h0[k], []
        for t in range(length):  # gi's input half is given: an identity W_ih with no bias
            eye = torch.eye(gi.shape[-1], dtype=gi.dtype)
            h = rnn.gru_cell(gi[k, t], h, eye, w_hh[k], None, b_hh[k])
            rows.append(h)
        states.append(torch.stack(rows))
        last.append(h)
    return states, torch.stack(last)


def _packing(lengths):
    """The members' order (longest first), the rows per step, the packed mask [T, K], each row's member."""
    k, t_max = len(lengths), max(lengths)
    order = sorted(range(k), key=lambda m: -lengths[m])
    by_order = [lengths[m] for m in order]
    active = tuple(sum(length > t for length in by_order) for t in range(t_max))
    keep = torch.arange(t_max)[:, None] < torch.tensor(by_order)
    return order, active, keep, torch.arange(k).expand(t_max, k)[keep]


def _inputs(lengths, dtype):
    """Random gi [K, T, B, 3H], h0 [K, B, H], weight_hh [K, 3H, H], bias_hh [K, 3H] (B = 3, H = 5)."""
    k, t_max, b, h = len(lengths), max(lengths), 3, 5
    shapes = [(k, t_max, b, 3 * h), (k, b, h), (k, 3 * h, h), (k, 3 * h)]
    return [torch.randn(s, dtype=dtype, requires_grad=True) for s in shapes]


def _packed_and_reference(lengths, gi, h0, w_hh, b_hh):
    """_PackedGRU's (states, last) and the step-by-step reference's, packed the same way."""
    order, active, keep, rows = _packing(lengths)
    o = torch.tensor(order)
    packed_gi = gi[order].transpose(0, 1)[keep]  # [R, B, 3H]
    states, last = _PackedGRU.apply(packed_gi, h0[o], w_hh[o], b_hh[o], rows, active)
    ref_states, ref_last = _reference(gi, h0, w_hh, b_hh, lengths)
    pad = max(lengths)
    ref_packed = torch.stack(
        [F.pad(ref_states[m], (0, 0, 0, 0, 0, pad - lengths[m])) for m in order], 1
    )[keep]
    return (states, last), (ref_packed, ref_last[o])


@pytest.mark.parametrize("lengths", [[6, 4, 4, 1], [3], [2, 5, 1, 5]])
def test_packed_gru_forward_in_float32_is_the_cell_to_rounding(lengths):
    # (1.10)'s tanh is computed as 2 sigmoid(2a) - 1: equal in exact arithmetic, not bit for bit
    torch.manual_seed(0)
    ours, ref = _packed_and_reference(lengths, *_inputs(lengths, torch.float32))
    for a, r in zip(ours, ref, strict=True):
        assert a.dtype == torch.float32 and torch.allclose(a, r, rtol=0, atol=1e-6)


@pytest.mark.parametrize("lengths", [[6, 4, 4, 1], [3], [2, 5, 1, 5]])
def test_packed_gru_matches_the_cell_forward_and_backward(lengths):
    torch.manual_seed(0)
    order, active, keep, rows = _packing(lengths)
    o = torch.tensor(order)
    gi, h0, w_hh, b_hh = _inputs(lengths, torch.float64)
    packed_gi = gi[order].transpose(0, 1)[keep]  # [R, B, 3H]
    (states, last), (ref_packed, ref_last_o) = _packed_and_reference(lengths, gi, h0, w_hh, b_hh)
    assert torch.allclose(states, ref_packed) and torch.allclose(last, ref_last_o)
    w1, w2 = torch.randn_like(states), torch.randn_like(last)
    ours = torch.autograd.grad((states * w1).sum() + (last * w2).sum(), (gi, h0, w_hh, b_hh))
    ref = torch.autograd.grad(
        (ref_packed * w1).sum() + (ref_last_o * w2).sum(), (gi, h0, w_hh, b_hh)
    )
    for a, r in zip(ours, ref, strict=True):
        assert torch.allclose(a, r, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda *x: _PackedGRU.apply(*x, rows, active), (packed_gi, h0[o], w_hh[o], b_hh[o])
    )


def _models(lengths, gru):
    models = []
    for _ in lengths:
        torch.manual_seed(0)  # the same initial weights for every length, as in Chapter 1
        models.append(seq2seq.Seq2Seq(5, 4, 8, gru=gru))
    return models


@pytest.mark.parametrize("gru", [nn.GRU, rnn.GRU])
def test_training_by_length_equals_separate_runs(gru):
    lengths, steps = [2, 5, 3], 4
    stacked = Stacked(_models(lengths, gru))
    task = CopyByLength(lengths, 6, 5, [torch.Generator().manual_seed(1) for _ in lengths])
    total = torch.tensor(train_stacked(stacked, task.next_batch, task.loss, steps, 5e-3))
    assert len(task.history) == steps and task.history[0].shape == (3,)
    separate = torch.zeros(steps)
    for k, (model, length) in enumerate(zip(_models(lengths, gru), lengths, strict=True)):
        g = torch.Generator().manual_seed(1)
        losses = train(model, lambda g=g, t=length: seq2seq.make_batch(6, t, 5, generator=g),
                       seq2seq.seq2seq_loss, steps, 5e-3, progress=False)  # fmt: skip
        separate += torch.tensor(losses)
        assert torch.allclose(torch.stack(task.history)[:, k], torch.tensor(losses), atol=1e-5)
        member = stacked.member(k)
        assert isinstance(member, seq2seq.Seq2Seq)
        for (name, a), b in zip(member.named_parameters(), model.parameters(), strict=True):
            assert torch.allclose(a, b, atol=1e-5), name
    assert torch.allclose(total, separate, atol=1e-5)


def test_by_length_refuses_what_it_cannot_train():
    with pytest.raises(ValueError, match="one generator per length"):
        CopyByLength([2, 3], 4, 5, [torch.Generator()])
    with pytest.raises(ValueError, match="lengths >= 1"):
        CopyByLength([0], 4, 5, [torch.Generator()])
    task = CopyByLength([2, 3], 4, 5, [torch.Generator(), torch.Generator()])
    with pytest.raises(TypeError, match="Stacked model of 2 Seq2Seq"):
        task.loss(seq2seq.Seq2Seq(5), task.next_batch())
