"""The app ``oncegraph compensate`` is pointed at in the CLI test: the shop of
``_compensation_app.py`` on ``CLI_COMP_DB`` (a SQLite path or a PostgreSQL DSN) over
the fake provider at ``CLI_COMP_PROVIDER``."""

from __future__ import annotations

import os

from _cli_shop import store
from _compensation_app import Shop

app = Shop(store(os.environ["CLI_COMP_DB"]), os.environ["CLI_COMP_PROVIDER"]).app
