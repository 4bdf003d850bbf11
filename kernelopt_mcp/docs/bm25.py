"""A compact Okapi BM25 index (k1 = 1.2, b = 0.75) with a small tokenizer.

Written here rather than taken from a library: the corpus is a few thousand passages, the
whole index is ~60 lines, and it needs no NumPy arrays or downloads (the libraries that fit,
rank-bm25 and bm25s, add dependencies for nothing we use).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_TOKEN = re.compile(r"[a-z0-9_]+")
_STOP = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "has", "have", "how", "i", "if", "in",
     "into", "is", "it", "its", "may", "more", "most", "no", "not", "of", "on", "or", "so", "such", "than", "that",
     "the", "their", "them", "then", "there", "these", "this", "those", "to", "use", "used", "uses", "using", "was",
     "were", "what", "when", "where", "which", "while", "with", "within", "without", "you", "your"]
)


def stem(token: str) -> str:
    """A light suffix stripper: enough that 'conflicts'/'conflict', 'coalescing'/'coalesced'/
    'coalesce' and 'loads'/'loading' meet; applied to documents and queries alike."""
    t = token
    if len(t) > 4 and t.endswith("ies"):
        t = t[:-3] + "y"
    elif len(t) > 3 and t.endswith("s") and not t.endswith("ss"):
        t = t[:-1]
    if len(t) > 5 and t.endswith("ing"):
        t = t[:-3]
    elif len(t) > 4 and t.endswith("ed"):
        t = t[:-2]
    if len(t) > 4 and t.endswith("e"):
        t = t[:-1]
    return t


def tokenize(text: str) -> list[str]:
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in _STOP and len(t) > 1]


class BM25:
    """Scores documents (lists of tokens) against a query (a list of tokens)."""

    def __init__(self, documents: Sequence[list[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.freqs = [Counter(doc) for doc in documents]
        self.lengths = [len(doc) for doc in documents]
        self.avg_length = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter[str] = Counter()
        for f in self.freqs:
            df.update(f.keys())
        n = len(documents)
        # The "plus one" form keeps every idf positive, so a very common term never subtracts.
        self.idf = {term: math.log(1 + (n - d + 0.5) / (d + 0.5)) for term, d in df.items()}

    def __len__(self) -> int:
        return len(self.freqs)

    def score(self, query: list[str], index: int) -> float:
        f = self.freqs[index]
        norm = self.k1 * (1 - self.b + self.b * self.lengths[index] / (self.avg_length or 1.0))
        total = 0.0
        for term in set(query):
            tf = f.get(term)
            if tf:
                total += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
        return total

    def scores(self, query: list[str]) -> list[float]:
        terms = [t for t in set(query) if t in self.idf]
        if not terms:
            return [0.0] * len(self)
        return [self.score(terms, i) for i in range(len(self))]
