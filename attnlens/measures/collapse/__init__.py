"""Rank collapse with depth (Dong et al. 2021): residuals of a pretrained model, its block
variants, paths of heads, and randomly initialised stacks."""
