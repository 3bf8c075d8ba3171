"""What a tool declared secret, masked in every view a person reads (guarantee 14).

A tool's ``mask=[...]`` fields (and ``effect(..., mask=[...])``'s) are replaced by
``"***"`` wherever an operator view shows them: effect records (request, result,
``error``, ``attempts[].error``), state snapshots (``get_state``, ``get_state_history``:
values, metadata, interrupts, tasks), the model effect's recorded response, runs'
inputs and errors, and audit records.

Masking is a VIEW. The stored data stays complete: resume and replay need it, and
nothing the driver reads is ever masked. A :class:`Masker` is built per view call:

1. it learns the secret VALUES: the masked fields' values in the unmasked requests of
   the effects involved (the thread's or run's effect records), and in every tool call
   it is shown (a mapping ``{"name": <masked tool>, "args": {...}}``: assistant
   messages' ``tool_calls`` as dicts, ``MessageDict`` or LangChain messages, a model
   effect's response, an approval request);
2. it copies the viewed value, masking the masked fields of every such tool call by
   name, and replacing every learned secret value (as text, at least
   :data:`MIN_SECRET` characters long) inside every string: an error message, a user
   message, a tool result, the JSON arguments of a provider's raw tool call.

A value shorter than :data:`MIN_SECRET` characters is masked in its field only: replacing
it inside free text would mangle the text without protecting anything worth the name.

Where the masked fields come from: the graph's nodes (a node whose callable has an
``effect_masks`` mapping, as ``ToolNode`` does; subgraphs included), and for
``effect(..., mask=[...])`` the effect's own stored request, which carries the
declaration (``{"args", "kwargs", "mask": {"fields", "positions"}}``).
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from oncegraph.graph.spec import GraphSpec
from oncegraph.ledger.masks import (
    MASK,
    declared_mask,
    find_call_values_with,
    mask_value,
    registered,
    remember_call,
    remembered,
)
from oncegraph.observe.tracing import mask_spans_with
from oncegraph.runs.views import StateSnapshot
from oncegraph.storage.records import (
    AuditRecord,
    EffectPayload,
    EffectRecord,
    RunRecord,
    mask_reprs_with,
)

MIN_SECRET = 4  # shorter masked values are masked in their field, not inside free text

Masks = Mapping[str, tuple[str, ...]]  # effect type (tool name) -> field names


def masks_of(spec: GraphSpec | None) -> dict[str, tuple[str, ...]]:
    """Every effect type's masked fields, from the nodes (and subgraphs) declaring them."""
    out: dict[str, tuple[str, ...]] = {}
    if spec is None:
        return out
    for node in spec.nodes.values():
        declared = getattr(node.fn, "effect_masks", None)
        if isinstance(declared, Mapping):
            for effect_type, fields in declared.items():
                if fields:
                    out[str(effect_type)] = tuple(fields)
        child = getattr(node.subgraph, "spec", None)
        if isinstance(child, GraphSpec):
            for effect_type, fields in masks_of(child).items():
                out.setdefault(effect_type, fields)
    return out


def _leaves(value: Any) -> Iterator[str]:
    """The scalar values inside ``value``, as text (what a secret looks like in a string)."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str | int | float):
        yield str(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)


def _field_values(value: Any, fields: tuple[str, ...]) -> Iterator[str]:
    """The leaves of every key in ``fields`` inside ``value``, at any depth."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k in fields:
                yield from _leaves(v)
            else:
                yield from _field_values(v, fields)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _field_values(v, fields)


def _is_model(value: Any) -> bool:
    """A pydantic model instance (LangChain messages are), without importing pydantic."""
    return hasattr(type(value), "model_fields") and hasattr(value, "model_copy")


def _children(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        yield from value.values()
    elif isinstance(value, list | tuple):
        yield from value
    elif _is_model(value):
        for name in type(value).model_fields:
            yield getattr(value, name, None)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield getattr(value, f.name, None)


class Masker:
    """Masks one view. See the module docstring: learn first, then copy masked."""

    def __init__(self, masks: Masks) -> None:
        self.masks = masks
        self._secrets: set[str] = set()
        self._ordered: tuple[str, ...] | None = ()

    # -- learning the secret values ----------------------------------------------------------

    def add_secret(self, text: str) -> None:
        if len(text) >= MIN_SECRET and text not in self._secrets:
            self._secrets.add(text)
            self._ordered = None

    def _tool_call_fields(self, value: Mapping[Any, Any]) -> tuple[str, ...]:
        name = value.get("name")
        if isinstance(name, str) and isinstance(value.get("args"), Mapping):
            return self.masks.get(name, ())
        return ()

    def learn(self, value: Any) -> Masker:
        """Learn the masked arguments of every tool call inside ``value``."""
        if not self.masks:
            return self
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str | int | float | bool) or item is None:
                continue
            if isinstance(item, Mapping):
                fields = self._tool_call_fields(item)
                if fields:
                    for secret in _field_values(item["args"], fields):
                        self.add_secret(secret)
            stack.extend(_children(item))
        return self

    def fields_of(self, record: EffectRecord) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The masked fields of ``record``'s effect type, and its declared ones."""
        fields, positions = declared_mask(record.request)
        return (*self.masks.get(record.effect_type, ()), *fields), positions

    def learn_effect(self, record: EffectRecord) -> Masker:
        """Learn the masked values of ``record``'s (unmasked) request, and its tool calls."""
        return self.learn_payload(EffectPayload(record.effect_type, record.request, record.result))

    def learn_payload(self, payload: EffectPayload) -> Masker:
        """:meth:`learn_effect` from an effect's type, request and result alone."""
        effect_type, request, result = payload
        fields, positions = declared_mask(request)
        fields = (*self.masks.get(effect_type, ()), *fields)
        if fields:
            for secret in _field_values(request, fields):
                self.add_secret(secret)
        if positions and isinstance(request, Mapping) and isinstance(request["args"], list):
            for i in positions:
                if 0 <= i < len(request["args"]):
                    for secret in _leaves(request["args"][i]):
                        self.add_secret(secret)
        self.learn(request)
        self.learn(result)
        return self

    def learn_arguments(self, payload: EffectPayload) -> Masker:
        """Take every argument value of a tool's effect as secret (a model's effect
        excepted): what a view does that does not know the tools' masks (the CLI
        without its app), so that no masked value is shown in an error or a reason."""
        effect_type, request, _ = payload
        if not effect_type.startswith("model:"):
            for secret in _leaves(request):
                self.add_secret(secret)
        return self

    def learn_effects(self, records: Iterable[EffectRecord]) -> Masker:
        for record in records:
            self.learn_effect(record)
        return self

    def learn_call(self, effect_type: str, request: Any, fields: Iterable[str] = ()) -> Masker:
        """Learn the masked values of one call about to be made (a tracing span's): its
        request's ``fields`` (the tool's ``mask``) and what the request declares."""
        fields = (*self.masks.get(effect_type, ()), *fields, *declared_mask(request)[0])
        if fields:
            for secret in _field_values(request, fields):
                self.add_secret(secret)
        return self.learn_payload(EffectPayload(effect_type, request, None))

    def learn_call_values(
        self, effect_type: str, request: Any, fields: Iterable[str] = ()
    ) -> list[str]:
        """The masked values of one call's request (as :meth:`learn_call` finds them)."""
        before = set(self._secrets)
        self.learn_call(effect_type, request, fields)
        return [s for s in self._secrets if s not in before]

    def absorb(self, other: Masker) -> Masker:
        """Learn every secret value ``other`` knows (one view gathering several)."""
        for secret in other._secrets:
            self.add_secret(secret)
        return self

    @property
    def active(self) -> bool:
        """False when there is nothing to mask (the view can be shown as it is)."""
        return bool(self.masks or self._secrets)

    # -- masking -----------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with every learned secret value replaced by ``"***"``."""
        if not self._secrets:
            return text
        if self._ordered is None:  # longest first: a secret inside another goes last
            self._ordered = tuple(sorted(self._secrets, key=len, reverse=True))
        for secret in self._ordered:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def opt_text(self, text: str | None) -> str | None:
        return None if text is None else self.text(text)

    def error(self, exc: BaseException) -> str:
        """``"<type>: <message>"`` of ``exc``, masked: how an error leaves the process."""
        text = str(exc)
        kind = type(exc).__name__
        return self.text(f"{kind}: {text}" if text else kind)

    def traceback(self, exc: BaseException) -> str:
        """``exc``'s traceback as text, masked (its messages, its chained causes)."""
        return self.text("".join(traceback.format_exception(exc)))

    def value(self, value: Any) -> Any:
        """A masked copy of ``value`` (see the module docstring); containers keep their
        type (``MessageDict``, named tuples, dataclasses, LangChain messages)."""
        if not self.active:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return MASK if str(value) in self._secrets else value
        if isinstance(value, Mapping):
            out = {k: self._walk(v) for k, v in value.items()}
            fields = self._tool_call_fields(value)
            if fields:
                out["args"] = self._walk(mask_value(value["args"], fields))
            if isinstance(value, dict) and type(value) is not dict:
                try:
                    return type(value)(out)  # MessageDict and other dict subclasses
                except Exception:
                    return out
            return out
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        if isinstance(value, StateSnapshot):  # a subgraph's, in a task: keep its run id
            return self.snapshot(value)
        if isinstance(value, tuple):
            items = [self._walk(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if _is_model(value):
            update = {n: self._walk(getattr(value, n, None)) for n in type(value).model_fields}
            return value.model_copy(update=update)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {
                f.name: self._walk(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if f.init
            }
            try:
                return dataclasses.replace(value, **changes)
            except Exception:
                return value
        return value

    def effect(self, record: EffectRecord) -> EffectRecord:
        """``record`` as an operator sees it: masked request, result, errors."""
        if not self.active:
            return record
        fields, positions = self.fields_of(record)
        request = mask_value(record.request, fields) if fields else record.request
        if positions and isinstance(request, Mapping) and isinstance(request.get("args"), list):
            args = list(request["args"])
            for i in positions:
                if 0 <= i < len(args):
                    args[i] = MASK
            request = {**request, "args": args}
        result = mask_value(record.result, fields) if fields else record.result
        return record.replace(
            request=self._walk(request),
            result=self._walk(result),
            error=self.opt_text(record.error),
            recipient=self.opt_text(record.recipient),
            provider_reference=self.opt_text(record.provider_reference),
            attempts=tuple(
                dataclasses.replace(a, error=self.opt_text(a.error)) for a in record.attempts
            ),
        )

    def snapshot(self, snap: StateSnapshot) -> StateSnapshot:
        if not self.active:
            return snap
        masked: StateSnapshot = snap._replace(
            values=self._walk(snap.values),
            metadata=self._walk(snap.metadata),
            interrupts=self._walk(snap.interrupts),
            tasks=self._walk(snap.tasks),
        )
        return masked

    def run(self, run: RunRecord) -> RunRecord:
        if not self.active:
            return run
        return run.replace(input=self._walk(run.input), error=self.opt_text(run.error))

    def audit(self, record: AuditRecord) -> AuditRecord:
        if not self.active:
            return record
        masked: AuditRecord = dataclasses.replace(
            record, details=self._walk(record.details), reason=self.opt_text(record.reason)
        )
        return masked


def process_masker() -> Masker:
    """A masker of what this process knows without a graph or a store: the fields every
    tool made here declared, and the values its masked calls were given (a record's
    repr, a span)."""
    masker = Masker(registered())
    for secret in remembered():
        masker.add_secret(secret)
    return masker


def _call_values(effect_type: str, request: Any, fields: tuple[str, ...]) -> list[str]:
    return Masker({}).learn_call_values(effect_type, request, fields)


def masked_repr(record: Any) -> str:
    """The repr of a record (effect, run, checkpoint, audit, snapshot) with the fields
    every tool made in this process declared masked, and the values its own tool calls
    and requests carry in them, replaced by ``"***"``: a record logged with ``"%s"``
    (a ``reconcile`` hook's) tells no secret. The record itself stays complete."""
    masker = process_masker()
    if isinstance(record, EffectRecord):
        shown: Any = masker.learn_effect(record).effect(record)
    else:
        fields = tuple(sorted({f for declared in masker.masks.values() for f in declared}))
        shown = record
        if masker.active:
            values = _fields_of(record)
            masker.learn(values)
            for secret in _field_values(values, fields):  # a masked key's values, anywhere
                masker.add_secret(secret)
            shown = _FieldsMasked(record, masker, fields)
    return (
        type(record).__name__
        + "("
        + ", ".join(f"{name}={value!r}" for name, value in _fields_of(shown).items())
        + ")"
    )


mask_reprs_with(masked_repr)  # every record's repr in this process goes through it
mask_spans_with(process_masker)  # every span's masker starts from it
find_call_values_with(_call_values)  # ledger.masks.remember_call (perform) finds them so

class _FieldsMasked:
    """A record's fields, masked (for :func:`masked_repr`)."""

    def __init__(self, record: Any, masker: Masker, fields: tuple[str, ...]) -> None:
        self.values = {
            name: masker.value(mask_value(value, fields) if fields else value)
            for name, value in _fields_of(record).items()
        }


def _fields_of(record: Any) -> dict[str, Any]:
    if isinstance(record, _FieldsMasked):
        return record.values
    if isinstance(record, StateSnapshot):
        return {**record._asdict(), "run_id": record.run_id}
    if record is None or not dataclasses.is_dataclass(record):
        return {}
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.repr}


def mask_exception(exc: BaseException, masker: Masker) -> BaseException:
    """Rewrite the text of ``exc`` and of the errors it chains (``__cause__``,
    ``__context__``) so it quotes no learned secret: an error leaving the run service
    (raised to the caller, logged, printed with its traceback) shows the masked form.
    Only string arguments change; the error's type and other attributes stay."""
    if not masker.active:
        return exc
    seen: set[int] = set()
    item: BaseException | None = exc
    todo = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        args = tuple(masker.text(a) if isinstance(a, str) else a for a in item.args)
        if args != item.args:
            try:
                item.args = args
            except (AttributeError, TypeError):  # pragma: no cover - a frozen error
                pass
        todo.extend(e for e in (item.__cause__, item.__context__) if e is not None)
    return exc


def mask_effect(record: EffectRecord, masks: Masks) -> EffectRecord:
    """One effect record masked on its own (its request's values are the secrets)."""
    return Masker(masks).learn_effect(record).effect(record)


__all__ = [
    "MASK",
    "MIN_SECRET",
    "Masker",
    "Masks",
    "mask_effect",
    "mask_exception",
    "mask_value",
    "masked_repr",
    "masks_of",
    "process_masker",
    "remember_call",
]
