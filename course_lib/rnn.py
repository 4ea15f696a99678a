"""Recurrent cells and layers written from their equations (Chapter 1).

Each cell takes one time step of input ``x`` of shape ``[B, D]``,
the previous state, and four weight tensors laid out exactly like PyTorch's
``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0`` and ``bias_hh_l0``, so the
weights of a ``torch.nn.RNN`` / ``LSTM`` / ``GRU`` copy over unchanged and the
tests can compare our numbers with PyTorch's.

PyTorch stacks the weights of all gates in one matrix, gates in this order:

* RNN:  ``weight_ih`` is ``[H, D]`` (a single "gate").
* LSTM: ``[W_i | W_f | W_g | W_o]``, so ``weight_ih`` is ``[4H, D]``.
* GRU:  ``[W_r | W_z | W_n]``, so ``weight_ih`` is ``[3H, D]``.

A product with the concatenation ``[h_{t-1}, x_t]`` (the notation of many
lecture notes) is the same thing split in two: ``W [h; x] = W_h h + W_x x``.
PyTorch keeps two biases, ``b_ih`` and ``b_hh``; only their sum matters, except
in the GRU candidate (1.10), where ``b_hn`` sits inside the reset gate.

The layers :class:`RNN`, :class:`LSTM` and :class:`GRU` are single-layer,
``batch_first`` versions of PyTorch's, with the same parameter names and shapes
(``load_state_dict`` from ``torch.nn.LSTM(..., batch_first=True)`` works) and the
same state shapes: ``h_0`` and ``h_n`` are ``[1, B, H]`` (one layer).  Argument
names (``input_size``, ``hidden_size``, ``weight_ih_l0``, ...) follow PyTorch's on
purpose, so that weights copy over.  :func:`make_gru` builds the GRU layer of a
model from either class, and :func:`gru_step` runs one step of such a layer.

Shapes (``book/notation.md``): ``B`` batch, ``T`` time steps, ``D`` input size
(``input_size``), ``H`` hidden size (``hidden_size``); ``4H`` and ``3H`` are the
stacked gate blocks of the LSTM and the GRU.

:func:`input_jacobian_norms` measures how far back a layer's last state still
depends on its inputs (the vanishing and exploding gradients of Chapter 1).

Equation numbers refer to Chapter 1 of the course.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.shapes import expect_shape, fmt_shape

__all__ = [
    "rnn_cell",
    "lstm_cell",
    "gru_cell",
    "gru_cell_notes",
    "RNN",
    "LSTM",
    "GRU",
    "make_gru",
    "gru_step",
    "input_jacobian_norms",
]


# ---------------------------------------------------------------------------
# Shape checks: every public function says what it expected and what it got.
# ---------------------------------------------------------------------------


def _check_cell(
    where: str,
    gates: int,
    x: Tensor,
    states: list[tuple[str, Tensor]],
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None,
    bias_hh: Tensor | None,
) -> None:
    """Check a cell's inputs; the sizes H and D are read from ``weight_hh`` and ``weight_ih``."""
    blocks = "H" if gates == 1 else f"{gates}H"  # the stacked gate blocks, e.g. 4H
    if weight_hh.dim() != 2 or weight_hh.shape[0] != gates * weight_hh.shape[1]:
        raise ValueError(
            f"{where}: weight_hh must be [{blocks}, H], got {fmt_shape(weight_hh.shape)}"
        )
    hidden = weight_hh.shape[1]
    expect_shape(where, "weight_ih", weight_ih, [(blocks, gates * hidden), ("D", None)])
    for name, bias in (("bias_ih", bias_ih), ("bias_hh", bias_hh)):
        if bias is not None:
            expect_shape(where, name, bias, [(blocks, gates * hidden)])
    expect_shape(where, "x", x, [("B", None), ("D", weight_ih.shape[1])])
    for name, state in states:
        expect_shape(where, name, state, [("B", x.shape[0]), ("H", hidden)])


# ---------------------------------------------------------------------------
# Cells: one time step.  B batch, D input_size, H hidden_size.
# ---------------------------------------------------------------------------


def rnn_cell(
    x: Tensor,
    h: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
) -> Tensor:
    """One step of the Elman RNN with tanh, Chapter 1, eq. (1.1).

    Shapes: ``x`` [B, D], ``h`` [B, H], ``weight_ih`` [H, D], ``weight_hh`` [H, H],
    biases [H]. Returns the new hidden state [B, H].
    """
    _check_cell("rnn_cell", 1, x, [("h", h)], weight_ih, weight_hh, bias_ih, bias_hh)
    # (1.1)  h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)                       [B, H]
    return torch.tanh(F.linear(x, weight_ih, bias_ih) + F.linear(h, weight_hh, bias_hh))


def lstm_cell(
    x: Tensor,
    state: tuple[Tensor, Tensor],
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One step of the LSTM, Chapter 1, eqs. (1.2)-(1.7).

    Shapes: ``x`` [B, D], ``state = (h, c)`` each [B, H], ``weight_ih`` [4H, D],
    ``weight_hh`` [4H, H], biases [4H]; gate blocks in PyTorch's order i, f, g, o.
    Returns the new ``(h, c)``, each [B, H].
    """
    if not (isinstance(state, (tuple, list)) and len(state) == 2):
        raise ValueError(f"lstm_cell: state must be a pair (h, c), got {type(state).__name__}")
    h, c = state
    _check_cell("lstm_cell", 4, x, [("h", h), ("c", c)], weight_ih, weight_hh, bias_ih, bias_hh)
    # All four pre-activations at once: W_ih x_t + b_ih + W_hh h_{t-1} + b_hh   [B, 4H]
    pre = F.linear(x, weight_ih, bias_ih) + F.linear(h, weight_hh, bias_hh)
    a_i, a_f, a_g, a_o = pre.chunk(4, dim=-1)  # each [B, H]
    # (1.2) input gate   i_t = sigma(W_ii x_t + b_ii + W_hi h_{t-1} + b_hi)
    i = torch.sigmoid(a_i)
    # (1.3) forget gate  f_t = sigma(W_if x_t + b_if + W_hf h_{t-1} + b_hf)
    f = torch.sigmoid(a_f)
    # (1.4) candidate    g_t = tanh(W_ig x_t + b_ig + W_hg h_{t-1} + b_hg)
    g = torch.tanh(a_g)
    # (1.5) output gate  o_t = sigma(W_io x_t + b_io + W_ho h_{t-1} + b_ho)
    o = torch.sigmoid(a_o)
    # (1.6) cell state   c_t = f_t * c_{t-1} + i_t * g_t                          [B, H]
    c_new = f * c + i * g
    # (1.7) hidden state h_t = o_t * tanh(c_t)                                     [B, H]
    h_new = o * torch.tanh(c_new)
    return h_new, c_new


def gru_cell(
    x: Tensor,
    h: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
) -> Tensor:
    """One step of the GRU in PyTorch's convention, Chapter 1, eqs. (1.8)-(1.11).

    Shapes: ``x`` [B, D], ``h`` [B, H], ``weight_ih`` [3H, D], ``weight_hh`` [3H, H],
    biases [3H]; gate blocks in PyTorch's order r, z, n.  Returns the new h [B, H].

    Two conventions differ from many lecture notes (see :func:`gru_cell_notes`):
    ``z`` weights the *old* state in (1.11), and the reset gate multiplies
    ``W_hn h + b_hn`` *after* the matrix product in (1.10).
    """
    _check_cell("gru_cell", 3, x, [("h", h)], weight_ih, weight_hh, bias_ih, bias_hh)
    gx = F.linear(x, weight_ih, bias_ih)  # W_i* x_t + b_i*                          [B, 3H]
    gh = F.linear(h, weight_hh, bias_hh)  # W_h* h_{t-1} + b_h*                      [B, 3H]
    x_r, x_z, x_n = gx.chunk(3, dim=-1)  # each [B, H]
    h_r, h_z, h_n = gh.chunk(3, dim=-1)  # each [B, H]
    # (1.8)  reset gate   r_t = sigma(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
    r = torch.sigmoid(x_r + h_r)
    # (1.9)  update gate  z_t = sigma(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
    z = torch.sigmoid(x_z + h_z)
    # (1.10) candidate    n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))
    n = torch.tanh(x_n + r * h_n)
    # (1.11) new state    h_t = (1 - z_t) * n_t + z_t * h_{t-1}                     [B, H]
    return (1 - z) * n + z * h


def gru_cell_notes(
    x: Tensor,
    h: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
) -> Tensor:
    """The GRU as the course's lecture notes write it (biases added), Chapter 1, eq. (1.12).

    Same weight layout as :func:`gru_cell` (blocks r, z, n), but

    * the reset gate acts *before* the hidden matrix product:
      ``n_t = tanh(W_in x_t + b_in + W_hn (r_t * h_{t-1}) + b_hn)`` (a different model), and
    * ``z`` weights the *new* candidate: ``h_t = (1 - z_t) * h_{t-1} + z_t * n_t``
      (only a relabelling: ``z`` here plays the role of ``1 - z`` in PyTorch).

    Used in Chapter 1 to show which of the two differences matters.
    """
    _check_cell("gru_cell_notes", 3, x, [("h", h)], weight_ih, weight_hh, bias_ih, bias_hh)
    w_hr, w_hz, w_hn = weight_hh.chunk(3, dim=0)  # each [H, H]
    b_hr, b_hz, b_hn = (None, None, None) if bias_hh is None else bias_hh.chunk(3)  # each [H]
    x_r, x_z, x_n = F.linear(x, weight_ih, bias_ih).chunk(3, dim=-1)  # each [B, H]
    # reset gate   r_t = sigma(W_r [h_{t-1}, x_t] + b_r)
    r = torch.sigmoid(x_r + F.linear(h, w_hr, b_hr))
    # update gate  z_t = sigma(W_z [h_{t-1}, x_t] + b_z)
    z = torch.sigmoid(x_z + F.linear(h, w_hz, b_hz))
    # (1.12) candidate  ~h_t = tanh(W [r_t * h_{t-1}, x_t] + b): reset *before* the product
    n = torch.tanh(x_n + F.linear(r * h, w_hn, b_hn))
    # new state    h_t = (1 - z_t) * h_{t-1} + z_t * ~h_t: z weights the *new* candidate
    return (1 - z) * h + z * n


# ---------------------------------------------------------------------------
# Layers: the cells unrolled over time, with PyTorch's parameter names.
# ---------------------------------------------------------------------------


class _Recurrent(nn.Module):
    """Parameters, checks and the loop over time shared by :class:`RNN`, :class:`LSTM`, :class:`GRU`.

    A subclass sets ``gates`` (the number of stacked gate blocks) and ``cell``, the
    function of one step, ``cell(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh)
    -> state``.
    """

    gates: int
    cell: Callable[..., Tensor | tuple[Tensor, Tensor]]

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        super().__init__()
        if input_size < 1 or hidden_size < 1:
            raise ValueError(
                f"{type(self).__name__}: input_size and hidden_size must be >= 1, "
                f"got {input_size} and {hidden_size}"
            )
        self.input_size = input_size
        self.hidden_size = hidden_size
        blocks = self.gates * hidden_size
        # Same names and shapes as torch.nn.RNN / LSTM / GRU (layer 0).
        self.weight_ih_l0 = nn.Parameter(torch.empty(blocks, input_size))  # [gates*H, D]
        self.weight_hh_l0 = nn.Parameter(torch.empty(blocks, hidden_size))  # [gates*H, H]
        if bias:
            self.bias_ih_l0 = nn.Parameter(torch.empty(blocks))  # [gates*H]
            self.bias_hh_l0 = nn.Parameter(torch.empty(blocks))  # [gates*H]
        else:
            self.register_parameter("bias_ih_l0", None)
            self.register_parameter("bias_hh_l0", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's initialisation: every parameter uniform in [-1/sqrt(H), 1/sqrt(H)]."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def _weights(self) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        return self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0

    def _check_input(self, x: Tensor) -> None:
        expect_shape(
            type(self).__name__, "x", x, [("B", None), ("T", None), ("D", self.input_size)]
        )

    def _initial(self, x: Tensor, h0: Tensor | None, name: str) -> Tensor:
        """``h0`` as [B, H] (zeros when None), checked against PyTorch's [1, B, H]."""
        if h0 is None:
            return x.new_zeros(x.shape[0], self.hidden_size)
        expect_shape(
            type(self).__name__,
            name,
            h0,
            [("num_layers", 1), ("B", x.shape[0]), ("H", self.hidden_size)],
        )
        return h0[0]

    def _unroll(
        self, x: Tensor, state: Tensor | tuple[Tensor, Tensor]
    ) -> tuple[Tensor, Tensor | tuple[Tensor, Tensor]]:
        """``self.cell`` at every step of ``x`` [B, T, D], from ``state``.

        Returns the outputs [B, T, H] (each step's h: the state itself, or the
        first of the LSTM's pair (h, c)) and the last state.
        """
        outputs = []
        for t in range(x.shape[1]):
            state = self.cell(x[:, t], state, *self._weights())  # h [B, H], or (h, c)
            outputs.append(state[0] if isinstance(state, tuple) else state)
        if not outputs:  # T = 0
            return x.new_zeros(x.shape[0], 0, self.hidden_size), state
        return torch.stack(outputs, dim=1), state

    def forward(self, x: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``x`` [B, T, D], ``h0`` [1, B, H] or None -> (outputs [B, T, H], h_n [1, B, H])."""
        self._check_input(x)
        outputs, h = self._unroll(x, self._initial(x, h0, "h0"))
        return outputs, h.unsqueeze(0)

    def extra_repr(self) -> str:
        bias = "" if self.bias_ih_l0 is not None else ", bias=False"
        return f"{self.input_size}, {self.hidden_size}, batch_first=True{bias}"


class RNN(_Recurrent):
    """Single-layer tanh RNN, batch first: :func:`rnn_cell` (1.1) applied at every step.

    ``forward(x [B, T, D], h0 [1, B, H] or None) -> (outputs [B, T, H], h_n [1, B, H])``.
    """

    gates = 1
    cell = staticmethod(rnn_cell)  # (1.1)


class LSTM(_Recurrent):
    """Single-layer LSTM, batch first: :func:`lstm_cell` (1.2)-(1.7) at every step.

    ``forward(x [B, T, D], (h0, c0) each [1, B, H], or None)
    -> (outputs [B, T, H], (h_n, c_n) each [1, B, H])``.
    """

    gates = 4
    cell = staticmethod(lstm_cell)  # (1.2)-(1.7)

    def forward(
        self, x: Tensor, state: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        self._check_input(x)
        if state is None:
            h0 = c0 = None
        elif isinstance(state, (tuple, list)) and len(state) == 2:
            h0, c0 = state
        else:
            raise ValueError(
                f"LSTM: state must be a pair (h0, c0) or None, got {type(state).__name__}"
            )
        h, c = self._initial(x, h0, "h0"), self._initial(x, c0, "c0")  # [B, H] each
        outputs, (h, c) = self._unroll(x, (h, c))
        return outputs, (h.unsqueeze(0), c.unsqueeze(0))


class GRU(_Recurrent):
    """Single-layer GRU (PyTorch's convention), batch first: :func:`gru_cell` (1.8)-(1.11).

    ``forward(x [B, T, D], h0 [1, B, H] or None) -> (outputs [B, T, H], h_n [1, B, H])``.
    """

    gates = 3
    cell = staticmethod(gru_cell)  # (1.8)-(1.11)


def make_gru(gru: type[nn.Module], input_size: int, hidden_size: int) -> nn.Module:
    """A single-layer, batch-first GRU layer of class ``gru``, from D = ``input_size`` to H.

    ``gru`` is :class:`GRU` (ours, written from the equations) or ``torch.nn.GRU``
    (PyTorch's, faster on a GPU), or a subclass of either.  Both have the same
    parameter names and shapes, so a model's ``state_dict`` loads into either.
    """
    if isinstance(gru, type) and issubclass(gru, GRU):
        return gru(input_size, hidden_size)
    if isinstance(gru, type) and issubclass(gru, nn.GRU):
        return gru(input_size, hidden_size, batch_first=True)
    raise ValueError(
        f"make_gru: gru must be the class course_lib.rnn.GRU or torch.nn.GRU, got {gru!r}"
    )


def gru_step(layer: nn.Module, x: Tensor, h: Tensor) -> Tensor:
    """One time step of a GRU layer built by :func:`make_gru`, eqs. (1.8)-(1.11).

    ``x`` [B, D], ``h`` [B, H] -> the new ``h`` [B, H]: :func:`gru_cell` with the
    layer's weights ``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``
    (ours and ``torch.nn.GRU`` name them alike).  A decoder that must compute
    something between two steps (Chapter 2's attention) calls it once per step.
    """
    return gru_cell(
        x, h, layer.weight_ih_l0, layer.weight_hh_l0, layer.bias_ih_l0, layer.bias_hh_l0
    )


def _check_outputs(outputs: Tensor, x: Tensor) -> None:
    """Raise unless ``outputs`` are the [B, T, H] outputs of a batch-first layer run on ``x``."""
    if outputs.dim() != 3 or outputs.shape[:2] != x.shape[:2]:
        raise ValueError(
            "input_jacobian_norms: layer(x)[0] must be the outputs [B, T, H] of a batch-first "
            f"layer, got {fmt_shape(outputs.shape)} for x {fmt_shape(x.shape)} "
            "(build torch layers with batch_first=True)"
        )


def _check_batch_first(layer: nn.Module, x: Tensor) -> None:
    """Raise unless ``x`` is [B, T, D] and ``layer`` reads it batch first (:func:`input_jacobian_norms`)."""
    if x.dim() != 3:
        raise ValueError(
            f"input_jacobian_norms: x must be [B, T, D] (batch first), got {fmt_shape(x.shape)}; "
            "add a batch axis with x[None] for one sequence"
        )
    if getattr(layer, "batch_first", True) is False:
        raise ValueError(
            "input_jacobian_norms: the layer reads [T, B, D]; build it with batch_first=True"
        )


def input_jacobian_norms(layer: nn.Module, x: Tensor) -> Tensor:
    """How strongly the last state depends on each input: ``||d h_T / d x_t||_F``, Chapter 1.

    ``layer`` is any batch-first recurrent layer whose ``forward(x)`` returns
    ``(outputs [B, T, H], last state)``: :class:`RNN`, :class:`LSTM`, :class:`GRU` or
    ``torch.nn.RNN`` / ``LSTM`` / ``GRU`` built with ``batch_first=True``.  For ``x``
    [B, T, D] it returns a tensor [T] whose entry t is the Frobenius norm of the
    Jacobian of ``h_T`` (the output at the last step, [H]) with respect to ``x_t``
    ([D]), averaged over the B sequences.  Backpropagation through time multiplies
    one Jacobian ``d h_k / d h_{k-1}`` per step between t and T, so a norm that
    shrinks (or grows) geometrically in ``T - t`` is a vanishing (or exploding)
    gradient.  The Jacobian is exact: one backward pass per hidden unit, batched.
    """
    _check_batch_first(layer, x)
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        outputs = layer(x)[0]  # [B, T, H]
        _check_outputs(outputs, x)
        h_last = outputs[:, -1]  # h_T                                             [B, H]
        hidden = h_last.shape[-1]
        # Row k of every sequence's Jacobian at once: the gradient of h_T[:, k].    [H, B, H]
        directions = torch.eye(hidden, dtype=x.dtype, device=x.device)[:, None].expand(
            hidden, x.shape[0], hidden
        )
        (jac,) = torch.autograd.grad(h_last, x, directions, is_grads_batched=True)  # [H, B, T, D]
    return jac.pow(2).sum(dim=(0, 3)).sqrt().mean(dim=0)  # ||d h_T / d x_t||_F      [T]
