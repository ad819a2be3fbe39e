"""``python -m attnlens.cli``: the entry point ``torchrun`` launches (``-m attnlens.cli``)."""

from attnlens.cli.app import main

main()
