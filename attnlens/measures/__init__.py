"""One folder per measure: its analyzer(s), tables and report section (``section.py``).

``heads`` (Clark et al.'s statistics; positional, syntactic and rare-word roles; behaviour
classes; clustering), ``spectrum`` (singular-value spectra of attention, low-rank cost),
``asymmetry`` (of patterns and of the query/key weights), ``circuits`` (QK/OV spectra, shared
subspaces), ``collapse`` (rank collapse: residuals, block variants, paths, random stacks),
``rollout`` (rollout and flow), ``sparse`` (sparse-pattern coverage), ``linear`` (the
linear-attention view) and ``pruning`` (head importance, pruning curves, structural removal).

An analyzer or a tables module never imports report code; a ``section.py`` may
(``tests/test_layering.py``).
"""
