"""Tool schemas are pydantic's, parameter descriptions come from ``Field`` or the docstring
(Google, NumPy, reST), arguments are validated and coerced, and a tool needs a description.

The schema test compares against a pydantic model written out by hand (independently of
``oncegraph.tools.schema``), so "equals what pydantic produces" is checked, not assumed.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from oncegraph import tool
from oncegraph.errors import ConfigError, ToolArgumentsError
from oncegraph.tools.docstrings import parse_docstring


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(TypedDict):
    street: str
    zip_code: int


@dataclasses.dataclass
class Item:
    sku: str
    quantity: int = 1


class Money(BaseModel):
    amount: float
    currency: str = "EUR"


def ship(
    color: Color,
    deliver_on: datetime.date,
    address: Address,
    item: Item,
    speed: Literal["standard", "express"],
    note: str | None = None,
    price: Annotated[Money | None, Field(description="What the customer pays.")] = None,
    gift: bool = False,
) -> dict[str, Any]:
    """Ship an item to a customer.

    The warehouse packs it the same day.

    Args:
        color: Color of the wrapping paper.
        deliver_on: The day the parcel must arrive,
            at the latest.
        address (Address): Where to send it.
        item: What to send.
        speed: How fast.
        price: Overridden by the Field's description.

    Returns:
        The shipment.
    """
    return {}


class ExpectedShipArgs(BaseModel):  # written out by hand, as a pydantic user would
    model_config = ConfigDict(extra="forbid")

    color: Color = Field(description="Color of the wrapping paper.")
    deliver_on: datetime.date = Field(description="The day the parcel must arrive, at the latest.")
    address: Address = Field(description="Where to send it.")
    item: Item = Field(description="What to send.")
    speed: Literal["standard", "express"] = Field(description="How fast.")
    note: str | None = None
    price: Money | None = Field(None, description="What the customer pays.")
    gift: bool = False


def test_schema_equals_what_pydantic_produces() -> None:
    t = tool(ship)
    expected = ExpectedShipArgs.model_json_schema()
    expected.pop("title")
    assert t.parameters == expected
    # spot checks, so a pydantic upgrade that changes both sides still shows the shape
    props = t.parameters["properties"]
    assert t.parameters["$defs"]["Color"]["enum"] == ["red", "green"]
    assert props["deliver_on"]["format"] == "date"
    assert props["speed"]["enum"] == ["standard", "express"]
    assert props["note"]["default"] is None
    assert props["price"]["description"] == "What the customer pays."
    assert t.parameters["required"] == ["color", "deliver_on", "address", "item", "speed"]
    assert t.description == "Ship an item to a customer.\n\nThe warehouse packs it the same day."
    assert t.spec["parameters"] is t.parameters


def test_arguments_are_validated_and_coerced() -> None:
    t = tool(ship)
    kwargs = t.validate(
        {
            "color": "red",
            "deliver_on": "2026-12-24",
            "address": {"street": "Main St 1", "zip_code": "10115"},
            "item": {"sku": "mug"},
            "speed": "express",
            "price": {"amount": "19.90"},
        }
    )
    assert kwargs["color"] is Color.RED
    assert kwargs["deliver_on"] == datetime.date(2026, 12, 24)
    assert kwargs["address"] == {"street": "Main St 1", "zip_code": 10115}
    assert kwargs["item"] == Item("mug", 1)
    assert kwargs["price"] == Money(amount=19.9)
    assert kwargs["note"] is None and kwargs["gift"] is False  # defaults filled in


def test_bad_arguments_name_each_argument_and_problem() -> None:
    t = tool(ship)
    with pytest.raises(ToolArgumentsError) as caught:
        t.validate(
            {
                "color": "purple",
                "deliver_on": "someday",
                "address": {"street": "x"},
                "item": {"sku": "mug"},
                "speed": "express",
                "tracking": True,
            }
        )
    text = str(caught.value)
    assert text.startswith("invalid arguments for ship: ")
    assert "color: Input should be 'red' or 'green' (got 'purple')" in text
    assert "deliver_on: " in text and "(got 'someday')" in text
    assert "address.zip_code: Field required" in text
    assert "tracking: Extra inputs are not permitted" in text
    assert caught.value.tool_name == "ship"
    with pytest.raises(ToolArgumentsError, match="must be a JSON object"):
        t.validate(["red"])
    with pytest.raises(ToolArgumentsError, match="speed: Field required"):
        t.validate({"color": "red", "deliver_on": "2026-01-01", "address": {}, "item": {}})


def test_var_keyword_accepts_extra_arguments() -> None:
    def tag(name: str, **labels: str) -> str:
        """Tag a resource."""
        return name

    t = tool(tag)
    assert t.validate({"name": "a", "team": "ops"}) == {"name": "a", "team": "ops"}
    assert t.parameters["additionalProperties"] is True


def test_reserved_parameter_names_keep_their_names() -> None:
    def query(json: str, schema: int = 2, _cursor: str = "") -> str:
        """Run a query.

        Args:
            json: The query as JSON.
        """
        return json

    t = tool(query)
    assert list(t.parameters["properties"]) == ["json", "schema", "_cursor"]
    assert t.parameters["properties"]["json"]["description"] == "The query as JSON."
    assert t.validate({"json": "{}", "_cursor": "c"}) == {"json": "{}", "schema": 2, "_cursor": "c"}
    assert t.param_names == ("json", "schema", "_cursor")


def test_field_default_is_honoured() -> None:
    def page(size: int = Field(10, description="Rows per page.", le=100)) -> int:
        """Fetch a page."""
        return size

    t = tool(page)
    assert t.parameters["properties"]["size"] == {
        "default": 10,
        "description": "Rows per page.",
        "maximum": 100,
        "title": "Size",
        "type": "integer",
    }
    assert t.validate({}) == {"size": 10}
    with pytest.raises(ToolArgumentsError, match="size: Input should be less than or equal"):
        t.validate({"size": 1000})


class Opaque:
    """Not a type pydantic can validate or show as JSON schema."""


def test_a_type_pydantic_cannot_handle_names_the_parameter() -> None:
    def use(handle: Opaque, n: int) -> None:
        """Use a handle."""

    with pytest.raises(ConfigError, match=r"parameter 'handle' .* is the problem"):
        tool(use)


def test_an_annotation_that_cannot_be_resolved_names_the_parameter() -> None:
    def use(handle: NoSuchType, n: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        """Use a handle."""

    with pytest.raises(ConfigError, match=r"annotation 'NoSuchType' of 'handle'"):
        tool(use)


def test_positional_only_parameter_is_refused() -> None:
    def f(x: int, /) -> int:
        """Double."""
        return 2 * x

    with pytest.raises(ConfigError, match="positional-only"):
        tool(f)


# -- descriptions ---------------------------------------------------------------------


def test_a_tool_without_a_description_is_an_error_naming_the_fix() -> None:
    def refund(order_id: str) -> str:
        return order_id

    with pytest.raises(ConfigError, match=r"has no description.*docstring.*description="):
        tool(refund)
    assert tool(description="Refund an order.")(refund).description == "Refund an order."
    assert tool(description="")(refund).description == ""  # the explicit opt-out


def test_lambda_needs_a_name() -> None:
    with pytest.raises(ConfigError, match="pass name="):
        tool(lambda x: x)
    assert tool(name="echo", description="Echo.")(lambda x: x).name == "echo"


GOOGLE = """Refund an order.

    Moves money.

    Args:
        order_id (str): The order to refund.
        amount: The amount, in the order's
            currency.
        *reasons: Why.
        **meta: Extra labels.

    Returns:
        str: A receipt.

    Raises:
        ValueError: never.
    """

NUMPY = """Refund an order.

    Moves money.

    Parameters
    ----------
    order_id : str
        The order to refund.
    amount : float, optional
        The amount, in the order's
        currency.
    *reasons
        Why.
    **meta : dict
        Extra labels.

    Returns
    -------
    str
        A receipt.
    """

REST = """Refund an order.

    Moves money.

    :param order_id: The order to refund.
    :type order_id: str
    :param float amount: The amount, in the order's
        currency.
    :param reasons: Why.
    :param meta: Extra labels.
    :returns: A receipt.
    :rtype: str
    """


@pytest.mark.parametrize("doc", [GOOGLE, NUMPY, REST], ids=["google", "numpy", "rest"])
def test_docstring_styles(doc: str) -> None:
    parsed = parse_docstring(doc)
    assert parsed.description == "Refund an order.\n\nMoves money."
    assert parsed.params == {
        "order_id": "The order to refund.",
        "amount": "The amount, in the order's currency.",
        "reasons": "Why.",
        "meta": "Extra labels.",
    }


@pytest.mark.parametrize("doc", [GOOGLE, NUMPY, REST], ids=["google", "numpy", "rest"])
def test_docstring_descriptions_reach_the_schema(doc: str) -> None:
    def refund(order_id: str, amount: float = 0.0) -> str:
        return order_id

    refund.__doc__ = doc
    t = tool(refund)
    assert t.description == "Refund an order.\n\nMoves money."
    props = t.parameters["properties"]
    assert props["order_id"]["description"] == "The order to refund."
    assert props["amount"]["description"] == "The amount, in the order's currency."


def test_docstring_edge_cases() -> None:
    assert parse_docstring(None).description == ""
    assert parse_docstring("   ").params == {}
    only_summary = parse_docstring("Look an order up.")
    assert only_summary.description == "Look an order up." and only_summary.params == {}
    two = parse_docstring("Sum.\n\nParameters\n----------\na, b : int\n    Numbers.\n")
    assert two.params == {"a": "Numbers.", "b": "Numbers."}
    other_sections_only = parse_docstring("Do it.\n\nExamples:\n    do(1)\n")
    assert other_sections_only.description == "Do it." and other_sections_only.params == {}
