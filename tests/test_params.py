"""Counting a model's parameters, all of them or only the trainable ones.

Covers course_lib.params.
"""

from __future__ import annotations

from torch import nn

from course_lib.params import count_parameters


def test_count_parameters_all_or_trainable_only():
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))  # 4*3+3 and 3*2+2
    assert count_parameters(model) == count_parameters(model, trainable=True) == 15 + 8
    model[0].requires_grad_(False)
    assert count_parameters(model) == 23 and count_parameters(model, trainable=True) == 8
