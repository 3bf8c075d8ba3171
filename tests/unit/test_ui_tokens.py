"""The UI's request checks as pure functions: origins, form tokens, flash messages."""

from __future__ import annotations

import secrets

from oncegraph.server import flash, forms

KEY = secrets.token_bytes(32)


def test_origins_compare_as_browsers_send_them() -> None:
    assert forms.origin_of("HTTP://Ops.Example.com:80/ui/runs?x=1") == "http://ops.example.com"
    assert forms.origin_of("https://ops.example.com:443") == "https://ops.example.com"
    assert forms.origin_of("https://ops.example.com:8443/") == "https://ops.example.com:8443"
    assert forms.origin_of("http://[::1]:8000/ui") == "http://[::1]:8000"
    for bad in (
        "null",
        "",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "//evil",
        "http://:80",
        "http://x:99999",
    ):
        assert forms.origin_of(bad) is None, bad
    own = "http://127.0.0.1:8765/"
    assert forms.same_origin({"origin": "http://127.0.0.1:8765"}, own)
    assert not forms.same_origin({"origin": "http://127.0.0.1:8766"}, own)  # another port
    assert not forms.same_origin({"origin": "null", "referer": own}, own)  # Origin decides
    assert forms.same_origin({"referer": "http://127.0.0.1:8765/ui/runs/x"}, own)
    assert not forms.same_origin({}, own)
    allowed = forms.parse_origins("https://ops.example.com, https://ops2.example.com:8443")
    assert forms.same_origin({"origin": "https://ops2.example.com:8443"}, own, allowed)
    assert not forms.same_origin({"origin": "http://127.0.0.1:8765"}, own, allowed)


def test_form_tokens_are_bound_to_the_login_and_the_server_key() -> None:
    token = forms.token(KEY, "admin-key-0001")
    assert forms.token_ok(KEY, "admin-key-0001", token)
    assert not forms.token_ok(KEY, "viewer-key-0001", token)
    assert not forms.token_ok(secrets.token_bytes(32), "admin-key-0001", token)
    assert not forms.token_ok(KEY, None, token)
    for sent in (None, "", token[:-1], token + "x", "é" + token):
        assert not forms.token_ok(KEY, "admin-key-0001", sent)
    assert "admin-key" not in token


def test_a_flash_message_is_read_once_by_its_own_login_and_run_before_it_expires() -> None:
    sealed = flash.seal(KEY, "admin-key-0001", "run_1", "Effect e resolved: completed.", at=100.0)
    assert flash.unseal(KEY, "admin-key-0001", "run_1", sealed, at=101.0) == (
        "Effect e resolved: completed."
    )
    assert flash.unseal(KEY, "viewer-key-0001", "run_1", sealed, at=101.0) is None
    assert flash.unseal(KEY, "admin-key-0001", "run_2", sealed, at=101.0) is None
    assert flash.unseal(KEY, "admin-key-0001", "run_1", sealed, at=100.0 + flash.TTL + 1) is None
    body, _, mac = sealed.partition(".")
    assert flash.unseal(KEY, "admin-key-0001", "run_1", body + "." + mac[::-1], at=101.0) is None
    assert flash.unseal(KEY, "admin-key-0001", "run_1", "plain text", at=101.0) is None
    long = flash.seal(KEY, "k" * 10, "run_1", "é" * 5000, at=0.0)
    shown = flash.unseal(KEY, "k" * 10, "run_1", long, at=1.0)
    assert shown is not None and shown.endswith("...") and len(shown.encode()) <= flash.MAX_BYTES
    assert len(long) < 4000  # fits a cookie
