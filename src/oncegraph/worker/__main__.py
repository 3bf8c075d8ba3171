"""``python -m oncegraph.worker module:app ...`` is ``oncegraph worker module:app ...``."""

from __future__ import annotations

import sys

from oncegraph.cli import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", *sys.argv[1:]]
    main()
