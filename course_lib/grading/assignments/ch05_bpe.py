"""Visible tests of exercise ``ch05-bpe``: byte-pair encoding and WordPiece (chapter 5).

Pair counts and merges are checked on small hand-made inputs; the learned
merges against Hugging Face ``tokenizers``' ``BpeTrainer`` and the greedy
segmentation against its ``WordPiece`` model, on fixed texts.
"""

from __future__ import annotations

import json

from course_lib.grading.expect import fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch05-bpe"
TITLE = "Byte-pair encoding and WordPiece, from scratch"

TEXT = (
    "low lower lowest newer newest wider widest low low lower newest newest "
    "the quick brown fox jumps over the lazy dog and the dog sleeps "
    "to be or not to be that is the question whether tis nobler in the mind "
)


def _hf_merges(text: str, num_merges: int) -> list[tuple[str, str]]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    alphabet = {c for c in text if not c.isspace()}
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=1 + len(alphabet) + num_merges,
        min_frequency=2,
        special_tokens=["[UNK]"],
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]


def _counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for w in text.split():
        counts[w] = counts.get(w, 0) + 1
    return counts


@test("q1", points=2)
def counts_adjacent_pairs_weighted_by_word_counts(count_pairs):
    """count_pairs counts every adjacent pair, times the word's count"""
    words = {("l", "o", "w"): 5, ("l", "o", "w", "e", "r"): 2, ("a", "a", "a"): 1}
    got = count_pairs(words)
    expected = {("l", "o"): 7, ("o", "w"): 7, ("w", "e"): 2, ("e", "r"): 2, ("a", "a"): 2}
    got = {tuple(k): v for k, v in dict(got).items() if v}
    if got != expected:
        fail(f"count_pairs({words}) should be {expected}, got {got}")


@test("q2", points=2)
def merges_every_occurrence_left_to_right(merge):
    """merge replaces every occurrence of the pair, left to right, without overlaps"""
    cases = [
        (["l", "o", "w", "e", "r"], ("l", "o"), ["lo", "w", "e", "r"]),
        (["a", "b", "a", "b"], ("a", "b"), ["ab", "ab"]),
        (["a", "a", "a"], ("a", "a"), ["aa", "a"]),
        (["x", "y"], ("y", "x"), ["x", "y"]),
    ]
    for symbols, pair, expected in cases:
        got = list(merge(list(symbols), pair))
        if got != expected:
            fail(f"merge({symbols}, {pair}) should be {expected}, got {got}")


@test("q3", points=3)
def learns_the_merges_of_hf_tokenizers(learn_bpe):
    """learn_bpe learns the same merges, in the same order, as tokenizers' BpeTrainer"""
    for num_merges in (5, 20):
        got = [tuple(m) for m in learn_bpe(_counts(TEXT), num_merges)]
        expected = _hf_merges(TEXT, num_merges)
        if got != expected:
            first = next(
                (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
                min(len(got), len(expected)),
            )
            fail(
                f"with {num_merges} merges, merge {first + 1} differs: expected "
                f"{expected[first] if first < len(expected) else 'no more merges'}, got "
                f"{got[first] if first < len(got) else 'no more merges'} "
                f"(expected list: {expected})"
            )


@test("q3", points=1)
def stops_when_no_pair_occurs_twice(learn_bpe):
    """learn_bpe stops early when the most frequent pair occurs only once"""
    got = [tuple(m) for m in learn_bpe({"ab": 3, "cd": 1}, 10)]
    if got != [("a", "b")]:
        fail(f"learn_bpe({{'ab': 3, 'cd': 1}}, 10) should be [('a', 'b')], got {got}")


@test("q4", points=2)
def segments_like_hf_wordpiece(wordpiece):
    """wordpiece segments words like tokenizers' WordPiece model"""
    from tokenizers import models

    vocab = {
        "[UNK]": 0,
        "un": 1,
        "##want": 2,
        "##ed": 3,
        "want": 4,
        "##w": 5,
        "##a": 6,
        "##n": 7,
        "##t": 8,
        "##e": 9,
        "##d": 10,
        "a": 11,
        "##un": 12,
        "d": 13,
    }
    model = models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100)
    for word in ("unwanted", "wanted", "unknown", "a", "dunwant", "want", "aunt"):
        expected = [t.value for t in model.tokenize(word)]
        got = list(wordpiece(word, vocab))
        if got != expected:
            fail(f"wordpiece({word!r}) should be {expected}, got {got}")
