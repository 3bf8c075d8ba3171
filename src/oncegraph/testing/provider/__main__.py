"""``python -m oncegraph.testing.provider``: serve the fake provider until SIGTERM or SIGINT.

The options are those of :func:`oncegraph.testing.provider.process.main`
(``--host``, ``--port``, ``--port-file``, ``--state-file``, ``--exit-with-parent``,
``--changed-payload``, ``--key-ttl``).
"""

from __future__ import annotations

from oncegraph.testing.provider.process import main

if __name__ == "__main__":
    raise SystemExit(main())
