"""course_lib.unigram against Hugging Face tokenizers (Chapters 5 and 12).

Viterbi segmentation must equal ``tokenizers``' ``Unigram`` model given the same
pieces and scores (on our vocabulary and on its trained one); our simplified
trainer must learn a vocabulary close to its ``UnigramTrainer``'s.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache

import pytest
import torch

from course_lib.data import tiny_shakespeare
from course_lib.unigram import (
    SPACE,
    UnigramTokenizer,
    metaspace_pre_tokenize,
    train_unigram,
)
from tests.conftest import deadline


@cache
def _corpus() -> tuple[str, str]:
    text = tiny_shakespeare()
    n = int(0.9 * len(text))
    return text[:n], text[n:]


# ---------------------------------------------------------------------------
# Unigram LM (SentencePiece, XLM-R): Viterbi against tokenizers' Unigram model
# ---------------------------------------------------------------------------


@cache
def _unigram_corpus() -> tuple[str, str]:
    train, valid = _corpus()
    return train[:100_000], valid[:30_000] + " café naïve ½½ x"


@cache
def _our_unigram() -> UnigramTokenizer:
    return train_unigram(_unigram_corpus()[0], 500)


@cache
def _hf_unigram():
    from tokenizers import Tokenizer, models, trainers

    tok = Tokenizer(models.Unigram())
    trainer = trainers.UnigramTrainer(
        vocab_size=500, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(metaspace_pre_tokenize(_unigram_corpus()[0]), trainer)
    return tok


def test_unigram_viterbi_matches_hf_on_our_vocabulary():
    """The same pieces and scores loaded into tokenizers' Unigram model segment every
    validation word the same way, unknown characters (fused) included."""
    from tokenizers import models

    ours = _our_unigram()
    assert len(ours) == 500
    theirs = models.Unigram(ours.vocab_with_scores(), unk_id=0, byte_fallback=False)
    for word in metaspace_pre_tokenize(_unigram_corpus()[1]):
        assert [t.id for t in theirs.tokenize(word)] == [
            ours.vocab[p] for p in ours.tokenize_word(word)
        ], word


def test_unigram_viterbi_matches_hf_on_its_trained_vocabulary():
    hf = _hf_unigram()
    vocab = json.loads(hf.to_str())["model"]["vocab"]
    assert vocab[0][0] == "<unk>"
    ours = UnigramTokenizer(dict((p, s) for p, s in vocab[1:]), "<unk>")
    for word in metaspace_pre_tokenize(_unigram_corpus()[1]):
        assert [t.id for t in hf.model.tokenize(word)] == [
            ours.vocab[p] for p in ours.tokenize_word(word)
        ], word


def test_unigram_training_is_close_to_hf_trainer():
    """Different trainers (SentencePiece's has a digamma M-step and a finer pruning loss),
    so not the same vocabulary; but most pieces are shared and the compression is close."""
    ours, hf = _our_unigram(), _hf_unigram()
    theirs = set(hf.get_vocab())
    assert len(set(ours.vocab) & theirs) / len(theirs) > 0.65
    words = metaspace_pre_tokenize(_unigram_corpus()[1])
    ours_per_word = sum(len(ours.tokenize_word(w)) for w in words) / len(words)
    hf_per_word = sum(len(hf.model.tokenize(w)) for w in words) / len(words)
    assert abs(ours_per_word / hf_per_word - 1) < 0.05


def _segmentations(word: str, pieces: set[str]):
    if not word:
        yield []
    for j in range(1, len(word) + 1):
        if word[:j] in pieces:
            for rest in _segmentations(word[j:], pieces):
                yield [word[:j], *rest]


def test_unigram_viterbi_is_the_best_segmentation():
    with deadline(5):  # a loop that never ends fails here, fast
        g = torch.Generator().manual_seed(0)
        pieces = ["a", "b", "c", "ab", "bc", "abc", "ca", "cab", "bca"]
        scores = dict(
            zip(pieces, (-5 * torch.rand(len(pieces), generator=g)).tolist(), strict=True)
        )
        tok = UnigramTokenizer(scores)
        for word in ["abcab", "cabca", "bcabcabc", "aaab"]:
            best = max(_segmentations(word, set(pieces)), key=lambda s: sum(scores[p] for p in s))
            assert tok.tokenize_word(word) == best
            assert tok.score(word) == pytest.approx(sum(scores[p] for p in best))


def test_unigram_round_trip_and_unknowns():
    ours = _our_unigram()
    text = "To be, or not to be:\n that is   the question."
    assert ours.decode(ours.encode(text)) == " ".join(text.split())
    assert all(ours.tokenize_word(w)[0].startswith(SPACE) for w in metaspace_pre_tokenize(text))
    assert ours.tokenize("½½") == [SPACE, "<unk>"]  # a run of unknown characters: one <unk>


def test_unigram_errors():
    with pytest.raises(ValueError, match=r"vocab_size must be at least"):
        train_unigram("abcdef abcdef", 4)
    with pytest.raises(ValueError, match=r"shrinking_factor must be in \(0, 1\)"):
        train_unigram("abc abc", 10, shrinking_factor=1.0)
    with pytest.raises(ValueError, match=r"special token, not a piece"):
        UnigramTokenizer({"<unk>": -1.0, "a": -1.0})


# ---------------------------------------------------------------------------
# the trainer's steps against brute force over every segmentation (small words)
# ---------------------------------------------------------------------------

import math  # noqa: E402

from course_lib import unigram as U  # noqa: E402

TOY = {"▁abab": 3, "▁ba": 2, "▁abba": 1, "▁b": 4}
TOY_SCORES = {"▁": -2.0, "a": -1.5, "b": -1.2, "ab": -1.0, "▁a": -2.5, "ba": -1.8, "▁ab": -3.0}


def _all_segmentations(word, pieces, max_len):
    if not word:
        yield []
    for j in range(1, min(len(word), max_len) + 1):
        if word[:j] in pieces:
            for rest in _all_segmentations(word[j:], pieces, max_len):
                yield [word[:j], *rest]


def test_expected_counts_equal_the_sum_over_every_segmentation():
    """E-step, forward-backward against the definition: every segmentation's probability
    (the product of its pieces'), normalised per word, times the uses of each piece."""
    for max_len in (3, 2):
        expected, loglik = U._expected_counts(TOY, TOY_SCORES, max_len)
        want, want_ll = Counter(), 0.0
        for word, count in TOY.items():
            segs = list(_all_segmentations(word, TOY_SCORES, max_len))
            probs = [math.exp(sum(TOY_SCORES[p] for p in s)) for s in segs]
            z = sum(probs)
            want_ll += count * math.log(z)
            for s, pr in zip(segs, probs, strict=True):
                for p in s:
                    want[p] += count * pr / z
        assert loglik == pytest.approx(want_ll, rel=1e-12)
        assert set(expected) == {p for p in want if want[p] > 0}
        for p in want:
            assert expected[p] == pytest.approx(want[p], rel=1e-12), (max_len, p)


def test_expected_counts_with_an_unknown_character():
    """A character with no piece is one unknown edge scored min(scores) - 10."""
    scores = {"a": -1.0, "b": -2.0, "ab": -1.5}
    expected, loglik = U._expected_counts({"axab": 2}, scores, 2)
    unk = -2.0 - U.UNK_PENALTY
    z_ab = math.exp(-1.5) + math.exp(-3.0)  # "ab" or "a" + "b"
    assert loglik == pytest.approx(2 * (-1.0 + unk + math.log(z_ab)), rel=1e-12)
    assert expected["ab"] == pytest.approx(2 * math.exp(-1.5) / z_ab, rel=1e-12)
    assert expected["b"] == pytest.approx(2 * math.exp(-3.0) / z_ab, rel=1e-12)
    assert expected["a"] == pytest.approx(2 + 2 * math.exp(-3.0) / z_ab, rel=1e-12)


def test_logaddexp_and_logsumexp():
    for a, b in ((0.5, -1.0), (-1.0, 0.5), (-math.inf, 2.0), (3.0, -math.inf), (1.0, 1.0)):
        assert U._logaddexp(a, b) == pytest.approx(math.log(math.exp(a) + math.exp(b)))
    assert U._logaddexp(-math.inf, -math.inf) == -math.inf
    values = [0.3, -2.0, 1.7]
    assert U._logsumexp(values) == pytest.approx(math.log(sum(map(math.exp, values))))
    assert U._logsumexp([-math.inf, -math.inf]) == -math.inf
    assert U._logsumexp([700.0, 700.0]) == pytest.approx(700 + math.log(2))  # no overflow


def test_normalise_is_log_of_the_share_most_probable_first():
    got = U._normalise({"b": 1.0, "a": 3.0, "c": 1.0})
    assert list(got) == ["a", "b", "c"]  # by count, then alphabetically
    assert got["a"] == pytest.approx(math.log(3 / 5)) and got["c"] == pytest.approx(math.log(1 / 5))


def test_word_counts_for_training():
    assert U._unigram_word_counts("to be or  to") == {"▁to": 2, "▁be": 1, "▁or": 1}
    assert U._unigram_word_counts(["a b", "a"]) == {"▁a": 2, "▁b": 1}
    assert U._unigram_word_counts({"▁a": 3, "": 2}) == {"▁a": 3}


def test_seed_pieces_count_every_substring():
    counts = {"▁abab": 2, "▁ab": 1, "▁cd": 1}
    chars, scores = U._seed_pieces(counts, 10, None, 3, "<unk>")
    assert chars == Counter({"▁": 4, "a": 5, "b": 5, "c": 1, "d": 1})
    # substrings of 2..3 characters seen at least twice, ranked by count * length
    subs = Counter()
    for w, c in counts.items():
        for i in range(len(w)):
            for j in range(i + 2, min(len(w), i + 3) + 1):
                subs[w[i:j]] += c
    frequent = {s: c for s, c in subs.items() if c >= 2}
    total = sum(chars.values()) + sum(frequent.values())
    assert scores == pytest.approx({p: math.log(c / total) for p, c in (chars | frequent).items()})
    # seed_size keeps the best-ranked: count x length ("ab" 5 x 2, "▁ab" 3 x 3, then three
    # at 6: "▁a" 3 x 2, "aba" and "bab" 2 x 3), ties in code-point order ("▁" is U+2581)
    for size, longer in ((1, {"ab"}), (2, {"ab", "▁ab"}), (3, {"ab", "▁ab", "aba"})):
        _, seeded = U._seed_pieces(counts, 10, size, 3, "<unk>")
        assert set(seeded) == set(chars) | longer, size
    # the default seed size is 10 * vocab_size substrings
    g = torch.Generator().manual_seed(0)
    words = [
        "▁" + "".join("ab"[k] for k in torch.randint(2, (12,), generator=g)) for _ in range(30)
    ]
    many = {w: 2 for w in words}
    chars, scores = U._seed_pieces(many, 4, None, 12, "<unk>")
    assert len(chars) == 3 and len(scores) == 3 + 40
    with pytest.raises(
        ValueError, match="the text has 3 distinct characters, so vocab_size must be at least 4"
    ):
        U._seed_pieces(many, 3, None, 12, "<unk>")


def _best(word, scores, max_len):
    segs = list(_all_segmentations(word, scores, max_len))
    return max(segs, key=lambda s: sum(scores[p] for p in s))


def test_em_round_and_prune_against_brute_force():
    chars = ["▁", "a", "b", "c"]  # "c" occurs in no word: kept anyway, with a tiny share
    scores = TOY_SCORES | {"c": -4.0, "cc": -4.0}  # "cc": no segmentation uses it, dropped
    new = U._em_round(TOY, scores, chars, 3)
    want = Counter()
    for word, count in TOY.items():
        segs = list(_all_segmentations(word, scores, 3))
        probs = [math.exp(sum(scores[p] for p in s)) for s in segs]
        for s, pr in zip(segs, probs, strict=True):
            for p in s:
                want[p] += count * pr / sum(probs)
    want["c"] = 1e-9
    total = sum(want.values())
    assert new == pytest.approx({p: math.log(c / total) for p, c in want.items()}, rel=1e-12)
    assert list(new) == sorted(want, key=lambda p: (-want[p], p))
    # prune: the loss of a piece is its Viterbi uses times the score it loses when the
    # piece must be cut without itself; characters stay, the largest losses are kept
    uses = Counter()
    for word, count in TOY.items():
        for p in _best(word, new, 3):
            uses[p] += count
    loss = {}
    for p, s in new.items():
        if len(p) > 1:
            alt = _best(p, {q: t for q, t in new.items() if q != p}, 3)
            loss[p] = uses[p] * (s - sum(new[q] for q in alt))
    ranked = sorted(loss, key=lambda p: (-loss[p], p))
    for target, factor, keep in ((6, 0.5, 2), (4, 0.9, 3), (7, 0.1, 3), (8, 0.1, 4)):
        pruned = U._prune(TOY, new, 4, target, factor, 3)
        assert set(pruned) == set(chars) | set(ranked[:keep]), (target, factor)
        assert pruned == {p: new[p] for p in pruned}  # scores unchanged, order kept


def test_tokenizer_ids_scores_and_unknowns():
    with deadline(5):  # a loop that never ends fails here, fast
        tok = U.UnigramTokenizer({"a": -1.0, "b": -3.0, "ab": -3.5})
        assert tok.vocab == {"<unk>": 0, "a": 1, "b": 2, "ab": 3} and len(tok) == 4
        assert tok.vocab_with_scores() == [("<unk>", 0.0), ("a", -1.0), ("b", -3.0), ("ab", -3.5)]
        # an unknown character costs 10 below the lowest piece (SentencePiece's penalty)
        assert tok.score("ax") == pytest.approx(-1.0 + (-3.5 - 10.0))
        assert tok.score("xx") == pytest.approx(2 * (-13.5))
        assert tok.score("ab") == pytest.approx(-3.5)  # "ab" beats "a" + "b" (-4)
        assert tok.tokenize_word("axxa") == ["a", "<unk>", "a"]  # a run of unknowns: one
        assert tok.tokenize_word("xaxbx") == ["<unk>", "a", "<unk>", "b", "<unk>"]
        assert tok.tokenize_word("xaxbx") == ["<unk>", "a", "<unk>", "b", "<unk>"]  # cached
        spaced = U.UnigramTokenizer({SPACE: -1.0, "a": -1.0, SPACE + "a": -1.5})
        assert spaced.encode(" a  aa ") == [3, 3, 2]
        assert spaced.decode([3, 3, 2]) == "a aa"
        assert spaced.decode(torch.tensor([1, 2])) == "a"  # leading space stripped
        with pytest.raises(ValueError, match="scores is empty"):
            U.UnigramTokenizer({})
        assert U.UnigramTokenizer({"a": -1.0}, unk_token="[UNK]").vocab == {"[UNK]": 0, "a": 1}


def test_train_unigram_on_a_small_corpus():
    """Every character stays, the vocabulary has at most the size asked for (the last EM
    rounds can drop a piece no segmentation uses any more), the scores are a
    probability distribution (the last step is an EM round), and training only
    prunes: every final piece was in the seed."""
    text = "the cat sat on the mat; the cat ate the rat " * 3 + "a bat and a hat"
    for size in (25, 30):
        tok = train_unigram(text, size)
        chars = {c for w in metaspace_pre_tokenize(text) for c in w}
        assert size - 3 <= len(tok) <= size and chars <= set(tok.scores)
        assert sum(math.exp(s) for s in tok.scores.values()) == pytest.approx(1.0)
        _, seed = U._seed_pieces(U._unigram_word_counts(text), size, None, 16, "<unk>")
        assert set(tok.scores) <= set(seed)
    # the same words given as counts train the same tokenizer
    counts = Counter(metaspace_pre_tokenize(text))
    assert train_unigram(dict(counts), 25).scores == train_unigram(text, 25).scores
    # no pruning needed: the seed is small enough, only EM rounds run
    tok = train_unigram("ab ab", 10)
    assert set(tok.scores) == {"▁", "a", "b", "▁a", "▁ab", "ab"}
    with pytest.raises(ValueError, match="vocab_size must be >= 2, got 1"):
        train_unigram("ab", 1)
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"shrinking_factor must be in \(0, 1\)"):
            train_unigram("ab", 10, shrinking_factor=bad)


def test_ties_go_to_the_first_segmentation_found_as_in_tokenizers():
    with deadline(5):  # a loop that never ends fails here, fast
        from tokenizers import models

        tok = U.UnigramTokenizer({"a": -1.0, "b": -1.0, "ab": -2.0, "ba": -2.0})
        hf = models.Unigram(tok.vocab_with_scores(), unk_id=0, byte_fallback=False)
        for word, ours in (("ab", ["ab"]), ("aba", ["a", "ba"]), ("bab", ["b", "ab"])):
            assert tok.tokenize_word(word) == ours == [t.value for t in hf.tokenize(word)]
        with pytest.raises(ValueError, match="the empty string is not a piece"):
            U.UnigramTokenizer({"a": -1.0, "": -2.0})


def test_train_unigram_defaults_are_sentencepieces(capsys):
    """SentencePiece's trainer defaults (Kudo & Richardson, 2018; trainer_spec.proto):
    max_piece_length 16, shrinking_factor 0.75, num_sub_iterations (EM rounds) 2."""
    text = "the cat sat on the mat; the cat ate the rat " * 3 + "a bat and a hat"
    explicit = train_unigram(text, 25, em_iterations=2, shrinking_factor=0.75)
    assert train_unigram(text, 25).scores == explicit.scores
    assert train_unigram(text, 25, em_iterations=3).scores != explicit.scores  # it matters
    long_words = "abcdefghijklmnopqrstu " * 5 + "abc"
    assert max(map(len, train_unigram(long_words, 60).scores)) == 16
    assert max(map(len, train_unigram(long_words, 60, max_piece_length=17).scores)) == 17
    assert capsys.readouterr().err == ""  # no progress bar unless asked
    tok = train_unigram("ab ab", 10, progress=True, unk_token="[?]")
    assert "Unigram EM + pruning" in capsys.readouterr().err
    assert tok.vocab["[?]"] == 0 and U.UnigramTokenizer({"a": -1.0}).unk_token == "<unk>"


def test_loops_end_on_tiny_inputs():
    with deadline(5):
        assert U._viterbi("ab", {"a": -1.0, "b": -1.0}, 1, -20.0) == (["a", "b"], -2.0)
        assert U._viterbi("", {"a": -1.0}, 1, -20.0) == ([], 0.0)
        tok = train_unigram("ab ab ba", 6)
        assert len(tok) <= 6 and {"▁", "a", "b"} <= set(tok.scores)


def test_train_unigram_smallest_vocabulary_and_default_unk_token():
    """Two tokens: the unknown token and the one character of the words given as counts."""
    with deadline(5):  # a loop that never ends fails here, fast
        tok = train_unigram({"aa": 3}, 2)
        assert tok.vocab == {"<unk>": 0, "a": 1} and tok.tokenize_word("ab") == ["a", "<unk>"]
        with pytest.raises(ValueError, match="vocab_size must be >= 2, got 1"):
            train_unigram({"aa": 3}, 1)


def test_train_unigram_seed_size_progress_and_messages(capsys):
    text = "the cat sat on the mat; the cat ate the rat " * 3
    chars = {c for w in metaspace_pre_tokenize(text) for c in w}
    assert set(train_unigram(text, 30, seed_size=0).scores) == chars  # no longer piece seeded
    assert set(train_unigram(text, 30, seed_size=5).scores) != chars
    train_unigram("ab ab", 10, progress=True)  # two EM rounds, no pruning needed
    assert "\rUnigram EM + pruning: 2it " in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"every character plus '\[\?\]'"):
        train_unigram("abcdef abcdef", 4, unk_token="[?]")


def test_prune_counts_every_use_of_a_piece():
    """'ab' is used 3 times ("ab" once, "abab" twice), 'cd' twice ("cd" x 2); both lose 3
    nats per use without themselves: losses 9 and 6, so 'ab' is the one kept."""
    scores = {"ab": -1.0, "cd": -1.0, "a": -2.0, "b": -2.0, "c": -2.0, "d": -2.0}
    pruned = U._prune({"ab": 1, "abab": 1, "cd": 2}, scores, 4, 5, 0.1, 2)
    assert set(pruned) == {"a", "b", "c", "d", "ab"}


def test_normalise_breaks_ties_alphabetically_and_scores_must_be_finite():
    assert list(U._normalise({"c": 1.0, "a": 3.0, "b": 1.0})) == ["a", "b", "c"]
    for bad in (-math.inf, math.nan):
        with pytest.raises(ValueError, match="every score must be a finite log-probability"):
            U.UnigramTokenizer({"a": -1.0, "b": bad})


def test_viterbi_loop_ends():
    """The fastest test of Viterbi (mutmut runs the fastest test first), under the alarm."""
    with deadline(5):
        assert U._viterbi("ab", {"a": -1.0, "b": -2.0, "ab": -2.5}, 2, -20.0) == (["ab"], -2.5)


# ---------------------------------------------------------------------------
# the lattices kept across rounds: the same numbers as lattices built anew
# ---------------------------------------------------------------------------


def _rebuilt_uses(counts, scores, max_len):
    """Viterbi uses the way training counted them before the lattices were kept."""
    unk = min(scores.values()) - U.UNK_PENALTY
    uses = Counter()
    for w, c in counts.items():
        for p in U._viterbi(w, scores, max_len, unk)[0]:
            if p is not None:
                uses[p] += c
    return uses


def test_kept_lattices_give_what_fresh_lattices_give():
    """train_unigram builds each word's lattice once and drops the edges of pruned pieces;
    every E-step and every pruning must see exactly what a lattice built anew from the
    current scores gives: the same expected counts in the same order, bit for bit (the
    same sums in the same order), and the same Viterbi uses."""
    counts = U._unigram_word_counts(_corpus()[0][:10_000])
    chars, scores = U._seed_pieces(counts, 150, None, 8, "<unk>")
    kept = U._Lattices(counts, scores, 8)
    for _ in range(4):  # four rounds of EM, EM, prune
        for _ in range(2):
            got = U._expected_counts(counts, scores, 8, kept)
            want = U._expected_counts(counts, scores, 8)
            assert list(got[0].items()) == list(want[0].items()) and got[1] == want[1]
            scores = U._em_round(counts, scores, chars, 8, kept)
            kept.shrink(scores)
        uses = U._viterbi_uses(kept, scores, min(scores.values()) - U.UNK_PENALTY)
        assert uses == _rebuilt_uses(counts, scores, 8)
        pruned = U._prune(counts, scores, len(chars), 149, 0.75, 8, kept)
        assert pruned == U._prune(counts, scores, len(chars), 149, 0.75, 8)
        scores = pruned
        kept.shrink(scores)
        fresh = U._Lattices(counts, scores, 8)
        # the ids differ (fresh numbers only the pieces left): compare the pieces
        assert [[[(i, kept.pieces[k]) for i, k in e] for e in ends] for _, ends in kept.words] == [
            [[(i, fresh.pieces[k]) for i, k in e] for e in ends] for _, ends in fresh.words
        ]
        assert [kept.pieces[k] for k in kept.order] == [fresh.pieces[k] for k in fresh.order]


def test_kept_lattices_unknown_edges_and_unused_pieces():
    """An unknown character keeps its edge; a piece in no word can be dropped; dropping a
    character would need new unknown edges, so shrink refuses it."""
    scores = {"a": -1.0, "b": -2.0, "ab": -1.5, "cc": -3.0}
    kept = U._Lattices({"axab": 2}, scores, 2)
    assert [
        [(i, kept.pieces[k] if k != kept.unk else None) for i, k in e] for e in kept.words[0][1]
    ] == [[], [(0, "a")], [(1, None)], [(2, "a")], [(2, "ab"), (3, "b")]]
    assert [kept.pieces[k] for k in kept.order] == ["a", "ab", "b"]  # as first met
    fewer = {"a": -1.0, "b": -2.0, "ab": -1.5}
    kept.shrink(fewer)  # "cc" is in no lattice
    assert U._expected_counts({"axab": 2}, fewer, 2, kept) == U._expected_counts(
        {"axab": 2}, fewer, 2
    )
    kept.shrink({"a": -1.0, "b": -2.0})
    assert kept.words[0][1][4] == [(3, kept.pieces.index("b"))]
    with pytest.raises(ValueError, match="a character was dropped; build anew"):
        kept.shrink({"a": -1.0})


def test_train_unigram_vocabulary_unchanged_by_kept_lattices():
    """The 500 pieces learned from the test corpus, as the trainer that rebuilt every
    lattice each round learned them (course_lib 0.7.0): sha256 of the sorted pieces."""
    import hashlib

    pieces = "\n".join(sorted(_our_unigram().scores))
    assert hashlib.sha256(pieces.encode()).hexdigest()[:16] == "861b57a1ad1fb348"
