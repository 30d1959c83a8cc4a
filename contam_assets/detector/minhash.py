"""Word shingles and datasketch MinHashes, shared by the near-duplicate stage and the reference overlap.

Words are the normaliser's cleaned words (text.clean_words), as ids of the one
tokenizer's word mode (tokenize.WordTokenizer: 64-bit xxhash of the word); a
shingle is the hash of ``SHINGLE`` consecutive word ids (ngrams.ngram_hashes).
*Masked* shingles replace every number word (all digits) by one id first, so two
texts that differ only in their numbers -- a GSM-Hard item and its GSM8K source --
have the same masked shingles.

A MinHash (datasketch, ``NUM_PERM`` permutations of the 64-bit shingle hashes,
scheme ``affine64``) estimates the Jaccard similarity of two shingle sets; its
standard error is about sqrt(J (1 - J) / NUM_PERM), 0.06 at J = 0.5.  MinHash is
only the candidate stage: every candidate it proposes is verified on the exact
shingle sets and word sequences before it counts (overlap.py, neardup.py), so an
estimate that is too high costs time, never a false match; one that is too low
can lose a candidate (the LSH band structure bounds how often, see neardup.py).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import xxhash

from contam_assets.detector.ngrams import ngram_hashes, segment_ngram_hashes, unique_per_segment
from contam_assets.detector.tokenize import get_tokenizer

SHINGLE = 3  # words per shingle
NUM_PERM = 64  # MinHash permutations (exact verification follows, so the estimate only has to rank candidates)
NUMBER_ID = np.uint64(xxhash.xxh3_64_intdigest(b"\x00number"))  # the id every number word gets when masked


def masked_word_ids(texts_words: list[list[bytes]]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(word ids, masked word ids) of many lists of cleaned words (UTF-8 bytes, as text.clean_words gives them)."""
    ids = get_tokenizer("word").encode_words(texts_words)
    return ids, [masked_ids(i, number_mask(w)) for i, w in zip(ids, texts_words)]


def number_mask(words: list[bytes]) -> np.ndarray:
    """True for every word that is a number (all digits after cleaning: "1,250" cleans to "1" "250")."""
    return np.fromiter((w.isdigit() for w in words), dtype=bool, count=len(words))


def masked_ids(ids: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    out = ids.copy()
    out[numbers] = NUMBER_ID
    return out


def shingle_hashes(ids: np.ndarray) -> np.ndarray:
    """Hash of every shingle, in word order (a text under SHINGLE words is one shingle of all of them)."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.uint64)
    return ngram_hashes(ids, min(SHINGLE, len(ids)))


def shingle_set(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct shingle hashes."""
    return np.unique(shingle_hashes(ids))


def shingle_sets(texts_ids: list[np.ndarray]) -> list[np.ndarray]:
    """``[shingle_set(i) for i in texts_ids]`` in one numpy pass over all of them."""
    h, seg = segment_ngram_hashes(texts_ids, SHINGLE)
    short = [i for i, t in enumerate(texts_ids) if 0 < len(t) < SHINGLE]
    if short:
        h = np.concatenate([h, np.array([shingle_hashes(texts_ids[i])[0] for i in short], dtype=np.uint64)])
        seg = np.concatenate([seg, np.array(short, dtype=np.int64)])
    values, seg = unique_per_segment(h, seg)
    bounds = np.searchsorted(seg, np.arange(len(texts_ids) + 1))
    return [values[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


@lru_cache(maxsize=1)
def _empty_minhash():
    """The MinHash every set starts from: its permutations are drawn once per process, not once per call."""
    from datasketch import MinHash

    return MinHash(num_perm=NUM_PERM, hashfunc=int, scheme="affine64")


def minhashes(sets: list[np.ndarray]) -> list:
    """datasketch MinHash of every shingle set (the 64-bit hashes are the values; no rehashing); what
    ``MinHash.generator`` gives, from one shared starting MinHash."""
    out = []
    for s in sets:
        m = _empty_minhash().copy()
        m.update_batch(s.tolist())
        out.append(m)
    return out


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted distinct hash arrays."""
    if not len(a) and not len(b):
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def containment(a: np.ndarray, b: np.ndarray) -> float:
    """Share of ``a``'s shingles that are in ``b`` (both sorted distinct)."""
    if not len(a) or not len(b):
        return 0.0
    pos = np.minimum(np.searchsorted(b, a), len(b) - 1)
    return float((b[pos] == a).mean())
