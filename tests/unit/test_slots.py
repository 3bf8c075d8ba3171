"""``slot_init``: a frozen slotted dataclass keeps its parameters, defaults and
frozenness with the faster ``__init__``; classes it cannot serve are refused."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from oncegraph._slots import slot_init


@dataclasses.dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: list[int] = dataclasses.field(default_factory=list)
    c: str = "c"


@slot_init
@dataclasses.dataclass(frozen=True, slots=True)
class Fast:
    a: int
    b: list[int] = dataclasses.field(default_factory=list)
    c: str = "c"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((1,), {}), ((1, [2]), {}), ((1,), {"c": "x"}), ((), {"a": 1, "b": [3], "c": "y"})],
)
def test_same_values_as_the_dataclass_init(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    fast, plain = Fast(*args, **kwargs), Plain(*args, **kwargs)
    assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
    assert fast == Fast(*args, **kwargs) and hash(fast.c) == hash(plain.c)


def test_same_signature_fresh_factory_values_and_still_frozen() -> None:
    assert list(inspect.signature(Fast).parameters) == ["a", "b", "c"]
    one, two = Fast(1), Fast(1)
    assert one.b == [] and one.b is not two.b  # the factory runs per instance
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        Fast()  # type: ignore[call-arg]


def test_post_init_runs_after_the_fields_are_set() -> None:
    seen: list[tuple[int, str]] = []

    @slot_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int
        b: str = "b"

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("a must not be negative")
            seen.append((self.a, self.b))

    assert Checked(1).b == "b" and seen == [(1, "b")]
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)
    assert seen == [(1, "b")]


def test_classes_it_cannot_serve_are_refused() -> None:
    with pytest.raises(TypeError, match="InitVar"):

        @slot_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class Passed:
            a: int
            scale: dataclasses.InitVar[int] = 1

            def __post_init__(self, scale: int) -> None:
                pass

    with pytest.raises(TypeError, match="slotted"):

        @slot_init
        @dataclasses.dataclass(frozen=True)
        class NoSlots:
            a: int

    with pytest.raises(TypeError, match="cannot build"):

        @slot_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class KwOnly:
            a: int = dataclasses.field(kw_only=True)
