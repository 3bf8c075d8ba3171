"""The UI never tells an operator to write Python: the library's messages name the
app's calls; the UI's pages name the buttons that do the same."""

from __future__ import annotations

import re

import pytest
from shop import OPERATOR, Shop
from starlette.testclient import TestClient
from test_ui import form_token, login

from oncegraph.server.wording import for_operator

PYTHON = re.compile(r"app\.\w+\(|invoke\(None")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "record what you found with app.resolve_effect(effect_id, 'done' | 'not_done', "
            "actor=..., reason=...), then continue it with app.resume(run_id, actor=...)",
            'record what you found with the "Resolve effect" button, then continue it with '
            'the "Continue run" button',
        ),
        (
            "continue it with app.resume(run_id, ...) or invoke(None, config).",
            'continue it with the "Continue run" button.',
        ),
        (
            "Abandon it (app.abandon({'thread_id': 't'})) first",
            'Abandon it (the "Abandon run" button) first',
        ),
        (
            "Wait for it (app.get_run(run_id).status); then",
            "Wait for it (see the run's page); then",
        ),
        ("the node split(x) raised", "the node split(x) raised"),  # prose stays
    ],
)
def test_calls_become_buttons(text: str, says: str) -> None:
    assert for_operator(text) == says


def test_an_error_page_names_buttons_not_python(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    """New input on a thread whose run is parked is refused with a message that, in the
    library, names ``app.resolve_effect`` and ``app.resume``; the UI's Continue on the
    parked run says the same in buttons."""
    client = sqlite_client
    run_id, _ = sqlite_shop.parked("t-words")
    login(client, OPERATOR)
    page = client.get(f"/ui/runs/{run_id}").text
    out = client.post(
        f"/ui/runs/{run_id}/continue", data={"reason": "again", "csrf": form_token(page)}
    )
    assert out.status_code == 200
    assert "needs_review" in out.text
    found = PYTHON.search(out.text)
    assert found is None, out.text[found.start() - 300 : found.end() + 200]
    assert '"Resolve effect" button' in out.text.replace("&#34;", '"')
