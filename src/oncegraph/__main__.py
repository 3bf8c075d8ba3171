"""``python -m oncegraph ...`` is the ``oncegraph`` command."""

from oncegraph.cli import main

main()
