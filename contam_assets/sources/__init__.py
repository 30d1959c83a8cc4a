"""Benchmark sources, together: what a user names as benchmarks becomes task specs and then reference records.

    registry.py              task specs (data/tasks/*.toml, the catalogue) -> benchmark rows
    catalogue.py             the shipped catalogue of TOML specs
    fields.py                field paths inside a benchmark row
    hf_files.py              Hub dataset files in a local cache
    lm_eval_tasks.py         lm-eval's task registry (with lm_eval_code.py, lm_eval_include.py)
    translation_links.py     a translated task's items linked to the source items they translate
    lm_eval_translations.py  the shipped translation links of lm-eval tasks
    reference.py             benchmark rows -> reference records (decon's filters, derived suites)

One code path builds the reference set from any of them (docs/benchmarks.md).  May import the detector and the
store; never Dagster.
"""
