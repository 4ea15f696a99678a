"""Counting a model's parameters, used from Chapter 1 on (the sizes of Chapters 4, 11 and 12).

Chapter 11's parameter-efficient fine-tuning (LoRA, adapters) compares the
trainable count with the total; elsewhere the total sizes a model.
"""

from __future__ import annotations

from torch import nn

__all__ = ["count_parameters"]


def count_parameters(model: nn.Module, trainable: bool = False) -> int:
    """Number of parameters (only those with ``requires_grad`` if ``trainable``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable)
