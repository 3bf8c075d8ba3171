"""A schema-driven fuzz run (schemathesis) against /openapi.json: no input gets a 5xx,
and every response has a status, content type and body the document declares.

Bounded: at most 20 examples per operation, against a store holding a parked run, a
completed run and an abandoned one, so ids in paths sometimes exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from shop import ADMIN, Shop, auth

from oncegraph.server import create_app

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def api_schema(sqlite_shop: Shop) -> Iterator[Any]:
    sqlite_shop.parked("t-fuzz")
    sqlite_shop.completed("t-fuzz-done")
    app = create_app(sqlite_shop.app, keys={ADMIN: "admin"}, rate=1e6, burst=10**6)
    yield schemathesis.openapi.from_asgi("/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_input_gets_a_server_error(case: Any) -> None:
    if case.path.endswith(("/events", "/runs/stream", "/agui")):
        # an event stream of a live run only ends with the run; its status and
        # content type are what matter here
        response = case.call(headers=auth(ADMIN), stream=False)
        assert response.status_code < 500, response.text
        return
    case.call_and_validate(headers=auth(ADMIN), checks=CHECKS)
