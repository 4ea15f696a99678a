"""BERT: a bidirectional encoder, masked language modelling, a [CLS] classifier (Chapter 12).

* :class:`BertEncoder`: token + position + segment embeddings, a layer norm
  (12.3) ``x_t = LN(E[w_t] + P[t] + S[s_t])``, then post-norm
  :class:`~course_lib.blocks.EncoderBlock` with GELU and **no** causal
  mask: every token sees every token.  ``forward`` returns the hidden states
  and the pooled [CLS] vector ``tanh(W_p h_0 + b_p)``.  Laid out so that
  :func:`load_hf_bert` copies a Hugging Face ``BertModel`` into it exactly.
* :class:`MaskedLM`: the MLM head (12.4) ``softmax(E g(h_t) + b)`` with
  ``g = LN(GELU(W h + c))`` and the output matrix *tied* to the token embedding E.
* :func:`mask_tokens`: BERT's masking (12.1): 15% of the non-special tokens
  are selected; of those 80% become [MASK], 10% a random token, 10% stay;
  the labels are the original ids there and -100 (ignored) elsewhere.
* :class:`Classifier`: a linear layer on the pooled [CLS] vector.
* :func:`mean_pool` and :func:`linear_probe`: the frozen-encoder probe, a
  logistic regression on the mean of an encoder's hidden states, which asks
  what the features already hold, without fine-tuning.
* :func:`encoder_parameters`: the parameter count of an encoder (or GPT-1-like
  decoder) from its configuration, and :func:`block_parameters`, one block's.

Shapes follow ``book/notation.md`` (``B`` batch, ``T`` tokens, ``D`` width,
``V`` vocabulary).  :class:`BertConfig`'s field names are Hugging Face's on
purpose (``hidden_size`` is ``D``, ``num_attention_heads`` is ``h``,
``intermediate_size`` is ``d_ff``), so a ``transformers.BertConfig`` reads the
same and :func:`load_hf_bert` can copy its weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.blocks import EncoderBlock
from course_lib.shapes import expect_shape

__all__ = [
    "BertConfig",
    "BERT_BASE",
    "XLMR_LARGE",
    "GPT1",
    "BertEncoder",
    "MaskedLM",
    "Classifier",
    "mask_tokens",
    "mlm_loss",
    "mean_pool",
    "linear_probe",
    "block_parameters",
    "encoder_parameters",
    "load_hf_bert",
]


@dataclass(frozen=True)
class BertConfig:
    """The sizes that fix an encoder's parameter count (names as in ``transformers``)."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1


#: Devlin et al. (2019), ``bert-base-uncased``.
BERT_BASE = BertConfig(vocab_size=30522)
#: Conneau et al. (2020), ``xlm-roberta-large``: 514 positions (2 reserved), one segment.
XLMR_LARGE = BertConfig(
    vocab_size=250002,
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    max_position_embeddings=514,
    type_vocab_size=1,
    layer_norm_eps=1e-5,
)
#: Radford et al. (2018), GPT-1 (``openai-gpt``): 40,478 BPE tokens, 512 positions, no segments.
GPT1 = BertConfig(vocab_size=40478, type_vocab_size=0, layer_norm_eps=1e-5)


def block_parameters(d: int, d_ff: int) -> int:
    """Parameters of one Transformer block of width ``d`` without cross-attention.

    Attention ``4 d^2 + 4 d`` (W_Q, W_K, W_V, W_O and biases), feed-forward
    ``2 d d_ff + d_ff + d``, two layer norms ``4 d``.  The same for an encoder
    block and a decoder-only block: the causal mask has no parameters.
    """
    return (4 * d * d + 4 * d) + (2 * d * d_ff + d_ff + d) + 4 * d


def encoder_parameters(cfg: BertConfig, *, pooler: bool = True, embedding_norm: bool = True) -> int:
    """Total parameters of a BERT-like model from ``cfg`` (the MLM head's matrix is tied).

    Embeddings ``(V + P + S) d`` (+ ``2 d`` for their layer norm), ``L`` blocks
    (:func:`block_parameters`), and the pooler ``d^2 + d``.  GPT-1 is
    ``pooler=False, embedding_norm=False`` with no segments.
    """
    d = cfg.hidden_size
    emb = (cfg.vocab_size + cfg.max_position_embeddings + cfg.type_vocab_size) * d
    emb += 2 * d if embedding_norm else 0
    blocks = cfg.num_hidden_layers * block_parameters(d, cfg.intermediate_size)
    return emb + blocks + (d * d + d if pooler else 0)


class BertEncoder(nn.Module):
    """A BERT encoder; ``forward(input_ids [B, T], token_type_ids=None, attention_mask=None)``.

    Returns ``(hidden [B, T, D], pooled [B, D])``.  ``attention_mask`` [B, T] is
    1 / True at real tokens (padding is never attended to).  No causal mask.
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.tok = nn.Embedding(cfg.vocab_size, d)  # E [V, D]
        self.pos = nn.Embedding(cfg.max_position_embeddings, d)  # P [L_max, D]
        self.seg = nn.Embedding(max(cfg.type_vocab_size, 1), d)  # S [n_seg, D]
        self.norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(
            EncoderBlock(
                d,
                cfg.num_attention_heads,
                cfg.intermediate_size,
                cfg.dropout,
                norm_first=False,  # BERT is post-norm, Chapter 4, (4.2)
                activation="gelu",
                eps=cfg.layer_norm_eps,
            )
            for _ in range(cfg.num_hidden_layers)
        )
        self.pooler = nn.Linear(d, d)
        for m in self.modules():  # BERT's initialisation: N(0, 0.02) matrices, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for layer in self.layers:
            nn.init.normal_(layer.self_attn.in_proj_weight, std=0.02)

    def embed(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """(12.3) ``LN(E[w_t] + P[t] + S[s_t])`` [B, T, D] (then dropout)."""
        expect_shape("BertEncoder", "input_ids", input_ids, [("B", None), ("T", None)])
        t = input_ids.shape[1]
        if t > self.cfg.max_position_embeddings:
            raise ValueError(
                f"BertEncoder: the input has {t} tokens but max_position_embeddings="
                f"{self.cfg.max_position_embeddings}; shorten the input or enlarge the config"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.tok(input_ids) + self.pos(torch.arange(t, device=input_ids.device))
        return self.dropout(self.norm(x + self.seg(token_type_ids)))

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        *,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``positions`` (optional) asks for the last block's output at some positions only
        (its keys and values still read every position): the same numbers as the full
        ``hidden`` there, for a fraction of the cost.  Either [B, m] position ids, giving
        ``hidden`` [B, m, D] and ``pooled`` of ``hidden[:, 0]`` (the [CLS] vector when
        ``positions[:, 0]`` is 0), or a boolean [B, T], giving ``hidden[positions]`` [N, D]
        in row-major order and ``pooled`` None."""
        x = self.embed(input_ids, token_type_ids)
        kpm = None if attention_mask is None else attention_mask.bool()
        last = len(self.layers) - 1 if positions is not None else len(self.layers)
        for layer in self.layers[:last]:
            x = layer(x, key_padding_mask=kpm)  # no mask: bidirectional
        if positions is None:
            return x, torch.tanh(self.pooler(x[:, 0]))  # pooled [CLS]
        x = _post_norm_block_at(self.layers[-1], x, positions, kpm)
        return x, None if positions.dtype == torch.bool else torch.tanh(self.pooler(x[:, 0]))


def _post_norm_block_at(layer: EncoderBlock, x: Tensor, positions: Tensor, kpm: Tensor | None):
    """A post-norm block (Chapter 4, (4.2)) whose outputs are wanted at ``positions`` only (see
    :meth:`BertEncoder.forward`): the queries, the residuals and the feed-forward at those
    rows, the keys and values at all.  Each output row depends on its own query row only,
    so these are the block's outputs there, without the rows nobody reads."""
    if positions.dtype == torch.bool:  # [B, T] -> N single queries, each reading its own row
        q = x[positions]  #                                                        [N, D]
        out = _attend_rows(layer.self_attn, q, x, positions.nonzero()[:, 0], kpm)
    else:
        q = x.gather(1, positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))  # [B, m, D]
        out, _ = layer.self_attn(q, x, x, key_padding_mask=kpm)  #               [B, m, D]
    y = layer.norm1(q + layer.dropout1(out))
    return layer.norm2(y + layer.dropout2(layer.ff(y)))


def _attend_rows(attn: nn.Module, q_in: Tensor, x: Tensor, rows: Tensor, kpm: Tensor | None):
    """``attn`` (a :class:`~course_lib.attention.MultiHeadAttention`) for ``N`` single
    queries ``q_in`` [N, D], query ``n`` attending over row ``rows[n]`` of ``x`` [B, T, D]:
    Chapter 3's (3.1) projections, (3.2) in PyTorch's fused kernel, (3.6) concatenation and W_O."""
    h, d = attn.num_heads, attn.head_dim
    w_q, w_k, w_v = attn.in_proj_weight.chunk(3)
    b_q, b_k, b_v = attn.in_proj_bias.chunk(3)  # BertEncoder's blocks all have biases, as BERT's
    q = F.linear(q_in, w_q, b_q).view(-1, h, 1, d)  #                           [N, h, 1, d]
    k = F.linear(x, w_k, b_k).unflatten(-1, (h, d)).transpose(1, 2)[rows]  #   [N, h, T, d]
    v = F.linear(x, w_v, b_v).unflatten(-1, (h, d)).transpose(1, 2)[rows]
    mask = None if kpm is None else kpm[rows][:, None, None, :]  #             [N, 1, 1, T]
    p = attn.dropout if attn.training else 0.0
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # [N, h, 1, d]
    return attn.out_proj(out.flatten(1))  #                                    [N, D]


class MaskedLM(nn.Module):
    """Encoder + MLM head (12.4), output matrix tied to the token embedding.

    ``forward(input_ids, token_type_ids=None, attention_mask=None) -> logits [B, T, V]``.
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.encoder = BertEncoder(cfg)
        self.transform = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        nn.init.normal_(self.transform.weight, std=0.02)
        nn.init.zeros_(self.transform.bias)

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
    ) -> Tensor:
        h, _ = self.encoder(input_ids, token_type_ids, attention_mask)
        return self.head(h)

    def head(self, h: Tensor) -> Tensor:
        """(12.4) logits ``E g(h) + b`` [..., V] of hidden states ``h`` [..., D]."""
        g = self.norm(F.gelu(self.transform(h)))
        return F.linear(g, self.encoder.tok.weight, self.bias)  # tied: E g + b


def mlm_loss(model: MaskedLM, batch: tuple[Tensor, Tensor]) -> Tensor:
    """(12.2) Cross-entropy at the selected positions only (labels -100 are ignored).

    ``batch = (inputs [B, T], labels [B, T])``.  The read-out (a [V, D] product)
    runs at the selected positions only, as BERT's code does: about 15% of the
    cost of scoring every position, for the same loss.  So does the last block
    (``BertEncoder(..., positions=...)``): no later layer reads its other rows.
    """
    inputs, labels = batch
    selected = labels != -100  #                                               [B, T]
    h, _ = model.encoder(inputs, positions=selected)  # the last block there only [N, D]
    return F.cross_entropy(model.head(h), labels[selected])


class Classifier(nn.Module):
    """A sequence classifier: ``W_c pooled([CLS]) + b_c``; ``forward(...) -> logits [B, C]``."""

    def __init__(self, encoder: BertEncoder, num_classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(encoder.cfg.hidden_size, num_classes)

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
    ) -> Tensor:
        # only [CLS] is read: the last block runs at position 0 alone (same pooled vector)
        cls = torch.zeros_like(input_ids[:, :1])  #                                [B, 1]
        _, pooled = self.encoder(input_ids, token_type_ids, attention_mask, positions=cls)
        return self.out(self.dropout(pooled))


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The mean of ``hidden`` [B, T, D] over the real tokens (``attention_mask`` [B, T]
    true / 1 there, padding excluded) -> [B, D]."""
    expect_shape("mean_pool", "hidden", hidden, [("B", None), ("T", None), ("D", None)])
    if attention_mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"mean_pool: attention_mask has shape {tuple(attention_mask.shape)} but hidden is "
            f"{tuple(hidden.shape)}; pass one [B, T] mask with a 1 at every real token"
        )
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  #                       [B, T, 1]
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)


def linear_probe(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    *,
    steps: int = 300,
    lr: float = 0.01,
    weight_decay: float = 0.01,
) -> float:
    """Test accuracy of a logistic regression trained on frozen features.

    ``train_x`` [N, D] and ``test_x`` [M, D] are standardised with the training
    mean and standard deviation; a linear layer ``D -> C`` (``C`` the number of
    classes in ``train_y``) is trained full-batch with AdamW for ``steps``
    steps.  The problem is convex, so the answer depends on the features, not
    on the initialisation.  Nothing flows back into the encoder that made them.
    """
    for name, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
        if x.dim() != 2 or y.shape != x.shape[:1]:
            raise ValueError(
                f"linear_probe: {name}_x must be [N, D] with {name}_y [N], got "
                f"{tuple(x.shape)} and {tuple(y.shape)}; mean_pool the hidden states first"
            )
    mu, sd = train_x.mean(0), train_x.std(0).clamp_min(1e-6)
    xs, xt = (train_x - mu) / sd, (test_x - mu) / sd
    linear = nn.Linear(xs.shape[1], int(train_y.max()) + 1).to(xs.device, xs.dtype)
    opt = torch.optim.AdamW(linear.parameters(), lr, weight_decay=weight_decay)
    for _ in range(steps):
        loss = F.cross_entropy(linear(xs), train_y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return (linear(xt).argmax(-1) == test_y).float().mean().item()


def mask_tokens(
    ids: Tensor,
    *,
    vocab_size: int,
    mask_id: int,
    special_ids: tuple[int, ...] | list[int] = (),
    prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """BERT's masking (12.1); returns ``(inputs, labels)``, both shaped like ``ids``.

    Each token that is not in ``special_ids`` is selected with probability
    ``prob``.  A selected token becomes ``mask_id`` with probability 0.8, a token
    drawn uniformly from the vocabulary with probability 0.1, and stays itself
    with probability 0.1.  ``labels`` holds the original id at the selected
    positions and -100 everywhere else (ignored by the loss).
    """
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"mask_tokens: prob must be in [0, 1], got {prob}")
    dev = ids.device
    u = torch.rand(ids.shape, generator=generator, device=dev)
    special = torch.isin(ids, torch.tensor(list(special_ids), device=dev))  # compares values
    selected = (u < prob) & ~special
    labels = torch.where(selected, ids, torch.full_like(ids, -100))
    r = torch.rand(ids.shape, generator=generator, device=dev)
    inputs = ids.clone()
    inputs[selected & (r < 0.8)] = mask_id
    swap = selected & (r >= 0.8) & (r < 0.9)
    random_ids = torch.randint(
        vocab_size, ids.shape, generator=generator, device=dev, dtype=ids.dtype
    )
    inputs[swap] = random_ids[swap]
    return inputs, labels


@torch.no_grad()
def load_hf_bert(model: BertEncoder, state: dict[str, Tensor]) -> BertEncoder:
    """Copy a Hugging Face ``BertModel`` state dict into ``model`` (same config); returns it."""
    state = {k.removeprefix("bert."): v for k, v in state.items()}
    ours = {
        "tok.weight": state["embeddings.word_embeddings.weight"],
        "pos.weight": state["embeddings.position_embeddings.weight"],
        "seg.weight": state["embeddings.token_type_embeddings.weight"],
        "norm.weight": state["embeddings.LayerNorm.weight"],
        "norm.bias": state["embeddings.LayerNorm.bias"],
        "pooler.weight": state["pooler.dense.weight"],
        "pooler.bias": state["pooler.dense.bias"],
    }
    for i in range(len(model.layers)):
        h, b = f"encoder.layer.{i}.", f"layers.{i}."
        att = h + "attention.self."
        for kind in ("weight", "bias"):
            ours[b + f"self_attn.in_proj_{kind}"] = torch.cat(
                [state[att + f"{n}.{kind}"] for n in ("query", "key", "value")]
            )
            for theirs, mine in {
                "attention.output.dense": "self_attn.out_proj",
                "attention.output.LayerNorm": "norm1",
                "intermediate.dense": "ff.linear1",
                "output.dense": "ff.linear2",
                "output.LayerNorm": "norm2",
            }.items():
                ours[b + f"{mine}.{kind}"] = state[h + f"{theirs}.{kind}"]
    model.load_state_dict(ours)
    return model
