"""``python -m oncegraph.worker module:app --concurrency N``."""

from __future__ import annotations

import sys

from oncegraph.worker.cli import main

if __name__ == "__main__":
    sys.exit(main())
