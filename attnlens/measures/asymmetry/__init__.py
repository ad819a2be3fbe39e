"""How asymmetric attention is: of the patterns (streamed) and of the query/key weights."""
