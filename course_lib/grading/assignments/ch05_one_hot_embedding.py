"""Visible tests of exercise ``ch05-one-hot-embedding``: lookup as a one-hot product (chapter 5).

Results are compared with ``torch.nn.functional.one_hot`` and with
``torch.nn.Embedding`` (values and, through autograd, gradients), using fixed
seeds on the CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.grading.expect import expect_close, expect_tensor
from course_lib.grading.registry import test

ASSIGNMENT = "ch05-one-hot-embedding"
TITLE = "Embedding lookup as a one-hot product"


def _ids(shape: tuple[int, ...], vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(vocab, shape, generator=torch.Generator().manual_seed(seed))


@test("q1", points=1)
def one_hot_of_a_vector_of_ids(one_hot):
    """one_hot(ids [N], V) is a float tensor (N, V) with a single 1 per row"""
    ids = torch.tensor([5, 0, 2, 5])
    got = expect_tensor("one_hot(ids, 6)", one_hot(ids, 6), shape=(4, 6))
    expect_close("one_hot(ids, 6)", got, F.one_hot(ids, 6).float(), atol=0, rtol=0)


@test("q1", points=1)
def one_hot_of_a_batch_of_sequences(one_hot):
    """one_hot(ids [B, T], V) has shape (B, T, V)"""
    ids = _ids((3, 7), 11, seed=1)
    got = expect_tensor("one_hot(ids, 11)", one_hot(ids, 11), shape=(3, 7, 11))
    expect_close("one_hot(ids, 11)", got, F.one_hot(ids, 11).float(), atol=0, rtol=0)


@test("q2", points=2)
def embed_matches_nn_embedding(embed):
    """embed(table, ids) equals torch.nn.Embedding with the same table"""
    g = torch.Generator().manual_seed(2)
    table = torch.randn(13, 5, generator=g)
    ids = _ids((4, 6), 13, seed=3)
    with torch.no_grad():
        expected = nn.Embedding.from_pretrained(table)(ids)
        got = embed(table, ids)
    expect_close("embed(table, ids)", got, expected, context="table (13, 5), ids (4, 6)")


@test("q2", points=1)
def embed_is_differentiable_like_nn_embedding(embed):
    """the gradient of a loss with respect to the table equals nn.Embedding's"""
    g = torch.Generator().manual_seed(4)
    table = torch.randn(9, 4, generator=g)
    ids = _ids((2, 5), 9, seed=5)
    layer = nn.Embedding.from_pretrained(table.clone(), freeze=False)
    layer(ids).pow(2).sum().backward()
    ours = table.clone().requires_grad_(True)
    embed(ours, ids).pow(2).sum().backward()
    expect_close("the gradient of the table", ours.grad, layer.weight.grad)


@test("q3", points=2)
def table_gradient_matches_autograd(table_gradient):
    """table_gradient(ids, grad_output, V) equals autograd through nn.Embedding"""
    g = torch.Generator().manual_seed(6)
    vocab, d = 10, 3
    ids = _ids((4, 8), vocab, seed=7)
    grad_output = torch.randn(4, 8, d, generator=g)
    layer = nn.Embedding(vocab, d)
    layer(ids).backward(grad_output)
    got = table_gradient(ids, grad_output, vocab)
    expect_close("table_gradient", got, layer.weight.grad, context="ids (4, 8), V 10, d 3")


@test("q3", points=1)
def unused_rows_get_no_gradient(table_gradient):
    """rows of tokens that do not occur get an exactly zero gradient"""
    ids = torch.tensor([[1, 4, 1]])
    grad_output = torch.ones(1, 3, 2)
    got = expect_tensor("table_gradient", table_gradient(ids, grad_output, 6), shape=(6, 2))
    expected = torch.zeros(6, 2)
    expected[1], expected[4] = 2.0, 1.0
    expect_close("table_gradient", got, expected, atol=0, rtol=0, context="ids [[1, 4, 1]]")
