"""Who owns what, how assets are tagged, and the code versions that make an upgrade visible.

One place for the metadata every asset and check carries (owners, kinds, tags), so
a new asset is declared the way the others are and the graph snapshot test
(``contam_assets_tests/defs/test_graph_snapshot.py``) can hold all of them.

Code versions: an asset whose output changes when the detector's rules change
carries ``code_version=DETECTOR_VERSION`` (a digest of the detector's source
files).  After an upgrade the UI marks those assets and everything below them as
stale ("code version changed"); nothing rematerializes by itself, because a full
rescan of a large pool is a decision, not a side effect.
"""

from __future__ import annotations

from contam_assets.detector.versions import source_digest

DATA_OWNERS = ["team:data"]  # the decontamination graph and the detector's quality suite
MODEL_OWNERS = ["team:evaluation"]  # probes of model checkpoints, evaluation reports, proxy arms


def tags(side: str, domain: str, **extra: str) -> dict[str, str]:
    """Asset tags: which side of the graph (data / model) and which domain package defines it."""
    return {"contam/side": side, "contam/domain": domain, **extra}


def check_metadata(owners: list[str], guards: str) -> dict[str, str]:
    """Asset checks have no owners or tags of their own in Dagster; they carry them as metadata."""
    return {"owners": ", ".join(owners), "guards": guards}


# the detector's compression and the scans' token cache live under store/: their bytes count too
DETECTOR_MODULES = ("detector", "sources", "store/compression.py", "store/token_cache.py")
DETECTOR_VERSION = f"detector-{source_digest(*DETECTOR_MODULES)}"  # reference set, index, registry
SCAN_VERSION = f"scan-{source_digest(*DETECTOR_MODULES, 'paraphrase', 'rescan', 'executor')}"  # shard scans: the detector, its opt-in parts, the rescan plans
QUALITY_VERSION = f"quality-{source_digest('detector', 'sources', 'quality')}"  # planted suite and its scores
