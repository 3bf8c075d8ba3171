"""``oncegraph redeliver`` and the recipient's dedup window, at the command line (SQLite):
a same-key redelivery whose window is unknown is refused, naming --past-dedup-window;
with it, it is sent; ``probe-recipient --record-for`` records a measured window that the
next preview uses. Every command is a real ``python -m oncegraph`` process against the
fake payment provider (a real HTTP server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import SHOP, as_json, og, ok
from test_cli_operator import park

from oncegraph.testing.provider import FakeProvider, ProviderClient

pytestmark = pytest.mark.slow  # real OS processes: scheduled first under -n auto

APP = f"{SHOP}:app"


def test_unknown_window_refused_then_sent_with_the_flag_then_measured(tmp_path: Path) -> None:
    database = str(tmp_path / "ops.db")
    with FakeProvider() as provider:
        _, effect_id = park(database, provider)
        client = ProviderClient(provider.url)
        env = {
            "CLI_SHOP_DB": database,
            "CLI_SHOP_PROVIDER": provider.url,
            "CLI_SHOP_DEDUP_WINDOW": "unknown",
        }
        refused = og("redeliver", effect_id, "--reason", "r", "--yes", "--app", APP, env=env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        said = " ".join((refused.stdout + refused.stderr).split())
        assert "WARNING:" in said
        assert "this tool does not say how long its recipient keeps a key" in said
        assert "recipient says: not asked: the tool has no reconcile hook" in said
        assert "again with --past-dedup-window" in said and "Nothing was sent" in said
        assert client.stats()["replayed"] == 0 and client.stats()["performed"] == 1

        sent = as_json(
            "redeliver", effect_id, "--reason", "r", "--yes", "--past-dedup-window",
            "--app", APP, env=env,
        )
        assert sent["preview"]["past_dedup_window"] is True
        assert client.stats()["replayed"] == 1, "sent once, with the same key"

        probe = ok(
            "probe-recipient", provider.url + "/v1/charges",
            "--payload", '{"amount": 10, "currency": "eur"}',
            "--changed-payload", '{"amount": 11, "currency": "eur"}',
            "--retention", "0.2", "--record-for", "refund", "--actor", "ops",
            "--database", database,
        )
        assert "recorded for tool refund" in probe.stdout
        (measured,) = [
            a for a in as_json("audit", "--database", database)
            if a["action"] == "recipient_measured"
        ]
        assert measured["target_id"] == "refund" and measured["actor"] == "cli:ops"
        assert measured["details"]["seconds"] >= 0.2
        preview = as_json(
            "redeliver", effect_id, "--reason", "r", "--preview", "--app", APP, env=env
        )
        assert "(measured on " in preview["dedup_method"]
        assert preview["past_dedup_window"] is True  # 0.2 s measured; sent long before


def test_record_for_without_retention_is_refused_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    with FakeProvider() as provider:
        refused = og(
            "probe-recipient", provider.url + "/v1/charges",
            "--payload", "{}", "--changed-payload", '{"a": 1}',
            "--record-for", "refund", "--database", str(tmp_path / "x.db"),
        )
        assert refused.returncode == 2 and "--retention" in refused.stdout + refused.stderr
        assert ProviderClient(provider.url).stats()["performed"] == 0
