"""Attention rollout and attention flow (Abnar & Zuidema 2020)."""
