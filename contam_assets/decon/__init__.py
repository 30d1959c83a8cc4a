"""A drop-in for AI2 decon users: their config files, reference folders, report files and `compare`.

    config.py    decon's YAML config -> our settings (every key of decon's config/default.yaml)
    decon_outputs.py  decon-shaped report files and purified training files from our tables
    compare.py   `contam compare`: two runs (ours or decon's report folders) side by side

May import the detector and the store; never Dagster.  docs/decon.md tells a decon user how to move over.
"""
