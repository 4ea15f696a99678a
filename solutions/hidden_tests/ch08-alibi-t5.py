"""Hidden tests for ``ch08-alibi-t5`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import fail, test


@test("q1", points=1)
def slopes_for_64_heads(alibi_slopes):
    """64 heads: the slopes 2^(-h/8), h = 1..64."""
    got = alibi_slopes(64)
    expected = torch.tensor([2 ** (-h / 8) for h in range(1, 65)])
    if got.shape != (64,) or not torch.allclose(got.float(), expected, rtol=1e-6):
        fail("hidden check: alibi_slopes(64) is wrong")


@test("q3", points=1)
def causal_future_is_bucket_zero(t5_bucket):
    """Causal mode: every key after the query is in bucket 0."""
    if not (t5_bucket(torch.arange(1, 50), False, 32, 128) == 0).all():
        fail("hidden check: future keys should all be in bucket 0 in causal mode")
