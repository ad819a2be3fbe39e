"""Heads of language models: previous-token, duplicate-token and induction heads (synthetic
probes), attention sinks, copying and retrieval heads, streaming heads (the KV-cache view),
each role a tested claim, with causal checks against random heads (docs/lm-heads.md).

Modules: ``settings`` (options, checked without torch), ``probes``, ``sinks``, ``copying``,
``retrieval``, ``streaming``, ``ablation``, ``shares`` (per-sequence sums and role tests
shared by the analyzers), ``tables``.
"""
