"""One training step of Chapter 11's character GPT vs the same model from ``nn.TransformerEncoderLayer``.

The notebook's small size: vocabulary 65, D = 64, 4 heads, 2 layers, d_ff =
4 D, GELU, pre-norm, dropout 0, windows of 64 characters, batches of 32.
The peer is token + learned position embeddings, ``nn.TransformerEncoder`` of
``nn.TransformerEncoderLayer(norm_first=True, activation="gelu",
batch_first=True)`` with a final layer norm, run with the causal mask
(``generate_square_subsequent_mask``, ``is_causal=True``), and a linear
read-out.  Its weights are loaded into :class:`course_lib.gpt.GPT` and the
logits are checked equal before timing.  A step is what
:func:`course_lib.training.train` does: zero_grad, forward, cross-entropy,
backward, gradient clipping to norm 1, AdamW (lr 1e-2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.harness import Config, compare, time_side_by_side
from course_lib.blocks import from_torch_state_dict
from course_lib.config import TransformerConfig
from course_lib.gpt import GPT

GOAL = 1.2  # issue 18


class TorchGPT(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, max_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model,
            heads,
            4 * d_model,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(
            layer, layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False
        )
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=tokens.device)
        return self.head(self.blocks(x, mask=mask, is_causal=True))


def ours_from(peer: TorchGPT, vocab: int, d_model: int, heads: int, layers: int, max_len: int):
    """A :class:`GPT` holding ``peer``'s weights."""
    config = TransformerConfig(
        d_model=d_model, num_heads=heads, num_layers=layers, max_len=max_len, activation="gelu"
    )
    ours = GPT(config, vocab)
    state = {
        k.replace("tok.", "embed.tok.", 1).replace("pos.", "embed.pos.", 1): v
        for k, v in peer.state_dict().items()
    }
    ours.load_state_dict(from_torch_state_dict(state))
    return ours


def run(cfg: Config) -> list[dict]:
    dev = cfg.device
    if cfg.quick:
        vocab, width, heads, layers, block, batch = 11, 16, 2, 1, 8, 2
    else:
        vocab, width, heads, layers, block, batch = 65, 64, 4, 2, 64, 32
    torch.manual_seed(0)
    peer = TorchGPT(vocab, width, heads, layers, block)
    ours = ours_from(peer, vocab, width, heads, layers, block)
    peer.to(dev), ours.to(dev)
    tokens = torch.randint(vocab, (batch, block + 1), device=dev)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    with torch.no_grad():
        torch.testing.assert_close(ours(inputs), peer(inputs), atol=1e-4, rtol=1e-4)

    def step(model: nn.Module):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

        def call():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        return call

    times, repeats = time_side_by_side({"ours": step(ours), "peer": step(peer)}, cfg)
    return [
        {
            "group": "GPT",
            "what": "character GPT, one training step",
            "size": f"V={vocab}, D={width}, h={heads}, {layers} layers, B={batch}, T={block}",
            "ours": "course_lib.gpt.GPT",
            "peer": "nn.TransformerEncoderLayer stack (norm_first, GELU, causal mask)",
            "metric": "time",
            "repeats": repeats,
            "goal_ratio": GOAL,
            **compare(times, "ours", "peer"),
        }
    ]
