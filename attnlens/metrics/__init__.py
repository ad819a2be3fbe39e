"""Task metrics computed through attnlens models (``factory.build_metrics`` picks one).

``METRIC_NAMES`` lives here, free of torch, so the command line can check ``--metric`` early.
"""

METRIC_NAMES = ("sts", "mlm", "lm", "accuracy", "fidelity", "seq2seq")
