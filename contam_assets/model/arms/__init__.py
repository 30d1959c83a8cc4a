"""Proxy ablation arms of seed 003 (core, no dagster).

- :mod:`.exposure`  expected reads of a removed document per source, proxy and target scale
- :mod:`.mix`       the four arms' training streams (decontaminated, natural, full, target_exposure)
- :mod:`.tokenizer` byte-level BPE trained locally on the natural pool, shared by every arm
- :mod:`.train`     small GPT-2 trained with a plain torch loop; checkpoint folders + data/train.jsonl
- :mod:`.inputs`    removals table + mix folder + pool -> documents (the data side's outputs)
- :mod:`.pipeline`  the steps end to end, used by ``contam arms`` and the Dagster assets
"""

from contam_assets.model.arms.mix import ARMS

__all__ = ["ARMS"]
