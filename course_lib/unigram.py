"""Unigram language-model tokenization (Kudo, 2018): SentencePiece's, hence XLM-R's
(Chapters 5 and 12).

Every piece has a probability and a word is cut into its *most probable*
segmentation, ``argmax_x sum_i log p(x_i)`` (Chapter 12, eq. 12.5), found by
Viterbi dynamic programming (:class:`UnigramTokenizer`); training
(:func:`train_unigram`) alternates EM re-estimation of the probabilities with
pruning of the least useful pieces.  Words come from
:func:`metaspace_pre_tokenize`: split at whitespace, each prefixed with
``SPACE`` ("▁"), so decoding is exact.  Byte-pair encoding and WordPiece are in
:mod:`course_lib.tokenization`.

Compatibility with Hugging Face ``tokenizers``.  Given the same pieces and
scores, ``tokenizers``' ``Unigram`` model segments every word as
:class:`UnigramTokenizer` does (same ids, unknown characters included); its
``UnigramTrainer`` (SentencePiece's algorithm) learns a different but largely
overlapping vocabulary, as the tests show.
"""

from __future__ import annotations

import gc
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from tqdm.auto import tqdm

__all__ = [
    "SPACE",
    "metaspace_pre_tokenize",
    "UnigramTokenizer",
    "train_unigram",
]

#: SentencePiece writes a space as this character ("▁", U+2581) and keeps it in
#: the pieces, so decoding is exact: join the pieces, turn "▁" back into spaces.
SPACE = "\u2581"

#: What an unknown character costs, below the lowest piece score (as in
#: SentencePiece and ``tokenizers``).
UNK_PENALTY = 10.0


def metaspace_pre_tokenize(text: str) -> list[str]:
    """SentencePiece's words: split at whitespace, each word prefixed with ``SPACE``.

    >>> metaspace_pre_tokenize("To be, or")
    ['▁To', '▁be,', '▁or']
    """
    return [SPACE + w for w in text.split()]


def _lattice(
    word: str, scores: Mapping[str, float], max_len: int, unk_score: float, skip: str | None = None
) -> list[list[tuple[int, str | None, float]]]:
    """``ends[j]``: every piece ``word[i:j]`` in ``scores`` as ``(i, piece, score)``.

    A character with no single-character piece gets an unknown edge
    ``(j - 1, None, unk_score)``, so every word has a segmentation.  ``skip``
    is left out (pruning asks how a piece would be segmented without itself).
    """
    ends: list[list[tuple[int, str | None, float]]] = [[] for _ in range(len(word) + 1)]
    for i in range(len(word)):
        if word[i] not in scores or word[i] == skip:
            ends[i + 1].append((i, None, unk_score))
        for j in range(i + 1, min(len(word), i + max_len) + 1):
            piece = word[i:j]
            if piece in scores and piece != skip:
                ends[j].append((i, piece, scores[piece]))
    return ends


def _viterbi(
    word: str, scores: Mapping[str, float], max_len: int, unk_score: float, skip: str | None = None
) -> tuple[list[str | None], float]:
    """The most probable segmentation of ``word`` and its log-probability.

    ``best[j]`` is the best log-probability of ``word[:j]``:
    ``best[j] = max over pieces word[i:j] of best[i] + log p(word[i:j])``, one
    pass left to right, then follow the choices back from the end.  Unknown
    characters come back as ``None``.
    """
    ends = _lattice(word, scores, max_len, unk_score, skip)
    best = [0.0] + [-math.inf] * len(word)
    back: list[tuple[int, str | None]] = [(0, None)] * (len(word) + 1)
    for j in range(1, len(word) + 1):
        for i, piece, s in ends[j]:  # first found wins a tie, as in tokenizers
            if best[i] + s > best[j]:
                best[j], back[j] = best[i] + s, (i, piece)
    pieces: list[str | None] = []
    j = len(word)
    while j > 0:
        i, piece = back[j]
        pieces.append(piece)
        j = i
    return pieces[::-1], best[-1]


@dataclass
class UnigramTokenizer:
    """A unigram language model over pieces: ``scores[piece] = log p(piece)``.

    A word's segmentation is the most probable one, ``argmax_x sum_i log p(x_i)``
    over all ways ``x`` of cutting it into known pieces (Viterbi,
    :meth:`tokenize_word`).  Ids: ``unk_token`` is 0, then the pieces in the
    order of ``scores``.  Made by :func:`train_unigram`; ``tokenizers``'
    ``models.Unigram(tok.vocab_with_scores(), unk_id=0)`` segments the same.
    """

    scores: dict[str, float]
    unk_token: str = "<unk>"
    vocab: dict[str, int] = field(init=False)
    _max_len: int = field(init=False, repr=False)
    _unk_score: float = field(init=False, repr=False)
    _cache: dict[str, list[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.scores:
            raise ValueError("UnigramTokenizer: scores is empty; give at least one piece")
        if not all(math.isfinite(s) for s in self.scores.values()):
            raise ValueError("UnigramTokenizer: every score must be a finite log-probability")
        if "" in self.scores:
            raise ValueError("UnigramTokenizer: the empty string is not a piece; remove it")
        if self.unk_token in self.scores:
            raise ValueError(
                f"UnigramTokenizer: {self.unk_token!r} is a special token, not a piece"
            )
        self.vocab = {self.unk_token: 0, **{p: i + 1 for i, p in enumerate(self.scores)}}
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self._max_len = max(map(len, self.scores))
        self._unk_score = min(self.scores.values()) - UNK_PENALTY
        self._cache = {}

    def __len__(self) -> int:
        return len(self.vocab)

    def vocab_with_scores(self) -> list[tuple[str, float]]:
        """``[(token, score), ...]`` in id order, as ``tokenizers.models.Unigram`` takes it."""
        return [(self.unk_token, 0.0), *self.scores.items()]

    def tokenize_word(self, word: str) -> list[str]:
        """The most probable segmentation of ``word`` (Viterbi); a run of unknown
        characters becomes one ``unk_token``."""
        if word not in self._cache:
            pieces, _ = _viterbi(word, self.scores, self._max_len, self._unk_score)
            out: list[str] = []
            for p in pieces:
                if p is not None:
                    out.append(p)
                elif not out or out[-1] != self.unk_token:  # fuse a run of unknowns
                    out.append(self.unk_token)
            self._cache[word] = out
        return self._cache[word]

    def score(self, word: str) -> float:
        """``log p`` of the best segmentation of ``word``: the sum of its pieces' scores."""
        return _viterbi(word, self.scores, self._max_len, self._unk_score)[1]

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text``, words cut by :func:`metaspace_pre_tokenize`."""
        return [p for w in metaspace_pre_tokenize(text) for p in self.tokenize_word(w)]

    def encode(self, text: str) -> list[int]:
        """The ids of the pieces of ``text``."""
        return [self.vocab[p] for p in self.tokenize(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Pieces joined, ``SPACE`` turned back into spaces (exact up to whitespace runs)."""
        return "".join(self.id_to_token[int(i)] for i in ids).replace(SPACE, " ").strip()


class _Lattices:
    """Every training word's lattice (:func:`_lattice`), built once and kept as the
    vocabulary shrinks, with pieces as integer ids: the same edges in the same
    order as a fresh :func:`_lattice`, so every sum below adds the same numbers in
    the same order as building each lattice anew (EM and pruning rebuilt them
    every round, most of the training time).

    ``words``: ``(count, ends)`` per word, ``ends[j]`` the ``(i, id)`` of the
    edges ending at ``j``; id ``unk = len(pieces)`` is the unknown edge.
    ``order``: the piece ids in the order a pass over the words first meets
    them; ``where[id]``: the words whose lattice holds the piece.
    """

    def __init__(self, counts: Mapping[str, int], scores: Mapping[str, float], max_len: int):
        self.pieces = list(scores)
        ids = {p: k for k, p in enumerate(self.pieces)}
        self.unk = unk = len(self.pieces)
        self.live = [True] * (unk + 1)
        self.words: list[tuple[int, list[list[tuple[int, int]]]]] = []
        self.where: dict[int, list[int]] = {}  # insertion order: first met
        for w, c in counts.items():  # _lattice's loops, with ids
            n = len(w)
            ends: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
            for i in range(n):
                if w[i] not in ids:
                    ends[i + 1].append((i, unk))
                for j in range(i + 1, min(n, i + max_len) + 1):
                    k = ids.get(w[i:j])
                    if k is not None:
                        ends[j].append((i, k))
            for e in ends:
                for _, k in e:
                    self.where.setdefault(k, []).append(len(self.words))
            self.words.append((c, ends))
        self.order = [k for k in self.where if k != unk]

    def shrink(self, scores: Mapping[str, float]) -> None:
        """Drop the edges of the pieces no longer in ``scores`` (which holds no new
        piece and every character: no new unknown edge)."""
        dead = [k for k, p in enumerate(self.pieces) if self.live[k] and p not in scores]
        if any(len(self.pieces[k]) == 1 for k in dead):
            raise ValueError("_Lattices.shrink: a character was dropped; build anew")
        live = self.live
        for k in dead:
            live[k] = False
        for x in set().union(*(self.where.get(k, ()) for k in dead)):
            c, ends = self.words[x]
            self.words[x] = (c, [[ik for ik in e if live[ik[1]]] for e in ends])
        # the survivors' first edges are still first: the same order, less the dead
        self.order = [k for k in self.order if live[k]]

    def piece_scores(self, scores: Mapping[str, float], unk: float) -> list[float]:
        """Scores by id (a dropped piece: nan, never read), the unknown edge's last."""
        return [scores.get(p, math.nan) for p in self.pieces] + [unk]


def _expected_counts(
    counts: Mapping[str, int],
    scores: Mapping[str, float],
    max_len: int,
    lattices: _Lattices | None = None,
) -> tuple[dict[str, float], float]:
    """E-step: the expected number of uses of each piece, and the corpus log-likelihood.

    For one word, ``alpha[j]`` (``beta[i]``) sums the probability of every
    segmentation of ``word[:j]`` (``word[i:]``), in log space; the piece
    ``word[i:j]`` is used with probability
    ``exp(alpha[i] + log p(piece) + beta[j] - alpha[n])`` (forward-backward).
    ``lattices``: the words' lattices under ``scores``, kept between rounds
    (built here if not given); :func:`_logsumexp` and :func:`_logaddexp` are
    written out in the loops, the same operations without the calls.
    """
    lat = _Lattices(counts, scores, max_len) if lattices is None else lattices
    sc = lat.piece_scores(scores, min(scores.values()) - UNK_PENALTY)
    exp, log, log1p, inf = math.exp, math.log, math.log1p, math.inf
    expected = [0.0] * len(sc)
    loglik = 0.0
    for count, ends in lat.words:
        n = len(ends) - 1
        alpha = [0.0] * (n + 1)
        for j in range(1, n + 1):  # alpha[j] = _logsumexp of its edges
            e = ends[j]
            if len(e) == 1:  # the logsumexp of one value: the value (hi + log 1)
                i, k = e[0]
                alpha[j] = alpha[i] + sc[k]
                continue
            v = [alpha[i] + sc[k] for i, k in e]
            hi = max(v)
            alpha[j] = hi + log(sum([exp(x - hi) for x in v])) if hi > -inf else hi
        beta = [-inf] * n + [0.0]
        for j in range(n, 0, -1):  # edges ending at j feed beta of their start
            bj = beta[j]
            for i, k in ends[j]:  # beta[i] = _logaddexp(beta[i], s + beta[j])
                a, b = beta[i], sc[k] + bj
                if a == -inf:
                    beta[i] = b
                else:
                    hi, lo = (b, a) if b > a else (a, b)
                    beta[i] = hi + log1p(exp(lo - hi))
        total = alpha[n]
        loglik += count * total
        for j in range(1, n + 1):
            bj = beta[j]
            for i, k in ends[j]:  # the unknown edge's share goes to expected[unk], unread
                expected[k] += count * exp(alpha[i] + sc[k] + bj - total)
    return {lat.pieces[k]: expected[k] for k in lat.order}, loglik


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    hi, lo = max(a, b), min(a, b)
    return hi + math.log1p(math.exp(lo - hi))


def _logsumexp(values: list[float]) -> float:
    hi = max(values)
    return hi + math.log(sum(math.exp(v - hi) for v in values)) if hi > -math.inf else hi


def _normalise(counts: Mapping[str, float]) -> dict[str, float]:
    """M-step: ``log p(piece) = log(count / total)``, most probable piece first."""
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {p: math.log(c / total) for p, c in ranked}


def _unigram_word_counts(text: str | Iterable[str] | Mapping[str, int]) -> dict[str, int]:
    """The words to train on, ``{word: count}``: given, or cut by :func:`metaspace_pre_tokenize`."""
    if isinstance(text, Mapping):
        return {w: c for w, c in text.items() if w}
    return dict(
        Counter(
            w
            for t in ([text] if isinstance(text, str) else text)
            for w in metaspace_pre_tokenize(t)
        )
    )


def _seed_pieces(
    counts: Mapping[str, int],
    vocab_size: int,
    seed_size: int | None,
    max_piece_length: int,
    unk_token: str,
) -> tuple[Counter[str], dict[str, float]]:
    """Step 1, the seed: every character, plus the ``seed_size`` most frequent longer
    substrings ranked by count times length; returns the character counts and the
    seed's scores ``log p`` from their counts."""
    chars: Counter[str] = Counter()
    subs: Counter[str] = Counter()
    for w, c in counts.items():
        for i in range(len(w)):
            chars[w[i]] += c
            for j in range(i + 2, min(len(w), i + max_piece_length) + 1):
                subs[w[i:j]] += c
    if len(chars) + 1 > vocab_size:
        raise ValueError(
            f"train_unigram: the text has {len(chars)} distinct characters, so vocab_size "
            f"must be at least {len(chars) + 1} (every character plus {unk_token!r})"
        )
    seed_size = 10 * vocab_size if seed_size is None else seed_size
    frequent = sorted((s for s, c in subs.items() if c >= 2), key=lambda s: (-subs[s] * len(s), s))
    return chars, _normalise({**chars, **{s: subs[s] for s in frequent[:seed_size]}})


def _em_round(
    counts: Mapping[str, int],
    scores: Mapping[str, float],
    chars: Iterable[str],
    max_piece_length: int,
    lattices: _Lattices | None = None,
) -> dict[str, float]:
    """Step 2, one EM round: expected uses of each piece (E), then ``log p`` (M)."""
    expected, _ = _expected_counts(counts, scores, max_piece_length, lattices)
    # a piece no segmentation uses drops out; characters always stay, with at least a
    # tiny share (an unused character's expected count can underflow to 0: log 0)
    kept = {p: e for p, e in expected.items() if e > 0}
    return _normalise({**{c: 1e-9 for c in chars}, **kept})


def _viterbi_uses(lat: _Lattices, scores: Mapping[str, float], unk: float) -> Counter[str]:
    """How often each piece is used in the words' Viterbi segmentations: :func:`_viterbi`
    on every lattice of ``lat`` (the same comparisons, first found wins a tie)."""
    sc = lat.piece_scores(scores, unk)
    uses: Counter[int] = Counter()
    for count, ends in lat.words:
        n = len(ends) - 1
        best = [0.0] + [-math.inf] * n
        back = [(0, lat.unk)] * (n + 1)
        for j in range(1, n + 1):
            for i, k in ends[j]:
                if best[i] + sc[k] > best[j]:
                    best[j], back[j] = best[i] + sc[k], (i, k)
        while n > 0:
            n, k = back[n]
            uses[k] += count
    uses.pop(lat.unk, None)
    return Counter({lat.pieces[k]: c for k, c in uses.items()})


def _prune(
    counts: Mapping[str, int],
    scores: Mapping[str, float],
    num_chars: int,
    target: int,
    shrinking_factor: float,
    max_piece_length: int,
    lattices: _Lattices | None = None,
) -> dict[str, float]:
    """Step 3: keep the pieces whose removal would cost the corpus the most likelihood.

    The loss of a piece is its uses in the Viterbi segmentations times the drop
    in log-probability when the piece is segmented without itself; characters
    always stay.  Keeps ``max(target, shrinking_factor * len(scores))`` pieces.
    ``lattices``: the words' lattices under ``scores`` (built here if not given).
    """
    unk = min(scores.values()) - UNK_PENALTY
    uses = _viterbi_uses(
        _Lattices(counts, scores, max_piece_length) if lattices is None else lattices,
        scores,
        unk,
    )
    loss = {}
    for p, s in scores.items():
        if len(p) == 1:
            continue
        _, alt_score = _viterbi(p, scores, max_piece_length, unk, skip=p)
        loss[p] = uses[p] * (s - alt_score)
    keep = max(target, int(len(scores) * shrinking_factor)) - num_chars
    survivors = set(sorted(loss, key=lambda p: (-loss[p], p))[:keep])
    return {p: s for p, s in scores.items() if len(p) == 1 or p in survivors}


def train_unigram(
    text: str | Iterable[str] | Mapping[str, int],
    vocab_size: int,
    *,
    seed_size: int | None = None,
    shrinking_factor: float = 0.75,
    em_iterations: int = 2,
    max_piece_length: int = 16,
    unk_token: str = "<unk>",
    progress: bool = False,
) -> UnigramTokenizer:
    """Learn a unigram LM vocabulary of ``vocab_size`` tokens (Kudo, 2018), simplified.

    ``text``: a string, several strings, or word counts ``{word: count}``
    (words already prefixed with ``SPACE`` by :func:`metaspace_pre_tokenize`).

    1. Seed: every character, plus the ``seed_size`` (default ``10 *
       vocab_size``) most frequent longer substrings of the words, ranked by
       count times length; ``log p`` from their counts.
    2. EM (``em_iterations`` rounds): expected uses of each piece under the
       current model (forward-backward over every segmentation), then
       ``log p = log(expected / total)``.
    3. Prune: the *loss* of a piece is how much the corpus log-likelihood
       drops if each of its uses in the Viterbi segmentations is replaced by
       the best segmentation of the piece without it (other scores fixed); keep
       the ``shrinking_factor`` share with the largest loss (characters
       always stay, so every word stays segmentable).  Back to 2 until the
       vocabulary (``unk_token`` included) has ``vocab_size`` tokens (or a
       few fewer: the EM rounds after the last pruning drop any piece that no
       segmentation uses any more).

    SentencePiece adds a Bayesian (digamma) M-step and a finer loss; the
    skeleton, EM then prune, is the same.
    """
    if vocab_size < 2:
        raise ValueError(f"train_unigram: vocab_size must be >= 2, got {vocab_size}")
    if not 0.0 < shrinking_factor < 1.0:
        raise ValueError(
            f"train_unigram: shrinking_factor must be in (0, 1), got {shrinking_factor}"
        )
    counts = _unigram_word_counts(text)
    chars, scores = _seed_pieces(counts, vocab_size, seed_size, max_piece_length, unk_token)  # 1.
    bar = tqdm(desc="Unigram EM + pruning", disable=not progress)
    with _no_gc():  # the lattices are a million objects for the collector to walk
        lattices = _Lattices(counts, scores, max_piece_length)  # kept, shrunk as pieces go
        while True:
            for _ in range(em_iterations):
                scores = _em_round(counts, scores, chars, max_piece_length, lattices)  # 2.
                lattices.shrink(scores)
                bar.update(1)
            target = vocab_size - 1  # the pieces, without unk_token
            if len(scores) <= target:
                break
            scores = _prune(
                counts, scores, len(chars), target, shrinking_factor, max_piece_length, lattices
            )  # 3.
            lattices.shrink(scores)
    bar.close()
    return UnigramTokenizer(scores, unk_token)


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused, then restored: training makes no cycles,
    and each collection would walk every list and tuple of the lattices again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
