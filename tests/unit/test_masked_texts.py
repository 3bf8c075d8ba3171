"""Masked values in the texts a process hands out on its own: a provider's broken
tool-call arguments, records' reprs, errors leaving the run service."""

from __future__ import annotations

import traceback

import pytest

from oncegraph import tool
from oncegraph.errors import OnceGraphError
from oncegraph.prebuilt.models.base import parse_tool_args
from oncegraph.runs.masking import MASK, Masker, mask_exception, remember_call
from oncegraph.storage.records import (
    Attempt,
    AuditRecord,
    EffectClass,
    EffectRecord,
    EffectStatus,
    RunRecord,
    RunStatus,
)

CARD = "4000056655665556"


@tool(mask=["card"])
def pay_with(order_id: str, card: str) -> str:
    """Pay an order with a card."""
    return f"paid {order_id}"


def _record() -> EffectRecord:
    return EffectRecord(
        "e1",
        "pay_with",
        EffectClass.WRITE,
        "m1:c1",
        "r1",
        "t1",
        "tools",
        "h",
        EffectStatus.FAILED,
        request={"order_id": "o-7", "card": CARD},
        error=f"card {CARD} declined",
        attempts=(Attempt(1, 1.0, 2.0, "failed", f"card {CARD} declined"),),
    )


@pytest.mark.parametrize(
    "raw", ['{"order_id": "5", "card": "' + CARD + '"', '["' + CARD + '"]', '"' + CARD + '"']
)
def test_broken_tool_arguments_are_not_quoted(raw: str) -> None:
    with pytest.raises(OnceGraphError) as caught:
        parse_tool_args(raw, tool="pay_with", model="openai/gpt-4o-mini")
    text = "".join(traceback.format_exception(caught.value))
    assert CARD not in text
    assert f"{len(raw)} characters" in str(caught.value)
    assert "nothing was run" in str(caught.value)


def test_an_effect_records_repr_masks_what_its_tool_declared() -> None:
    record = _record()
    shown = repr(record)
    assert CARD not in shown and str(record) == shown
    assert f"'card': '{MASK}'" in shown and "'o-7'" in shown  # the rest is still there
    assert record.request["card"] == CARD and CARD in (record.error or "")  # kept whole


def test_other_records_reprs_mask_by_field_and_by_value() -> None:
    run = RunRecord("r1", "t1", RunStatus.FAILED, input={"card": CARD}, error=f"{CARD} no")
    audit = AuditRecord("a1", "ops", "abandon", "run", "r1", reason=f"card {CARD} disputed")
    assert CARD not in repr(run) and run.error == f"{CARD} no"
    # the audit record holds no card field: its reason is masked by the values this
    # process's masked calls were given (what perform() remembers of each call)
    remember_call("pay_with", {"order_id": "o-7", "card": CARD}, ("card",))
    assert CARD not in repr(audit) and f"card {MASK} disputed" in repr(audit)
    assert audit.reason == f"card {CARD} disputed"


def test_an_error_and_its_causes_quote_the_masked_form() -> None:
    masker = Masker({"pay_with": ("card",)}).learn_effect(_record())
    try:
        try:
            raise ValueError(f"card {CARD} declined")
        except ValueError as inner:
            raise OnceGraphError(f"node 'tools' raised ValueError: card {CARD} declined") from inner
    except OnceGraphError as exc:
        mask_exception(exc, masker)
        text = "".join(traceback.format_exception(exc))
    assert CARD not in text and f"card {MASK} declined" in text


def test_records_imported_alone_still_mask_their_repr() -> None:
    """The storage layer does not import the run layer's masking; importing a record
    (which imports the package) installs it, so no fresh process logs a record unmasked."""
    import subprocess
    import sys

    probe = (
        "import oncegraph.storage.records as r; installed = list(r._REPR); "
        "import oncegraph.runs.masking as m; print(installed == [m.masked_repr])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
