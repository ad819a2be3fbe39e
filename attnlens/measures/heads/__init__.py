"""Head statistics and roles: positional, syntactic and rare-word heads, behaviour classes,
clustering (Clark et al. 2019; Voita et al. 2019)."""
