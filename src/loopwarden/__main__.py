"""``python -m loopwarden``: the same as the ``loopwarden`` command."""

from loopwarden.cli import main

main()
