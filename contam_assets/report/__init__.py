"""What a person reads: the HTML removal report and the small renderers for asset metadata.

    html.py     the self-contained removal report (counts, histogram, review pairs)
    render.py   markdown tables and inline PNGs for Dagster metadata
    inert.py    untrusted text made inert per display context (Markdown, HTML, terminal)

May import the detector and the store; never Dagster.
"""
