"""``python -m attnlens.cli`` (and ``torchrun -m attnlens.cli``): the ``attnlens`` command."""

from attnlens.cli.app import main

main()
