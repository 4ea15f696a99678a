"""Subword tokenization written for teaching: BPE, WordPiece and Unigram (Chapters 5 and 12).

A model reads integers, so text is cut into *tokens* from a fixed vocabulary.
Whole words leave every unseen word out of the vocabulary (out-of-vocabulary,
OOV); single characters make sequences long.  Subword methods sit between:

* **BPE** (Sennrich et al., 2016), :func:`train_bpe`: start from the
  characters, and repeatedly merge the most frequent adjacent pair of symbols
  into a new symbol, until the vocabulary has the size asked for.  A word is
  encoded by replaying the merges in the order they were learned
  (:meth:`BPETokenizer.tokenize_word`).  Any word made of known characters is
  encoded, so only unseen *characters* become ``[UNK]``.
* **WordPiece segmentation** (BERT's), :func:`wordpiece_tokenize`: given a
  vocabulary whose word-internal pieces carry a prefix (``"##ing"``), cut a word
  greedily, longest known piece first, from the left; if some part cannot be
  matched the whole word is ``[UNK]``.
* **Unigram language model** (Kudo, 2018; SentencePiece's, hence XLM-R's),
  :class:`UnigramTokenizer` and :func:`train_unigram`: every piece has a
  probability and a word is cut into its *most probable* segmentation,
  ``argmax_x sum_i log p(x_i)`` (Chapter 12, eq. 12.5), found by Viterbi
  dynamic programming; training alternates EM re-estimation of the
  probabilities with pruning of the least useful pieces.  Words come from
  :func:`metaspace_pre_tokenize`: split at whitespace, each prefixed with
  ``SPACE`` ("▁"), so decoding is exact.

Compatibility with Hugging Face ``tokenizers``.  With the same settings --
words split by the ``Whitespace`` pre-tokenizer (regex ``\\w+|[^\\w\\s]+``),
``[UNK]`` as the only special token, no prefix or suffix -- :func:`train_bpe`
learns *exactly* the merges of ``tokenizers``' ``BpeTrainer`` and
:meth:`BPETokenizer.encode` gives the same ids as its ``BPE`` model (the tests
check this on Tiny Shakespeare).  That needs the same tie-break: among pairs
with the highest count, the pair whose two token ids are smallest
(lexicographically) wins, where characters get ids in code-point order after
the special token and merged tokens get the next free id.  With a
``continuing_subword_prefix``, ``tokenizers`` gives the prefixed characters
ids in the order it meets them in a hash map, so its ties (and hence some
merges) can change from run to run; ours stay in code-point order.  The
``WordPiece`` *model* of ``tokenizers`` segments exactly as
:func:`wordpiece_tokenize` (also tested); its ``WordPieceTrainer`` is a BPE
trainer with a prefix, not BERT's likelihood-based one.  Given the same
pieces and scores, ``tokenizers``' ``Unigram`` model segments every word as
:class:`UnigramTokenizer` does (same ids, unknown characters included); its
``UnigramTrainer`` (SentencePiece's algorithm) learns a different but largely
overlapping vocabulary, as the tests show.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tqdm.auto import tqdm

__all__ = [
    "pre_tokenize",
    "word_counts",
    "merge_pair",
    "BPETokenizer",
    "train_bpe",
    "wordpiece_tokenize",
    "SPACE",
    "metaspace_pre_tokenize",
    "UnigramTokenizer",
    "train_unigram",
]

#: Unicode's "Other_Alphabetic" characters that are symbols (So): circled,
#: parenthesised and squared Latin letters. Alphabetic, so word characters.
_OTHER_ALPHABETIC_SYMBOLS = (
    (0x24B6, 0x24E9),
    (0x1F130, 0x1F149),
    (0x1F150, 0x1F169),
    (0x1F170, 0x1F189),
)
#: Unicode's White_Space property (Python's ``str.isspace`` also counts U+001C-U+001F).
_WHITE_SPACE = (
    (0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)  # fmt: skip


def _is_word_character(code: int) -> bool:
    """Unicode's ``\\w`` (UTS #18), as the Rust regex of ``tokenizers`` reads it:
    Alphabetic, Mark, Decimal_Number, Connector_Punctuation or Join_Control. Python's
    ``\\w`` differs: it takes every number (``½``, ``²``) and no mark (combining accents)."""
    category = unicodedata.category(chr(code))
    if category[0] in "LM" or category in ("Nd", "Nl", "Pc") or code in (0x200C, 0x200D):
        return True
    return category == "So" and any(a <= code <= b for a, b in _OTHER_ALPHABETIC_SYMBOLS)


def _character_class(ranges: Iterable[tuple[int, int]]) -> str:
    return "".join(f"\\U{a:08x}" + (f"-\\U{b:08x}" if b > a else "") for a, b in ranges)


@functools.cache
def word_pattern() -> re.Pattern:
    """How text is cut into words before BPE: runs of word characters, or runs of
    anything else but whitespace, which is dropped; the pattern ``\\w+|[^\\w\\s]+`` of
    ``tokenizers.pre_tokenizers.Whitespace`` with Unicode's meaning of ``\\w`` and ``\\s``.
    Built once, from Python's Unicode tables (about half a second)."""
    word, start = [], None
    for code in range(sys.maxunicode + 2):
        if code <= sys.maxunicode and _is_word_character(code):
            start = code if start is None else start
        elif start is not None:
            word.append((start, code - 1))
            start = None
    w, s = _character_class(word), _character_class(_WHITE_SPACE)
    return re.compile(f"[{w}]+|[^{w}{s}]+")


def pre_tokenize(text: str) -> list[str]:
    """Cut ``text`` into words and punctuation runs, whitespace dropped, exactly as
    ``tokenizers.pre_tokenizers.Whitespace`` does (on every assigned Unicode character).

    >>> pre_tokenize("To be, or not to be?")
    ['To', 'be', ',', 'or', 'not', 'to', 'be', '?']
    >>> pre_tokenize("½ x² café")  # numbers other than digits are not word characters
    ['½', 'x', '²', 'café']
    """
    if not isinstance(text, str):
        raise TypeError(f"pre_tokenize takes a str, got {type(text).__name__}")
    return word_pattern().findall(text)


def word_counts(text: str | Iterable[str]) -> Counter[str]:
    """How often each pre-token occurs in ``text`` (a string, or an iterable of strings)."""
    texts = [text] if isinstance(text, str) else text
    counts: Counter[str] = Counter()
    for t in texts:
        counts.update(pre_tokenize(t))
    return counts


def merge_pair(symbols: list[str], pair: tuple[str, str], new: str) -> list[str]:
    """Replace every occurrence of ``pair`` in ``symbols`` by ``new``, left to right.

    Occurrences do not overlap: ``["a", "a", "a"]`` with ``("a", "a")`` gives
    ``["aa", "a"]``.
    """
    a, b = pair
    out: list[str] = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def _split_word(word: str, prefix: str) -> list[str]:
    """A word as its initial symbols: characters, word-internal ones with ``prefix``."""
    return [word[0]] + [prefix + c for c in word[1:]] if word else []


def _join(a: str, b: str, prefix: str) -> str:
    """The token made by merging ``a`` and ``b`` (``b``'s prefix is dropped)."""
    return a + (b[len(prefix) :] if prefix and b.startswith(prefix) else b)


@dataclass
class BPETokenizer:
    """A trained byte-pair-encoding tokenizer: a vocabulary and its ordered merges.

    ``vocab`` maps each token to its id; ``merges`` lists the merged pairs in the
    order they were learned (earlier = higher priority).  Made by
    :func:`train_bpe`.
    """

    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    unk_token: str = "[UNK]"
    continuing_subword_prefix: str = ""
    _ranks: dict[tuple[str, str], int] = field(init=False, repr=False)
    _cache: dict[str, list[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        self._cache = {}
        self.id_to_token = {i: t for t, i in self.vocab.items()}

    def __len__(self) -> int:
        return len(self.vocab)

    def truncated(self, vocab_size: int) -> BPETokenizer:
        """The tokenizer :func:`train_bpe` would have returned with a smaller ``vocab_size``.

        Training is greedy, so its first merges do not depend on the size asked
        for: keep the tokens with ids below ``vocab_size`` and the merges that
        produce them.
        """
        if not 1 <= vocab_size <= len(self.vocab):
            raise ValueError(
                f"truncated: vocab_size must be in 1..{len(self.vocab)}, got {vocab_size}"
            )
        vocab = {t: i for t, i in self.vocab.items() if i < vocab_size}
        merges = []
        for a, b in self.merges:
            if _join(a, b, self.continuing_subword_prefix) not in vocab:
                break
            merges.append((a, b))
        return BPETokenizer(vocab, merges, self.unk_token, self.continuing_subword_prefix)

    def tokenize_word(self, word: str) -> list[str]:
        """The tokens of one pre-token: replay the merges, lowest rank first.

        Start from the characters; at each step merge (every occurrence of) the
        adjacent pair learned earliest, until no adjacent pair is a merge.
        Characters never seen in training become ``unk_token``.
        """
        if word in self._cache:
            return self._cache[word]
        symbols = _split_word(word, self.continuing_subword_prefix)
        while len(symbols) > 1:
            ranked = [
                (self._ranks[p], p)
                for p in zip(symbols, symbols[1:], strict=False)
                if p in self._ranks
            ]
            if not ranked:
                break
            _, best = min(ranked)
            symbols = merge_pair(symbols, best, _join(*best, self.continuing_subword_prefix))
        tokens = [s if s in self.vocab else self.unk_token for s in symbols]
        self._cache[word] = tokens
        return tokens

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text`` (pre-tokenized by :func:`pre_tokenize`)."""
        return [t for word in pre_tokenize(text) for t in self.tokenize_word(word)]

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``."""
        return [self.vocab[t] for t in self.tokenize(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Tokens joined back into text.

        Whitespace was dropped by the pre-tokenizer, so it cannot come back exactly.
        With a ``continuing_subword_prefix`` a token without the prefix starts a new
        word and words are joined by one space; without a prefix word boundaries are
        unknown and every token is followed by a space (what ``tokenizers`` does
        when no decoder is set).
        """
        tokens = [self.id_to_token[int(i)] for i in ids]
        prefix = self.continuing_subword_prefix
        if not prefix:
            return " ".join(tokens)
        words: list[str] = []
        for t in tokens:
            if t.startswith(prefix) and words:
                words[-1] += t[len(prefix) :]
            else:
                words.append(t)
        return " ".join(words)


def train_bpe(
    text: str | Iterable[str] | Mapping[str, int],
    vocab_size: int,
    *,
    min_frequency: int = 2,
    unk_token: str = "[UNK]",
    continuing_subword_prefix: str = "",
    progress: bool = False,
) -> BPETokenizer:
    """Learn BPE merges from ``text`` until the vocabulary has ``vocab_size`` tokens.

    ``text``: a string, several strings, or word counts ``{word: count}``.

    1. Count the words (:func:`pre_tokenize`); write each as its characters.
    2. The vocabulary starts as ``unk_token`` then every character, in code-point
       order (then, with a ``continuing_subword_prefix``, every character that
       occurs inside a word, prefixed, in code-point order).
    3. Repeat: count every adjacent pair of symbols, weighted by word count; take
       the most frequent (ties: smallest pair of token ids); stop if its count is
       below ``min_frequency``; else merge it everywhere and add the new token.

    Pair counts are kept up to date incrementally: a merge only recounts the
    words that contain the merged pair, and a heap with lazy deletion finds the
    best pair.  Same result as recounting everything at each step (Chapter 5
    checks it against a naive loop) and as ``tokenizers``' ``BpeTrainer``.
    """
    if vocab_size < 1:
        raise ValueError(f"train_bpe: vocab_size must be >= 1, got {vocab_size}")
    if min_frequency < 1:
        raise ValueError(f"train_bpe: min_frequency must be >= 1, got {min_frequency}")
    prefix = continuing_subword_prefix
    counts = dict(text) if isinstance(text, Mapping) else dict(word_counts(text))
    words = [w for w in counts if w]
    freqs = [counts[w] for w in words]

    alphabet = sorted({c for w in words for c in w})
    vocab: dict[str, int] = {unk_token: 0}
    for c in alphabet:
        vocab.setdefault(c, len(vocab))
    if prefix:  # the characters that occur inside a word, prefixed
        for c in sorted({c for w in words for c in w[1:]}):
            vocab.setdefault(prefix + c, len(vocab))

    symbols = [_split_word(w, prefix) for w in words]
    pair_counts: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for wi, syms in enumerate(symbols):
        for pair in zip(syms, syms[1:], strict=False):
            pair_counts[pair] += freqs[wi]
            where[pair].add(wi)

    def entry(pair: tuple[str, str]) -> tuple[int, int, int, tuple[str, str]]:
        # heapq pops the smallest: highest count first, then smallest (id_a, id_b)
        return (-pair_counts[pair], vocab[pair[0]], vocab[pair[1]], pair)

    heap = [entry(p) for p in pair_counts]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    bar = tqdm(total=max(vocab_size - len(vocab), 0), desc="BPE merges", disable=not progress)
    while len(vocab) < vocab_size and heap:
        neg, _, _, pair = heapq.heappop(heap)
        if -neg != pair_counts.get(pair, 0):
            continue  # stale entry: the count changed since it was pushed
        if -neg < min_frequency:
            break
        new = _join(*pair, prefix)
        merges.append(pair)
        if new not in vocab:
            vocab[new] = len(vocab)
            bar.update(1)
        delta: Counter[tuple[str, str]] = Counter()
        for wi in where.pop(pair):
            old = symbols[wi]
            merged = merge_pair(old, pair, new)
            if len(merged) == len(old):
                continue  # the word no longer holds the pair
            for p in zip(old, old[1:], strict=False):
                delta[p] -= freqs[wi]
            for p in zip(merged, merged[1:], strict=False):
                delta[p] += freqs[wi]
                where[p].add(wi)
            symbols[wi] = merged
        del pair_counts[pair]
        for p, change in delta.items():
            if change == 0 or p == pair:
                continue
            pair_counts[p] += change
            if pair_counts[p] > 0:
                heapq.heappush(heap, entry(p))
            else:
                del pair_counts[p]
    bar.close()
    return BPETokenizer(vocab, merges, unk_token, prefix)


def wordpiece_tokenize(
    word: str,
    vocab: Mapping[str, int] | Iterable[str],
    *,
    prefix: str = "##",
    unk_token: str = "[UNK]",
    max_chars: int = 100,
) -> list[str]:
    """BERT's WordPiece segmentation of one word: greedy longest match, from the left.

    At each position take the longest piece of the rest of the word that is in
    ``vocab`` (``prefix`` + piece inside the word); if no piece matches, the
    whole word is ``[unk_token]``, as is a word longer than ``max_chars``.

    >>> wordpiece_tokenize("unwanted", {"un", "##want", "##ed", "want"})
    ['un', '##want', '##ed']
    """
    known = vocab if isinstance(vocab, Mapping) else set(vocab)
    if len(word) > max_chars:
        return [unk_token]
    pieces: list[str] = []
    start = 0
    while start < len(word):
        end = len(word)
        piece = None
        while start < end:  # longest first
            candidate = (prefix if start > 0 else "") + word[start:end]
            if candidate in known:
                piece = candidate
                break
            end -= 1
        if piece is None:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


# ---------------------------------------------------------------------------
# Unigram language-model tokenization (Kudo, 2018): SentencePiece's, XLM-R's
# ---------------------------------------------------------------------------

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


def _expected_counts(
    counts: Mapping[str, int], scores: Mapping[str, float], max_len: int
) -> tuple[dict[str, float], float]:
    """E-step: the expected number of uses of each piece, and the corpus log-likelihood.

    For one word, ``alpha[j]`` (``beta[i]``) sums the probability of every
    segmentation of ``word[:j]`` (``word[i:]``), in log space; the piece
    ``word[i:j]`` is used with probability
    ``exp(alpha[i] + log p(piece) + beta[j] - alpha[n])`` (forward-backward).
    """
    expected: dict[str, float] = defaultdict(float)
    loglik = 0.0
    unk = min(scores.values()) - UNK_PENALTY
    for word, count in counts.items():
        ends = _lattice(word, scores, max_len, unk)
        n = len(word)
        alpha = [0.0] + [-math.inf] * n
        for j in range(1, n + 1):
            alpha[j] = _logsumexp([alpha[i] + s for i, _, s in ends[j]])
        beta = [-math.inf] * n + [0.0]
        for j in range(n, 0, -1):  # edges ending at j feed beta of their start
            for i, _, s in ends[j]:
                beta[i] = _logaddexp(beta[i], s + beta[j])
        total = alpha[n]
        loglik += count * total
        for j in range(1, n + 1):
            for i, piece, s in ends[j]:
                if piece is not None:
                    expected[piece] += count * math.exp(alpha[i] + s + beta[j] - total)
    return expected, loglik


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
       vocabulary (``unk_token`` included) has ``vocab_size`` tokens.

    SentencePiece adds a Bayesian (digamma) M-step and a finer loss; the
    skeleton, EM then prune, is the same.
    """
    if vocab_size < 2:
        raise ValueError(f"train_unigram: vocab_size must be >= 2, got {vocab_size}")
    if not 0.0 < shrinking_factor < 1.0:
        raise ValueError(
            f"train_unigram: shrinking_factor must be in (0, 1), got {shrinking_factor}"
        )
    if isinstance(text, Mapping):
        counts = {w: c for w, c in text.items() if w}
    else:
        counts = dict(
            Counter(
                w
                for t in ([text] if isinstance(text, str) else text)
                for w in metaspace_pre_tokenize(t)
            )
        )
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
    scores = _normalise({**chars, **{s: subs[s] for s in frequent[:seed_size]}})

    bar = tqdm(desc="Unigram EM + pruning", disable=not progress)
    while True:
        for _ in range(em_iterations):
            expected, _ = _expected_counts(counts, scores, max_piece_length)
            # a piece no segmentation uses drops out; characters always stay
            kept = {p: e for p, e in expected.items() if e > 0 or len(p) == 1}
            scores = _normalise({**{c: 1e-9 for c in chars}, **kept})
            bar.update(1)
        target = vocab_size - 1  # the pieces, without unk_token
        if len(scores) <= target:
            break
        unk = min(scores.values()) - UNK_PENALTY
        uses: Counter[str] = Counter()
        for w, c in counts.items():
            for p in _viterbi(w, scores, max_piece_length, unk)[0]:
                if p is not None:
                    uses[p] += c
        loss = {}
        for p, s in scores.items():
            if len(p) == 1:
                continue
            _, alt_score = _viterbi(p, scores, max_piece_length, unk, skip=p)
            loss[p] = uses[p] * (s - alt_score)
        keep = max(target, int(len(scores) * shrinking_factor)) - len(chars)
        survivors = set(sorted(loss, key=lambda p: (-loss[p], p))[:keep])
        scores = {p: s for p, s in scores.items() if len(p) == 1 or p in survivors}
    bar.close()
    return UnigramTokenizer(scores, unk_token)
