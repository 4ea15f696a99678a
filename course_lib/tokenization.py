"""Subword tokenization written for teaching: BPE and WordPiece (Chapter 5).

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
* **Unigram language model** (Kudo, 2018; SentencePiece's, hence XLM-R's) is
  in :mod:`course_lib.unigram` (Chapters 5 and 12); this module re-exports its
  names (``tokenization.train_unigram``), see the imports.

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
trainer with a prefix, not BERT's likelihood-based one.
"""

from __future__ import annotations

import functools
import heapq
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tqdm.auto import tqdm

# Unigram moved to course_lib.unigram; re-exported here so that the notebooks'
# ``tokenization.train_unigram`` and ``show_source(tokenization._viterbi)`` keep working.
from course_lib.unigram import SPACE as SPACE
from course_lib.unigram import UnigramTokenizer as UnigramTokenizer
from course_lib.unigram import _viterbi as _viterbi
from course_lib.unigram import metaspace_pre_tokenize as metaspace_pre_tokenize
from course_lib.unigram import train_unigram as train_unigram

__all__ = [
    "pre_tokenize",
    "word_counts",
    "merge_pair",
    "BPETokenizer",
    "train_bpe",
    "wordpiece_tokenize",
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


def _initial_vocab(words: list[str], unk_token: str, prefix: str) -> dict[str, int]:
    """Step 2 of :func:`train_bpe`: ``unk_token``, then every character in code-point
    order (then, with a ``prefix``, every character met inside a word, prefixed)."""
    vocab: dict[str, int] = {unk_token: 0}
    for c in sorted({c for w in words for c in w}):
        vocab.setdefault(c, len(vocab))
    if prefix:  # the characters that occur inside a word, prefixed
        for c in sorted({c for w in words for c in w[1:]}):
            vocab.setdefault(prefix + c, len(vocab))
    return vocab


def _pair_index(
    symbols: list[list[str]], freqs: list[int]
) -> tuple[Counter[tuple[str, str]], defaultdict[tuple[str, str], set[int]]]:
    """Every adjacent pair's count, weighted by word count, and the words that hold it."""
    pair_counts: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for wi, syms in enumerate(symbols):
        for pair in zip(syms, syms[1:], strict=False):
            pair_counts[pair] += freqs[wi]
            where[pair].add(wi)
    return pair_counts, where


def _merge_everywhere(
    pair: tuple[str, str],
    new: str,
    symbols: list[list[str]],
    freqs: list[int],
    where: defaultdict[tuple[str, str], set[int]],
) -> Counter[tuple[str, str]]:
    """Merge ``pair`` into ``new`` in every word that holds it (``symbols`` and
    ``where`` updated in place); returns the change of every pair's count."""
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
    return delta


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

    vocab = _initial_vocab(words, unk_token, prefix)  # 2.
    symbols = [_split_word(w, prefix) for w in words]  # 1. each word as its characters
    pair_counts, where = _pair_index(symbols, freqs)  # 3. the counts, kept up to date below

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
        delta = _merge_everywhere(pair, new, symbols, freqs, where)
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
