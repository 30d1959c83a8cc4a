"""The `paraphrase` part: benchmark items rewritten in other words (docs/paraphrase.md).

Below `rescan` (which runs it in the scan workers, after the n-gram detector on the same
documents) and above `detector` (records, config, match rows).  In reading order:
`embed` (static embedders: WordLlama's model bundled in its wheel, or a model2vec folder by
path) → `quantities` (numbers, names and code identifiers of a text) → `verify` (a rewording
or a look-alike: the same quantities, signature, entities) → `gates` (the word gates: which documents of
a batch hold an item's less common words close together) → `search` (the items' vectors,
the cheap gates, sentence windows by prefix sums, exact numpy search) → `stage` (match rows,
reason ``paraphrase``, held for review, with their evidence).  Beside them, `crosslingual` (items translated
into another language: a language gate, anchors that survive translation, USE multilingual v3 from its wheel;
rows with reason ``translation``, held for review; docs/crosslingual.md).
"""
