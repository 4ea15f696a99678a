"""Reference implementations for *Attention Models, from motivation to modern variants*.

Each module holds one idea of the course and cites the chapter and equations it
implements.  Notebooks import from here and show the source with
:func:`course_lib.show_source` instead of redefining it.  In the book's order:

==================  ==========================================================
``rnn``             recurrent cells and layers (Ch. 1)
``seq2seq``         the toy task; encoder-decoders without and with attention (Ch. 1-2)
``by_length``       Chapter 1's models, one per sequence length, trained as one (Ch. 1)
``masks``           the one mask convention, masks, masked softmax (Ch. 2-3)
``attention``       alignment scores (Ch. 2); scaled dot-product and multi-head attention (Ch. 3)
``blocks``          feed-forward, encoder and decoder blocks (Ch. 4)
``transformer``     stacks of blocks, the three families (Ch. 4)
``config``          ``TransformerConfig``, the sizes every Transformer model takes (Ch. 4)
``embeddings``      embedding lookup and static word vectors (Ch. 5)
``tokenization``    pre-tokenization, byte-pair encoding, WordPiece (Ch. 5)
``unigram``         Unigram language-model tokenization (Ch. 5, 12)
``positional``      absolute positions: sinusoidal and learned tables (Ch. 7)
``relative``        relative positions: Shaw, T5, ALiBi, RoPE (Ch. 8)
``position_hooks``  the relative methods as hooks of multi-head attention (Ch. 8)
``lm``              character language models: data, loss, training, evaluation (Ch. 8, 9, 11)
``training``        the training loop (Ch. 1) and Chapter 9's practices
``callbacks``       schedules, early stopping, checkpoints, mixed precision in the loop (Ch. 9)
``distributed``     data-parallel training with two processes (Ch. 9)
``timeseries``      temporal encodings, patching, a patch Transformer with covariates (Ch. 10)
``forecasting``     naive, linear and exponential-smoothing forecasters (Ch. 10)
``ensemble``        several seeds of one model trained as one (vmap) (Ch. 10)
``long_runs``       recorded runs beyond a chapter's budget, with provenance (Ch. 10)
``gpt``             GPT, sampling, LoRA, bottleneck adapters (Ch. 11)
``params``          counting a model's parameters (every chapter)
``bert``            BERT, masked language modelling, linear probes (Ch. 12)
``vit``             the Vision Transformer (Ch. 13)
``convnet``         a small convolutional network, the ViT's baseline (Ch. 13)
``swin``            Swin's window attention (Ch. 13)
``gat``             graph convolution and graph attention layers (Ch. 14)
``time_encoding``   TGAT's continuous-time encoding (Ch. 14, used in Ch. 10)
``sparse``          sparse node features for the first graph layer (Ch. 14)
``gat_training``    node classification with the GAT paper's early stopping (Ch. 14)
``data``            offline data loaders;  ``shapes``, ``show``, ``runtime``: tooling
==================  ==========================================================

Shape letters are those of ``book/notation.md``.

The standard opening of every notebook is::

    import course_lib
    device = course_lib.setup_notebook(seed=0)
"""

from course_lib.runtime import (
    derived_seed,
    generator,
    get_device,
    record,
    seed_everything,
    setup_notebook,
)
from course_lib.show import html_table, max_diff, moving_average, show_source

__version__ = "0.8.0"

__all__ = [
    "get_device",
    "derived_seed",
    "generator",
    "seed_everything",
    "setup_notebook",
    "show_source",
    "html_table",
    "max_diff",
    "moving_average",
    "record",
    "__version__",
]
