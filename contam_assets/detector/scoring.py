"""Scoring: how a candidate's overlaps become one score, and the bar it must reach.

decon's src/detect/scoring.rs and the threshold interpolation of contamination_entry.rs.
Both the scan (scan.py) and the prefilter (prefilter.py) use these rules, so they live
here, below both.
"""

from __future__ import annotations

# decon scoring weights (scoring.rs): question + answer + passage, question + answer, question + passage
W_QAP_QUESTION, W_QAP_ANSWER, W_QAP_PASSAGE = 0.7, 0.2, 0.1
W_QA_QUESTION, W_QA_ANSWER = 0.75, 0.25
W_QP_QUESTION, W_QP_PASSAGE = 0.85, 0.15
# decon: question confidence is reduced below this many unique question n-grams, answer confidence below
# this many unique answer tokens
FULL_CONFIDENCE_QUESTION_NGRAMS = 20
FULL_CONFIDENCE_ANSWER_TOKENS = 4


def interpolate_threshold(length: int, start: int | None, end: int | None, target: float) -> float:
    # decon rule: perfect match (1.0) up to `start` tokens, `target` from `end`, linear between
    if start is None:
        return target
    if end is None:
        return 1.0 if length <= start else target
    if length <= start:
        return 1.0
    if length >= end or start == end:
        return target
    return 1.0 - (1.0 - target) * (length - start) / (end - start)


def combined_score(q: float, q_unique: int, a: float | None, a_len: int | None, p: float | None) -> float:
    """decon calculate_combined_contamination_score, before the length adjustment (capped at 1)."""
    # decon rule: question confidence 0.5 + 0.5*n/20 below 20 unique n-grams
    qc = 0.5 + 0.5 * q_unique / FULL_CONFIDENCE_QUESTION_NGRAMS if q_unique < FULL_CONFIDENCE_QUESTION_NGRAMS else 1.0
    has_a, has_p = a is not None, p is not None
    a, p = a or 0.0, p or 0.0
    if has_a and has_p:
        # decon rule: answer confidence 0.5 + 0.5*n/4 below 4 unique answer tokens
        ac = 0.5 + 0.5 * a_len / FULL_CONFIDENCE_ANSWER_TOKENS if (a_len is not None and a_len < FULL_CONFIDENCE_ANSWER_TOKENS) else 1.0
        if qc < 1.0 or ac < 1.0:
            qw = W_QAP_QUESTION * qc
            q_red = W_QAP_QUESTION * (1.0 - qc)
            aw_after = W_QAP_ANSWER + q_red * 0.5  # lost question weight split between answer and passage
            pw_after = W_QAP_PASSAGE + q_red * 0.5
            aw = aw_after * ac
            pw = pw_after + aw_after * (1.0 - ac)  # lost answer weight moves to the passage
            base = q * qw + a * aw + p * pw
        else:
            base = q * W_QAP_QUESTION + a * W_QAP_ANSWER + p * W_QAP_PASSAGE
    elif has_a:
        if qc < 1.0:
            base = q * W_QA_QUESTION * qc + a * (W_QA_ANSWER + W_QA_QUESTION * (1.0 - qc))
        else:
            base = q * W_QA_QUESTION + a * W_QA_ANSWER
    elif has_p:
        if qc < 1.0:
            base = q * W_QP_QUESTION * qc + p * (W_QP_PASSAGE + W_QP_QUESTION * (1.0 - qc))
        else:
            base = q * W_QP_QUESTION + p * W_QP_PASSAGE
    else:
        base = q
    return _unit(base)


# Sums of the same IDF values added in another order differ in the last bits (the index sums
# with np.add.at, the scan in key order), so a complete match can come out as 0.9999999999999998.
# decon sums in one fixed order and gets exactly 1.0; treat anything within 1e-9 of 1 as 1.
EPS = 1e-9


def _unit(x: float) -> float:
    return 1.0 if x >= 1.0 - EPS else x


def overlap_ratio(matched: float, total: float) -> float:
    """matched / total in [0, 1], exactly 1.0 for a complete match."""
    return _unit(matched / total) if total > 0 else 0.0


def length_adjusted_score(score: float, required: float, threshold: float) -> float:
    """decon's reported contamination_score: scaled by threshold/required below the decay end; 1.0 stays 1.0."""
    if required > threshold:
        scale = threshold / required
        return score * scale + (1.0 - scale) * (1.0 if score == 1.0 else 0.0)
    return score


def passes_threshold(score: float, required: float, threshold: float) -> bool:
    """decon's length-adjusted comparison: the adjusted score must reach the threshold."""
    if required > threshold:
        return length_adjusted_score(score, required, threshold) >= threshold
    return score >= threshold
