"""course_lib.unigram against Hugging Face tokenizers (Chapters 5 and 12).

Viterbi segmentation must equal ``tokenizers``' ``Unigram`` model given the same
pieces and scores (on our vocabulary and on its trained one); our simplified
trainer must learn a vocabulary close to its ``UnigramTrainer``'s.
"""

from __future__ import annotations

import json
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
    g = torch.Generator().manual_seed(0)
    pieces = ["a", "b", "c", "ab", "bc", "abc", "ca", "cab", "bca"]
    scores = dict(zip(pieces, (-5 * torch.rand(len(pieces), generator=g)).tolist(), strict=True))
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
