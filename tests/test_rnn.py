"""course_lib.rnn against torch.nn.RNN / LSTM / GRU with copied weights (Chapter 1)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.rnn import (
    GRU,
    LSTM,
    RNN,
    gru_cell,
    gru_cell_notes,
    gru_step,
    input_jacobian_norms,
    lstm_cell,
    make_gru,
    rnn_cell,
)

ATOL = 1e-5
D, H = 5, 7  # input_size, hidden_size used throughout

# (our layer, our cell, torch layer, torch cell, number of gate blocks)
KINDS = {
    "rnn": (RNN, rnn_cell, nn.RNN, nn.RNNCell, 1),
    "lstm": (LSTM, lstm_cell, nn.LSTM, nn.LSTMCell, 4),
    "gru": (GRU, gru_cell, nn.GRU, nn.GRUCell, 3),
}


def _state(kind: str, batch: int, gen: torch.Generator, layer: bool):
    """A random initial state: [B, H] for cells, [1, B, H] for layers; (h, c) for the LSTM."""
    shape = (1, batch, H) if layer else (batch, H)
    h = torch.randn(shape, generator=gen)
    if kind == "lstm":
        return h, torch.randn(shape, generator=gen)
    return h


def _max_diff(a, b) -> float:
    if isinstance(a, tuple):
        return max(_max_diff(x, y) for x, y in zip(a, b, strict=True))
    return (a - b).abs().max().item()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("bias", [True, False])
def test_cell_matches_torch_cell(kind, seed, batch, bias):
    _, cell, _, torch_cell_cls, _ = KINDS[kind]
    torch.manual_seed(seed)
    ref = torch_cell_cls(D, H, bias=bias)
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(batch, D, generator=gen)
    state = _state(kind, batch, gen, layer=False)
    weights = (ref.weight_ih, ref.weight_hh, ref.bias_ih, ref.bias_hh)
    with torch.no_grad():
        assert _max_diff(cell(x, state, *weights), ref(x, state)) < ATOL


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_cell_unrolled_matches_torch_layer(kind, seed):
    """Our cell applied step by step, with weight_*_l0 of torch's layer, equals the layer."""
    _, cell, torch_cls, _, _ = KINDS[kind]
    torch.manual_seed(seed)
    ref = torch_cls(D, H, batch_first=True)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 6, D, generator=gen)
    state0 = _state(kind, 3, gen, layer=True)  # [1, B, H] (pairs for the LSTM)
    state = tuple(s[0] for s in state0) if kind == "lstm" else state0[0]  # [B, H]
    weights = (ref.weight_ih_l0, ref.weight_hh_l0, ref.bias_ih_l0, ref.bias_hh_l0)
    outputs = []
    with torch.no_grad():
        for t in range(x.shape[1]):
            state = cell(x[:, t], state, *weights)
            outputs.append(state[0] if kind == "lstm" else state)
        expected, _ = ref(x, state0)
    assert _max_diff(torch.stack(outputs, dim=1), expected) < ATOL


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("with_state", [False, True])
def test_layer_matches_torch_layer(kind, seed, batch, with_state):
    ours_cls, _, torch_cls, _, _ = KINDS[kind]
    torch.manual_seed(seed)
    ref = torch_cls(D, H, batch_first=True)
    ours = ours_cls(D, H)
    ours.load_state_dict(ref.state_dict())  # same names and shapes: strict load works
    gen = torch.Generator().manual_seed(1000 + seed)
    x = torch.randn(batch, 1 + 4 * seed, D, generator=gen)  # T = 1, 5, 9
    state = _state(kind, batch, gen, layer=True) if with_state else None
    with torch.no_grad():
        out, final = ours(x, state)
        ref_out, ref_final = ref(x, state)
    assert out.shape == (batch, x.shape[1], H)
    assert _max_diff(out, ref_out) < ATOL
    assert _max_diff(final, ref_final) < ATOL


@pytest.mark.parametrize("kind", KINDS)
def test_layer_gradients_match_torch(kind):
    ours_cls, _, torch_cls, _, _ = KINDS[kind]
    torch.manual_seed(3)
    ref = torch_cls(D, H, batch_first=True)
    ours = ours_cls(D, H)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 6, D)
    for model in (ours, ref):
        out, _ = model(x)
        (out**2).sum().backward()
    for (name, p), (ref_name, q) in zip(
        ours.named_parameters(), ref.named_parameters(), strict=True
    ):
        assert name == ref_name
        assert (p.grad - q.grad).abs().max().item() < ATOL, name


def test_state_dict_loads_from_torch_lstm_and_back():
    ref = nn.LSTM(8, 16, batch_first=True)
    ours = LSTM(8, 16)
    assert ours.load_state_dict(ref.state_dict()).missing_keys == []
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: v.shape for k, v in ref.state_dict().items()
    }
    nn.LSTM(8, 16, batch_first=True).load_state_dict(ours.state_dict())


def test_a_wrong_gate_order_is_detected():
    """The comparison is not vacuous: permuting the LSTM's gate blocks breaks the match."""
    torch.manual_seed(0)
    ref = nn.LSTMCell(D, H)
    x, h, c = torch.randn(4, D), torch.randn(4, H), torch.randn(4, H)
    perm = torch.cat([torch.arange(H, 2 * H), torch.arange(H), torch.arange(2 * H, 4 * H)])
    with torch.no_grad():
        swapped = lstm_cell(
            x,
            (h, c),
            ref.weight_ih[perm],
            ref.weight_hh[perm],
            ref.bias_ih[perm],
            ref.bias_hh[perm],
        )
        assert _max_diff(swapped, ref(x, (h, c))) > 1e-2


# ---------------------------------------------------------------------------
# The lecture notes' GRU: the update-gate flip is a renaming, the reset placement is not.
# ---------------------------------------------------------------------------


def _flip_update_gate(weights):
    """Negate the z block: sigma(-a) = 1 - sigma(a) turns one update convention into the other."""
    flipped = []
    for w in weights:
        w = w.clone()
        w[H : 2 * H] *= -1
        flipped.append(w)
    return flipped


def test_notes_gru_equals_torch_when_reset_gate_is_open():
    torch.manual_seed(0)
    ref = nn.GRUCell(D, H)
    weights = [ref.weight_ih.detach(), ref.weight_hh.detach(), ref.bias_ih.detach()]
    b_hh = ref.bias_hh.detach().clone()
    b_hh[:H] = 50.0  # r = sigmoid(... + 50) = 1: both reset placements coincide
    weights.append(b_hh)
    x, h = torch.randn(4, D), torch.randn(4, H)
    torch_form = gru_cell(x, h, *weights)
    notes_form = gru_cell_notes(x, h, *_flip_update_gate(weights))
    assert _max_diff(torch_form, notes_form) < ATOL
    # without the flip, the two update conventions differ
    assert _max_diff(torch_form, gru_cell_notes(x, h, *weights)) > 1e-2


def test_notes_gru_differs_when_reset_gate_acts():
    torch.manual_seed(0)
    ref = nn.GRUCell(D, H)
    weights = [p.detach() for p in (ref.weight_ih, ref.weight_hh, ref.bias_ih, ref.bias_hh)]
    x, h = torch.randn(4, D), torch.randn(4, H)
    torch_form = gru_cell(x, h, *weights)
    notes_form = gru_cell_notes(x, h, *_flip_update_gate(weights))
    assert _max_diff(torch_form, notes_form) > 1e-3


# ---------------------------------------------------------------------------
# Clear errors on wrong shapes.
# ---------------------------------------------------------------------------


def _lstm_weights(d: int = 8, h: int = 16):
    ref = nn.LSTMCell(d, h)
    return ref.weight_ih, ref.weight_hh, ref.bias_ih, ref.bias_hh


def test_cell_rejects_wrong_input_size_with_a_clear_message():
    h = torch.zeros(3, 16)
    with pytest.raises(ValueError) as err:
        lstm_cell(torch.zeros(3, 5), (h, h), *_lstm_weights())
    assert str(err.value) == "lstm_cell: x must be [B, D=8], got [3, 5]"


def test_cell_rejects_a_sequence_where_a_step_is_expected():
    ref = nn.GRUCell(8, 16)
    with pytest.raises(ValueError, match=r"gru_cell: x must be \[B, D=8\], got \[3, 4, 8\]"):
        gru_cell(torch.zeros(3, 4, 8), torch.zeros(3, 16), ref.weight_ih, ref.weight_hh)


def test_cell_rejects_wrong_state_shape():
    ref = nn.RNNCell(8, 16)
    with pytest.raises(ValueError, match=r"rnn_cell: h must be \[B=3, H=16\], got \[2, 16\]"):
        rnn_cell(torch.zeros(3, 8), torch.zeros(2, 16), ref.weight_ih, ref.weight_hh)
    h = torch.zeros(3, 16)
    with pytest.raises(ValueError, match=r"lstm_cell: c must be \[B=3, H=16\], got \[3, 15\]"):
        lstm_cell(torch.zeros(3, 8), (h, torch.zeros(3, 15)), *_lstm_weights())
    with pytest.raises(ValueError, match=r"lstm_cell: state must be a pair \(h, c\)"):
        lstm_cell(torch.zeros(3, 8), h, *_lstm_weights())


def test_cell_rejects_weights_of_the_wrong_cell():
    rnn = nn.RNNCell(8, 16)  # weights [16, 8]: one block, not the four an LSTM needs
    h = torch.zeros(3, 16)
    with pytest.raises(ValueError, match=r"lstm_cell: weight_hh must be \[4H, H\], got \[16, 16\]"):
        lstm_cell(torch.zeros(3, 8), (h, h), rnn.weight_ih, rnn.weight_hh)


def test_layer_rejects_wrong_shapes_with_a_clear_message():
    gru = GRU(8, 16)
    with pytest.raises(ValueError) as err:
        gru(torch.zeros(3, 8))  # forgot the time axis
    assert str(err.value) == "GRU: x must be [B, T, D=8], got [3, 8]"
    with pytest.raises(
        ValueError,
        match=r"GRU: h0 must be \[num_layers=1, B=3, H=16\], got \[3, 16\]",
    ):
        gru(torch.zeros(3, 4, 8), torch.zeros(3, 16))
    lstm = LSTM(8, 16)
    h0 = torch.zeros(1, 3, 16)
    with pytest.raises(ValueError, match=r"LSTM: c0 must be \[num_layers=1, B=3"):
        lstm(torch.zeros(3, 4, 8), (h0, torch.zeros(1, 2, 16)))
    with pytest.raises(ValueError, match=r"RNN: input_size and hidden_size must be >= 1"):
        RNN(0, 4)


def test_layer_repr_and_default_init_range():
    torch.manual_seed(0)
    lstm = LSTM(8, 16)
    assert repr(lstm) == "LSTM(8, 16, batch_first=True)"
    bound = 16**-0.5
    for p in lstm.parameters():
        assert p.abs().max().item() <= bound
    assert GRU(4, 4, bias=False).bias_ih_l0 is None


# ---------------------------------------------------------------------------
# The GRU layer of a model: ours or PyTorch's, and one step of it.
# ---------------------------------------------------------------------------


def test_make_gru_builds_either_class_with_the_same_parameters():
    torch.manual_seed(0)
    ours, ref = make_gru(GRU, 8, 16), make_gru(nn.GRU, 8, 16)
    assert type(ours) is GRU and type(ref) is nn.GRU and ref.batch_first
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 5, 8)
    with torch.no_grad():
        assert _max_diff(ours(x), ref(x)) < ATOL

    class Subclass(GRU):
        pass

    assert type(make_gru(Subclass, 8, 16)) is Subclass
    for wrong in ("torch", nn.LSTM, GRU(8, 16), None):
        with pytest.raises(ValueError, match=r"make_gru: gru must be the class course_lib.rnn.GRU"):
            make_gru(wrong, 8, 16)


@pytest.mark.parametrize("cls", [GRU, nn.GRU])
def test_gru_step_is_one_step_of_the_layer(cls):
    torch.manual_seed(0)
    layer = make_gru(cls, 8, 16)
    x, h0 = torch.randn(3, 1, 8), torch.randn(1, 3, 16)
    with torch.no_grad():
        _, h1 = layer(x, h0)
        assert _max_diff(gru_step(layer, x[:, 0], h0[0]), h1[0]) < ATOL


# ---------------------------------------------------------------------------
# input_jacobian_norms: ||d h_T / d x_t|| against torch.autograd.functional.jacobian.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_input_jacobian_norms_match_autograd_jacobian_of_the_torch_layer(kind):
    ours_cls, _, torch_cls, _, _ = KINDS[kind]
    torch.manual_seed(3)
    reference = torch_cls(D, H, batch_first=True)
    ours = ours_cls(D, H)
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(3, 6, D)  # [B, T, D]
    # full Jacobian of h_T [B, H] w.r.t. x [B, T, D], then each sequence's own block
    jac = torch.autograd.functional.jacobian(lambda x: reference(x)[0][:, -1], x)  # [B, H, B, T, D]
    per_sequence = torch.stack([jac[b, :, b] for b in range(x.shape[0])])  # [B, H, T, D]
    expected = per_sequence.pow(2).sum(dim=(1, 3)).sqrt().mean(dim=0)  # [T]
    for layer in (reference, ours):
        got = input_jacobian_norms(layer, x)
        assert got.shape == (6,)
        assert _max_diff(got, expected) < ATOL


def test_input_jacobian_norms_without_recurrence_only_the_last_input_counts():
    # W_hh = 0: h_T = tanh(W_ih x_T + b), so every earlier input has a zero Jacobian
    torch.manual_seed(0)
    layer, x = RNN(D, H), torch.randn(2, 5, D)
    with torch.no_grad():
        layer.weight_hh_l0.zero_()
    norms = input_jacobian_norms(layer, x)
    assert not x.requires_grad and x.grad is None  # the caller's tensor is left alone
    assert norms[:-1].abs().max().item() == 0.0 and norms[-1] > 0


def test_input_jacobian_norms_reject_bad_input_with_a_clear_message():
    layer = GRU(D, H)
    with pytest.raises(ValueError, match=r"x must be \[B, T, D\].*x\[None\]"):
        input_jacobian_norms(layer, torch.randn(6, D))
    seq_first = nn.GRU(D, H)  # batch_first=False: outputs are [T, B, H]
    with pytest.raises(ValueError, match=r"batch_first=True"):
        input_jacobian_norms(seq_first, torch.randn(3, 6, D))


@pytest.mark.parametrize("kind", KINDS)
def test_layer_built_under_a_seed_has_torchs_parameters_under_that_seed(kind):
    # the same draws in the same order: Chapter 1's gradient measurement relies on it
    ours_cls, _, torch_cls, _, _ = KINDS[kind]
    torch.manual_seed(3)
    ours = ours_cls(16, 32)
    torch.manual_seed(3)
    ref = torch_cls(16, 32, batch_first=True)
    names = [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in ours.named_parameters()] == names
    for (name, a), b in zip(ours.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b), name
