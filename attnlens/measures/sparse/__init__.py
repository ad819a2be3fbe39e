"""Sparse-pattern coverage: how much of each head's attention a sparse pattern would keep."""
