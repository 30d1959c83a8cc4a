"""What a person reads: the HTML removal report and the small renderers for asset metadata.

    html.py     the self-contained removal report (counts, histogram, review pairs)
    render.py   markdown tables and inline PNGs for Dagster metadata
    inert.py    untrusted text made inert per display context (Markdown, HTML, terminal)
    run_summary.py  the CLI's summary of a run, read from its tables (and the lm-eval manifest)

May import the detector, the store and sources; never Dagster.
"""
