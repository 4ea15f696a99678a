"""One configuration for every Transformer-shaped model of the course (Chapter 4).

:class:`TransformerConfig` holds the quantities that the trunk of every such
model shares (width, heads, depth, feed-forward width, dropout, ...), like
nanoGPT's ``GPTConfig``: each model takes it first, ``Model(config,
<model-specific arguments>)``, keeps it as ``model.config``, and hands its
blocks what they need.  The models are :class:`~course_lib.transformer.EncoderDecoder`,
:class:`~course_lib.transformer.EncoderOnly`, :class:`~course_lib.transformer.DecoderOnly`,
:class:`~course_lib.gpt.GPT`, :class:`~course_lib.lm.PositionalLM`,
:class:`~course_lib.vit.ViT` and :class:`~course_lib.timeseries.PatchForecaster`
(and the stacks :class:`~course_lib.transformer.Encoder`,
:class:`~course_lib.transformer.Decoder`).  BERT keeps Hugging Face's
:class:`~course_lib.bert.BertConfig`, so that its weights load unchanged.

Names and letters follow ``book/notation.md``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from course_lib.blocks import ACTIVATIONS

__all__ = ["TransformerConfig", "check_config"]


@dataclass(frozen=True)
class TransformerConfig:
    """The shared sizes and choices of a Transformer trunk.

    Fields (letter of ``book/notation.md``; chapter):

    * ``d_model`` -- ``D``, the model width: every token's vector (Chapter 4).
    * ``num_heads`` -- ``h``, attention heads per layer; each has width
      ``d = D / h``, so ``d_model`` must be a multiple of it (Chapter 3).
    * ``num_layers`` -- the number of blocks stacked, eq. (4.6) (Chapter 4).
    * ``d_ff`` -- ``F``, the feed-forward width of eq. (4.1); ``None`` means
      ``4 * d_model``, the 2017 paper's and GPT's ratio (Chapter 4).
    * ``dropout`` -- the probability of zeroing a sub-layer's output (and, in
      the models that have it, the attention weights), in ``[0, 1)`` (Chapter 9).
    * ``max_len`` -- rows of a learned position table, the longest input a
      model with one can read (Chapter 7); ViT and PatchForecaster take
      their length from the input size instead and do not read it.
    * ``norm_first`` -- pre-norm, eq. (4.3), if True; post-norm (the 2017
      paper), eq. (4.2), if False (Chapter 4).
    * ``activation`` -- the feed-forward non-linearity ``phi`` of eq. (4.1):
      ``"relu"`` (2017), ``"gelu"`` (GPT, BERT, ViT) or ``"gelu_tanh"`` (Chapter 4).
    * ``eps`` -- the epsilon of every layer norm (torch's default ``1e-5``;
      the original ViT code uses ``1e-6``) (Chapter 4).

    ``replace(**changes)`` returns a copy with some fields changed (``d_ff``
    stays as it was unless given again), and ``to_dict()`` the fields as a
    plain dict (what a checkpoint stores).
    """

    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    d_ff: int | None = None
    dropout: float = 0.0
    max_len: int = 128
    norm_first: bool = True
    activation: str = "relu"
    eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        for name in ("d_model", "num_heads", "num_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TransformerConfig: {name} must be a positive int, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"TransformerConfig: d_model ({self.d_model}) must be a multiple of num_heads "
                f"({self.num_heads}), so that each head has width d = d_model / num_heads; "
                f"change one of them (e.g. d_model={-(-self.d_model // self.num_heads) * self.num_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"TransformerConfig: dropout must be in [0, 1), got {self.dropout}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"TransformerConfig: activation must be one of {tuple(ACTIVATIONS)}, "
                f"got {self.activation!r}"
            )
        if not self.eps > 0:
            raise ValueError(f"TransformerConfig: eps must be > 0, got {self.eps}")

    def replace(self, **changes) -> TransformerConfig:
        """A copy with ``changes`` applied (validated again), e.g. ``config.replace(num_layers=1)``."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields as a plain dict: ``TransformerConfig(**config.to_dict()) == config``."""
        return asdict(self)


def check_config(where: str, config: object) -> TransformerConfig:
    """``config`` itself if it is a :class:`TransformerConfig`, else an error naming the fix."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(
            f"{where}: the first argument is a course_lib.config.TransformerConfig, got "
            f"{type(config).__name__} {config!r}; build the model as "
            f"{where}(TransformerConfig(d_model=..., num_heads=..., ...), ...)"
        )
    return config
