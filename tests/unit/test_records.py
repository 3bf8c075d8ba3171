"""Stored records: copies keep every field, clean free text, and refuse unknown fields."""

from __future__ import annotations

import dataclasses

import pytest

from oncegraph.storage.records import Attempt, EffectClass, EffectRecord, EffectStatus


def _record() -> EffectRecord:
    return EffectRecord(
        "e1", "refund", EffectClass.WRITE, "m1:c1", "run_1", "t1", "tools", "h",
        EffectStatus.PENDING, request={"order": 1}, attempts=(Attempt(1, 1.0),),
    )  # fmt: skip


def test_replace_is_dataclasses_replace() -> None:
    record = _record()
    changes = {"status": EffectStatus.COMPLETED, "result": {"ok": True}, "row_version": 2}
    assert record.replace(**changes) == dataclasses.replace(record, **changes)
    assert record.replace() == record and record.replace() is not record
    assert record.status is EffectStatus.PENDING, "the original is unchanged"


def test_replace_cleans_free_text_like_the_constructor() -> None:
    got = _record().replace(error="bad\x00byte", provider_reference="ref\x00")
    assert (got.error, got.provider_reference) == ("bad\\x00byte", "ref\\x00")


def test_replace_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="nope"):
        _record().replace(nope=1)


def test_replace_sets_each_field_alone_and_keeps_the_others() -> None:
    record = _record()
    for field in dataclasses.fields(EffectRecord):
        value = 42 if field.name in ("row_version", "created_at", "updated_at") else "x"
        got = record.replace(**{field.name: value})
        assert got == dataclasses.replace(record, **{field.name: value}), field.name
