"""The linear-attention (fast-weight) view of each head."""
