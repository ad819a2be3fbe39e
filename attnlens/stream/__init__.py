"""How analyzers are fed: the analyzer protocol, the runner and its feeders, state files.

``base`` (``Analyzer``: update / merge / result), ``runner`` (one forward pass feeds every
analyzer, layer by layer), ``feeder`` (hands each layer's activations to the analyzers that
read them), ``attention_types`` / ``attention_view`` (an encoder-decoder model's attention
types seen as single stacks), ``state`` (analyzer states as files), and the helpers analyzers
share: ``real_tokens`` (real-token blocks of padded patterns), ``per_sentence`` (per-sentence
rows for the bootstrap), ``sentence_sample`` (a bounded sample of each batch).
"""
