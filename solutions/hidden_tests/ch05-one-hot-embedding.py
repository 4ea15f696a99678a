"""Hidden tests for ``ch05-one-hot-embedding`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch
from torch import nn

from course_lib.grading import fail, test
from course_lib.grading.expect import expect_close


@test("q2", points=1)
def keeps_double_precision(embed):
    """A float64 table gives float64 embeddings."""
    table = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(201))
    out = embed(table, torch.tensor([6, 0, 6]))
    if out.dtype != torch.float64:
        fail(f"hidden check: float64 table in, {out.dtype} out")
    expect_close("hidden check: embeddings", out, table[[6, 0, 6]], atol=1e-12)


@test("q3", points=1)
def gradient_of_a_single_token(table_gradient):
    """One token: the gradient is the output gradient in that row, zero elsewhere."""
    layer = nn.Embedding(5, 4)
    g = torch.randn(1, 4, generator=torch.Generator().manual_seed(202))
    layer(torch.tensor([3])).backward(g)
    expect_close(
        "hidden check: gradient", table_gradient(torch.tensor([3]), g, 5), layer.weight.grad
    )
