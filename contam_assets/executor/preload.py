"""What every worker of a run would otherwise load for itself, loaded once in the forkserver.

The forkserver imports this module (processes.WORKER_MODULES) before it forks any worker, so the
compiled steps (the cleaning walk, the word walk, the key table and its stream pass, the cluster walk) and the default tokenizer are in
memory in every scan and tokenizing-ahead worker from its first shard: each fresh worker spent
~0.8 s of its first shard loading numba's kernels from their on-disk cache.  They are run here once
on a made-up sentence with the argument types the scan gives them, so the same compiled versions are
loaded.  Anything failing here is swallowed: a worker then loads them itself, as before, and the
forkserver (which every pool needs) stays up.
"""

from __future__ import annotations


def warm() -> bool:
    """Load the compiled steps and the default tokenizer in this process; False where they are off or failed."""
    try:
        import numpy as np

        from contam_assets.detector import compiled, key_table, walk_kernel
        from contam_assets.detector.config import DetectConfig
        from contam_assets.detector.ngrams import ngram_hashes
        from contam_assets.detector.text import translate_bytes
        from contam_assets.detector.tokenize import get_tokenizer

        if not compiled.enabled():
            return False
        cfg = DetectConfig()
        parts = [translate_bytes(t, cfg.clean_options) for t in ("Warm up: 3 + 4 = 7.", "Un café, s'il vous plaît.")]
        tokens = get_tokenizer(cfg.tokenizer).encode_translated(parts)  # the cleaning walk and the word walk
        hashes = ngram_hashes(np.concatenate(tokens), 2)
        keys = np.unique(hashes)
        key_table.positions(hashes, keys, key_table.directory_for(keys), np.zeros(1, dtype=np.uint64), 6)
        key_table.slots_for(keys)  # the prefilter's open-addressing table
        ids = np.asarray(tokens[0], dtype=np.uint32)  # a cached stream's ids (cl100k): an incremental rescan's first step
        ids.setflags(write=False)  # as token_cache.load maps them: a read-only array is another signature for numba
        offsets = np.array([0, len(ids)], dtype=np.int64)
        for lead in (None, (np.zeros(1, dtype=np.uint64), 6)):
            key_table.docs_with_key(ids, offsets, 3, 0, keys, key_table.directory_for(keys), np.zeros(1, dtype=np.uint64), 6, lead)
        walk_kernel.warm()  # the cluster walk, the floor bound, the answer window
        return True
    except Exception:  # noqa: BLE001 - never the forkserver's end: the workers load what they need themselves
        return False


WARM = warm()
