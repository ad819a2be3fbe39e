"""Model backends other than attnlens' own HookedTransformer.

``backends.hf`` runs any Hugging Face model whose attention goes through transformers'
attention interface, with attnlens' attention function registered on it.
"""
