"""course_lib.tokenization against Hugging Face tokenizers, and course_lib.embeddings (Chapter 5).

The BPE trainer must learn exactly the merges of ``tokenizers``' ``BpeTrainer``
on Tiny Shakespeare (same pre-tokenizer, no prefix), encode exactly as its
``BPE`` model, and agree with a naive recount-everything loop; WordPiece
segmentation must equal ``tokenizers``' ``WordPiece`` model on the same
vocabulary.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import cache

import pytest
import torch

from course_lib import embeddings as E
from course_lib.data import tiny_shakespeare
from course_lib.tokenization import (
    BPETokenizer,
    merge_pair,
    pre_tokenize,
    train_bpe,
    word_counts,
    wordpiece_tokenize,
)
from tests.conftest import deadline


@cache
def _corpus() -> tuple[str, str]:
    text = tiny_shakespeare()
    n = int(0.9 * len(text))
    return text[:n], text[n:]


def _hf_bpe(text: str, vocab_size: int, prefix: str | None = None):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    extra = {} if prefix is None else {"continuing_subword_prefix": prefix}
    tok = Tokenizer(models.BPE(unk_token="[UNK]", **extra))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=["[UNK]"],
        show_progress=False,
        **extra,
    )
    tok.train_from_iterator([text], trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]
    return tok, merges


@cache
def _ours(vocab_size: int, prefix: str = "") -> BPETokenizer:
    return train_bpe(_corpus()[0], vocab_size, continuing_subword_prefix=prefix)


@pytest.mark.parametrize("vocab_size", [300, 1500])
def test_bpe_matches_hf_tokenizers_on_tiny_shakespeare(vocab_size):
    train, valid = _corpus()
    tok, merges = _hf_bpe(train, vocab_size)
    ours = _ours(vocab_size)
    assert len(ours) == vocab_size
    assert ours.merges == merges  # same merges, in the same order
    assert ours.vocab == tok.get_vocab()  # same ids
    assert ours.encode(valid) == tok.encode(valid).ids  # same encoding of unseen text


def test_bpe_with_prefix_differs_from_hf_only_in_order():
    """With '##' both learn the same vocabulary and merges here, but tokenizers orders
    equally frequent merges in hash order, which changes from run to run (and with it,
    now and then, the tokenization of unseen text). So the sets are compared, and our
    encoder is compared with tokenizers' encoder given *our* merge order."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    train, valid = _corpus()
    tok, merges = _hf_bpe(train, 1000, prefix="##")
    ours = _ours(1000, "##")
    assert set(ours.vocab) == set(tok.get_vocab())
    assert set(ours.merges) == set(merges)
    same_merges = Tokenizer(
        models.BPE(
            vocab=dict(ours.vocab),
            merges=list(ours.merges),
            unk_token="[UNK]",
            continuing_subword_prefix="##",
        )
    )
    same_merges.pre_tokenizer = pre_tokenizers.Whitespace()
    assert ours.tokenize(valid) == same_merges.encode(valid).tokens


def _naive_bpe(counts: dict[str, int], vocab_size: int) -> list[tuple[str, str]]:
    """Recount every pair after every merge (Sennrich et al.'s loop)."""
    words = {tuple(w): c for w, c in counts.items()}
    alphabet = sorted({ch for w in counts for ch in w})
    ids = {t: i for i, t in enumerate(["[UNK]", *alphabet])}
    merges = []
    while len(ids) < vocab_size:
        pairs = Counter()
        for w, c in words.items():
            for p in zip(w, w[1:], strict=False):
                pairs[p] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], -ids[p[0]], -ids[p[1]]))
        if pairs[best] < 2:
            break
        merges.append(best)
        ids.setdefault(best[0] + best[1], len(ids))
        words = {tuple(merge_pair(list(w), best, best[0] + best[1])): c for w, c in words.items()}
    return merges


def test_truncated_equals_training_a_smaller_vocabulary():
    small = _ours(1500).truncated(300)
    assert small.merges == _ours(300).merges and small.vocab == _ours(300).vocab


def test_incremental_training_equals_the_naive_loop():
    counts = word_counts(_corpus()[1][:20000])
    assert train_bpe(counts, 250).merges == _naive_bpe(counts, 250)


def test_merge_pair_does_not_overlap():
    with deadline(5):  # a loop that never ends fails here, fast
        assert merge_pair(["a", "a", "a"], ("a", "a"), "aa") == ["aa", "a"]
        assert merge_pair(["a", "b", "a", "b"], ("a", "b"), "ab") == ["ab", "ab"]


def test_min_frequency_stops_training():
    with deadline(5):  # a loop that never ends fails here, fast
        tok = train_bpe("ab ab ab cd", 100, min_frequency=2)
        assert tok.merges == [("a", "b")]  # 'cd' occurs once


def test_unseen_characters_become_unk():
    ours = _ours(300)
    assert "é" not in ours.vocab
    assert ours.tokenize("café") == [*ours.tokenize_word("caf"), "[UNK]"]


def test_decode_with_prefix_restores_the_words():
    ours = _ours(1000, "##")
    text = "To be, or not to be: unsexed Bolingbroke!"
    assert ours.decode(ours.encode(text)) == " ".join(pre_tokenize(text))


def test_wordpiece_matches_hf_wordpiece():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = _ours(1000, "##").vocab
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    text = _corpus()[1] + " café naïve " + "x" * 120
    ours = [p for w in pre_tokenize(text) for p in wordpiece_tokenize(w, vocab)]
    assert ours == tok.encode(text).tokens


def test_wordpiece_greedy_longest_match():
    with deadline(5):  # a loop that never ends fails here, fast
        vocab = {"un", "##want", "##ed", "want", "##w", "##a", "##n", "##t", "##e", "##d"}
        assert wordpiece_tokenize("unwanted", vocab) == ["un", "##want", "##ed"]
        assert wordpiece_tokenize("unknown", vocab) == ["[UNK]"]  # no piece for 'k'
        assert wordpiece_tokenize("want", vocab, max_chars=3) == ["[UNK]"]


# ---------------------------------------------------------------------------
# embeddings
# ---------------------------------------------------------------------------


def test_lookup_equals_one_hot_product_and_nn_embedding():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(6, 3, generator=g)
    ids = torch.tensor([[5, 0, 2], [1, 1, 4]])
    ref = torch.nn.Embedding.from_pretrained(table)(ids)
    assert torch.equal(E.embedding_lookup(table, ids), ref)
    torch.testing.assert_close(E.one_hot_embedding(table, ids), ref)
    assert E.one_hot(torch.tensor(5), 6).tolist() == [0, 0, 0, 0, 0, 1]  # index 5 = 6th row


def test_lookup_gradient_touches_only_used_rows():
    table = torch.randn(6, 3, requires_grad=True)
    E.one_hot_embedding(table, torch.tensor([1, 4, 1])).sum().backward()
    assert table.grad[[0, 2, 3, 5]].abs().sum() == 0
    assert table.grad[1].tolist() == [2.0, 2.0, 2.0]  # used twice


def test_lookup_errors():
    with pytest.raises(ValueError, match=r"ids must lie in 0..5"):
        E.embedding_lookup(torch.zeros(6, 3), torch.tensor([6]))
    with pytest.raises(ValueError, match=r"table must be \[V, D\]"):
        E.one_hot_embedding(torch.zeros(6), torch.tensor([1]))


def test_ppmi_svd_finds_related_words():
    words = [w.lower() for w in pre_tokenize(tiny_shakespeare())]
    common = [w for w, _ in Counter(words).most_common(2000)]
    index = {w: i for i, w in enumerate(common)}
    ids = torch.tensor([index.get(w, len(common)) for w in words])
    threads = torch.get_num_threads()
    torch.set_num_threads(
        1
    )  # a small SVD: as fast on one thread, and not stalled by a busy machine
    try:
        vectors = E.ppmi_svd_embeddings(ids, len(common), dim=64)
    finally:
        torch.set_num_threads(threads)
    top, _ = E.nearest_neighbours(vectors, vectors[index["thou"]], k=6)
    assert {"thyself", "art", "dost"} <= {common[i] for i in top.tolist()}


# ---------------------------------------------------------------------------
# pre_tokenize against tokenizers' Whitespace, on arbitrary Unicode text
# ---------------------------------------------------------------------------


def _assigned(c: str) -> bool:
    """Characters both Unicode tables know: Python's (unicodedata) and the Rust regex's of
    `tokenizers`. A code point unassigned in either has no agreed category to match."""
    import unicodedata

    return unicodedata.category(c) not in ("Cn", "Cs", "Co")


@pytest.mark.parametrize(
    "text",
    ["½ x² ¾", "①②③ ⑴", "cafe\u0301 nai\u0308ve", "a\u200db\u200cc", "Ⓐⓑ 🄰", "x\u00a0y\u2028z",
     "\x1c\x1fa", "٣٤ ४२", "Ⅻ ⅻ", "snake_case", "«quoted» — dash",
     "ⓩ🅉 🅐🅩 🅰🆉 x🄰y x\u24b5y"],
)  # fmt: skip
def test_pre_tokenize_splits_unicode_as_tokenizers(text):
    """Cases where Python's \\w and \\s disagree with Unicode's (and tokenizers')."""
    from tokenizers.pre_tokenizers import Whitespace

    assert pre_tokenize(text) == [w for w, _ in Whitespace().pre_tokenize_str(text)]


def test_pre_tokenize_matches_tokenizers_on_arbitrary_text():
    """Property test: any text of assigned characters, every general category."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from tokenizers.pre_tokenizers import Whitespace

    whitespace = Whitespace()
    characters = st.characters(codec="utf-8").filter(_assigned)
    mixed = st.one_of(characters, st.sampled_from(list(" \t\n\u00a0\u3000ab_1,.!")))

    @settings(max_examples=2000, deadline=None, derandomize=True)
    @given(st.text(mixed, max_size=24))
    def check(text):
        assert pre_tokenize(text) == [w for w, _ in whitespace.pre_tokenize_str(text)]

    check()


def test_pre_tokenize_rejects_non_text():
    with pytest.raises(TypeError, match="takes a str"):
        pre_tokenize(b"bytes")


# ---------------------------------------------------------------------------
# gaps found by mutation testing (mutmut)
# ---------------------------------------------------------------------------


def test_word_counts_of_several_texts():
    assert word_counts(["to be, or", "to be"]) == Counter({"to": 2, "be": 2, ",": 1, "or": 1})
    assert word_counts("a a") == Counter({"a": 2})


def test_small_bpe_by_hand():
    """'low lower lowest' x counts: the merges and ids worked out by hand (Sennrich's example)."""
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    tok = train_bpe(counts, 15, unk_token="<u>")
    # characters in code-point order after <u>: d e i l n o r s t w -> ids 1..10
    assert list(tok.vocab)[:11] == ["<u>", "d", "e", "i", "l", "n", "o", "r", "s", "t", "w"]
    # pair counts: (e,s) 9, (s,t) 9, (l,o) 7, (o,w) 7, ... ties by smaller ids: (e,s) first
    assert tok.merges[:4] == [("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w")]
    assert tok.vocab["es"] == 11 and tok.vocab["low"] == 14 and len(tok) == 15
    assert tok.tokenize_word("lowest") == ["low", "est"]
    assert tok.tokenize_word("lowest") == ["low", "est"]  # from the cache
    assert tok.tokenize_word("x") == ["<u>"] and tok.tokenize_word("") == []
    assert tok.encode("lowest  low") == [14, tok.vocab["est"], 14]
    assert tok.decode(torch.tensor([14, tok.vocab["est"]])) == "low est"  # no prefix: spaces
    # min_frequency: a pair seen fewer times is never merged
    assert train_bpe(counts, 100, min_frequency=7).merges == [
        ("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w")
    ]  # fmt: skip
    assert train_bpe(counts, 100, min_frequency=10).merges == []
    assert train_bpe({"ab": 1, "": 5}, 100, min_frequency=1).merges == [("a", "b")]
    # a pair seen once appears after a merge: with min_frequency=1 it is merged too
    assert train_bpe({"abc": 1}, 100, min_frequency=1).merges == [("a", "b"), ("ab", "c")]
    # vocab_size counts the special token and the characters: nothing to merge
    assert train_bpe(counts, 5).merges == [] and len(train_bpe(counts, 5)) == 11


def test_bpe_errors_and_truncation_bounds():
    tok = train_bpe({"abab": 3, "ab": 2}, 10)
    assert tok.truncated(len(tok)).merges == tok.merges
    one = tok.truncated(1)
    assert one.vocab == {"[UNK]": 0} and one.merges == []
    assert tok.truncated(3).merges == [] and tok.truncated(4).merges == [("a", "b")]
    for bad in (0, len(tok) + 1):
        with pytest.raises(ValueError, match=rf"vocab_size must be in 1..{len(tok)}, got {bad}"):
            tok.truncated(bad)
    with pytest.raises(ValueError, match="vocab_size must be >= 1, got 0"):
        train_bpe("ab", 0)
    with pytest.raises(ValueError, match="min_frequency must be >= 1, got 0"):
        train_bpe("ab", 10, min_frequency=0)
    assert len(train_bpe("ab ab", 1)) == 3  # the alphabet always enters the vocabulary


def test_bpe_with_a_prefix_by_hand():
    tok = train_bpe({"abab": 3, "ba": 1}, 20, continuing_subword_prefix="##")
    # ids: [UNK], the characters (a, b), then the prefixed ones met inside words (##a, ##b)
    assert list(tok.vocab)[:5] == ["[UNK]", "a", "b", "##a", "##b"]
    assert tok.merges[0] == ("a", "##b") and tok.vocab["ab"] == 5
    assert tok.tokenize_word("abab") == ["abab"] and tok.tokenize_word("ba") == ["b", "##a"]
    assert tok.decode([5, 3, 1]) == "aba a"  # "##a" continues the word, "a" starts one
    small = tok.truncated(6)
    assert small.merges == [("a", "##b")] and small.continuing_subword_prefix == "##"
    assert small.tokenize_word("abab") == ["ab", "##a", "##b"]


def test_bpe_progress_bar(capsys):
    train_bpe({"abab": 3, "ab": 2}, 5, progress=True)
    err = capsys.readouterr().err
    assert "BPE merges" in err and "2/2" in err  # 3 tokens at the start, 2 merges to go
    train_bpe({"abab": 3}, 5)
    assert capsys.readouterr().err == ""
    train_bpe({"abab": 3}, 2, progress=True)  # the vocabulary is full from the start
    assert "BPE merges: 0it" in capsys.readouterr().err  # no total: tqdm counts up from 0


def test_wordpiece_options():
    with deadline(5):  # a loop that never ends fails here, fast
        vocab = {"ab": 0, "@@c": 1, "c": 2, "a": 3}
        assert wordpiece_tokenize("abc", vocab, prefix="@@") == ["ab", "@@c"]
        assert wordpiece_tokenize("abc", list(vocab), prefix="@@") == ["ab", "@@c"]
        assert wordpiece_tokenize("abc", vocab) == ["[UNK]"]  # "##c" is not in vocab
        assert wordpiece_tokenize("abd", vocab, prefix="@@", unk_token="<?>") == ["<?>"]
        assert wordpiece_tokenize("abc", vocab, prefix="@@", max_chars=3) == ["ab", "@@c"]
        assert wordpiece_tokenize("abcc", vocab, prefix="@@", max_chars=3) == ["[UNK]"]
        assert wordpiece_tokenize("", vocab) == []
        assert wordpiece_tokenize("c", vocab) == ["c"]
        assert wordpiece_tokenize("ac", vocab, prefix="@@") == ["a", "@@c"]  # inside: prefixed
        # a piece is never empty, even where the bare prefix is itself in the vocabulary
        assert wordpiece_tokenize("ab", {"a", "##"}) == ["[UNK]"]
        # BERT's max_input_chars_per_word is 100: a longer word is [UNK] whole
        letters = {"a", "##a"}
        assert wordpiece_tokenize("a" * 100, letters) == ["a"] + ["##a"] * 99
        assert wordpiece_tokenize("a" * 101, letters) == ["[UNK]"]


def test_truncation_keeps_the_unknown_token_and_wordpiece_takes_any_iterable():
    tok = train_bpe({"abab": 3, "ab": 2}, 10, unk_token="<u>")
    small = tok.truncated(4)
    assert small.unk_token == "<u>" and small.tokenize_word("abx") == ["ab", "<u>"]
    assert small.encode("abx") == [3, 0]
    # a vocabulary given as a one-shot iterator (a generator) is read once, into a set
    pieces = (p for p in ["ab", "##c", "a"])
    assert wordpiece_tokenize("abc", pieces) == ["ab", "##c"]


def test_word_characters_from_a_fresh_pattern():
    """word_pattern() is built once per process (functools.cache); build it again here
    from Unicode's tables, so that this test reads every character class afresh:
    letters and marks, decimal digits, letter numbers, connector punctuation, the
    joiners, the circled and squared letters at both ends of their ranges, inside a word
    (alone, a run of them is one token either way)."""
    from tokenizers.pre_tokenizers import Whitespace

    from course_lib import tokenization

    text = "a\u0301b ٣٤x Ⅻy snake_case a\u200db\u200cc xⒶⓩ🄰🅉🅐🅩🅰🆉y ½ x² ① «q» \x1c\x1f\u00a0\u2028\u3000z"
    tokenization.word_pattern.cache_clear()
    try:
        ours = pre_tokenize(text)
    finally:
        tokenization.word_pattern.cache_clear()
    assert ours == [w for w, _ in Whitespace().pre_tokenize_str(text)]
    assert tokenization._is_word_character(ord("_")) and not tokenization._is_word_character(0x24B5)


def test_loops_end_on_tiny_inputs():
    with deadline(5):
        assert merge_pair(["a", "b", "a", "b", "c"], ("a", "b"), "ab") == ["ab", "ab", "c"]
        assert merge_pair(["c", "a", "b"], ("a", "b"), "ab") == ["c", "ab"]
        assert merge_pair([], ("a", "b"), "ab") == []
        assert wordpiece_tokenize("abc", {"a", "##b", "##c"}) == ["a", "##b", "##c"]
        assert wordpiece_tokenize("abd", {"a", "##b"}) == ["[UNK]"]
        tok = BPETokenizer({"[UNK]": 0, "a": 1, "b": 2, "ab": 3}, [("a", "b")])
        assert tok.tokenize_word("abab") == ["ab", "ab"] and tok.tokenize_word("ba") == ["b", "a"]
        assert train_bpe({"abab": 2}, 10).merges == [("a", "b"), ("ab", "ab")]


def test_bpe_progress_bar_counts_the_merges(capsys):
    train_bpe({"abab": 3, "ab": 2}, 5, progress=True)
    assert re.search(r"\rBPE merges: 100%.*\| 2/2 ", capsys.readouterr().err)


def test_wordpiece_never_matches_an_empty_piece():
    """A vocabulary holding the bare prefix ("##") or "": an empty rest of the word is no
    piece, so "b" cannot be matched and the word is [UNK] (and the loop ends)."""
    with deadline(5):
        assert wordpiece_tokenize("ab", {"a", "##", ""}) == ["[UNK]"]


def test_merge_pair_and_wordpiece_loops_end():
    """The fastest tests of these two loops (mutmut runs the fastest test first), under
    the alarm: a loop that never ends fails here within seconds."""
    with deadline(5):
        assert merge_pair(["a", "b", "a", "b"], ("a", "b"), "ab") == ["ab", "ab"]
        assert merge_pair(["b", "a", "b"], ("a", "b"), "ab") == ["b", "ab"]
        assert wordpiece_tokenize("ab", {"a", "##b"}) == ["a", "##b"]
        assert wordpiece_tokenize("ba", {"a", "##b"}) == ["[UNK]"]
