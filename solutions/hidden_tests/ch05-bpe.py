"""Hidden tests for ``ch05-bpe`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

from course_lib.grading import fail, test
from course_lib.tokenization import train_bpe


@test("q3", points=2)
def learns_the_merges_of_a_longer_text(learn_bpe):
    """On 20,000 characters of Tiny Shakespeare, the first 40 merges of the course's trainer."""
    from course_lib.data import tiny_shakespeare

    text = tiny_shakespeare()[:20000]
    counts = {}
    for w in text.split():
        counts[w] = counts.get(w, 0) + 1
    expected = train_bpe(counts, 1 + len({c for w in counts for c in w}) + 40).merges
    got = [tuple(m) for m in learn_bpe(counts, 40)]
    if got != expected:
        fail("hidden check: the merges differ from the reference on a longer text")


@test("q4", points=1)
def long_words_are_unknown(wordpiece):
    """A word longer than 100 characters is [UNK], like BERT's tokenizer."""
    if list(wordpiece("a" * 101, {"a": 0, "##a": 1, "[UNK]": 2})) != ["[UNK]"]:
        fail("hidden check: a 101-character word should be ['[UNK]']")
