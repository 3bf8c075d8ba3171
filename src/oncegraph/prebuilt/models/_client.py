"""What the SDK-backed adapters share: a per-event-loop client, its closing, and the
``ConfigError`` (naming the API-key variable) when the SDK refuses to build one.

``SDKChatModel`` is their base (``model``, ``name``, ``params``, ``aclose``);
``sdk_options`` is the keyword set of the httpx-based SDKs (``openai``,
``anthropic``); :func:`answer` reads a response into a ``ModelResponse`` through each
provider's :class:`Wire` (where its SDK keeps id, model and token counts). Not public API.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from oncegraph._loopbound import LoopBound
from oncegraph.errors import ConfigError
from oncegraph.messages import ToolCall
from oncegraph.prebuilt.models.base import ModelResponse, served_model, token_usage

_T = TypeVar("_T")
_C = TypeVar("_C")


@dataclass(slots=True)
class _Held(Generic[_T]):
    """One loop's client, and the guard that closes it when that loop ends."""

    client: _T
    guard: AsyncGenerator[None, None] | None


class PerLoopClient(Generic[_T]):
    """An SDK client built lazily, once per running event loop, closed with that loop.

    ``close=None`` means the client was handed in by the caller, who closes it.

    SDK async clients hold connection pools bound to the loop that opened them; the
    sync facade may drive each ``invoke`` on a new loop, and a user's own loop may call
    the same model meanwhile, so each running loop gets its own client and keeps it
    (:class:`~oncegraph._loopbound.LoopBound`): alternating between two live loops
    builds two clients, not one per switch. Building lazily also means constructing an
    adapter needs neither credentials nor I/O (an evidence replay never calls the model).

    Closing: next to each client we park an async generator suspended in a ``try``
    whose ``finally`` closes the client. ``asyncio.run`` (and anyio's runner) call
    ``loop.shutdown_asyncgens()`` before closing the loop, which runs that ``finally``
    while the loop still works, so connections are closed, not leaked, when a loop ends.
    """

    __slots__ = ("_close", "_factory", "_held")

    def __init__(
        self, factory: Callable[[], _T], close: Callable[[_T], Awaitable[object]] | None
    ) -> None:
        self._factory = factory
        self._close = close
        self._held: LoopBound[_Held[_T]] = LoopBound()

    async def get(self) -> _T:
        return (await self._held.aget(self._open)).client

    async def _open(self) -> _Held[_T]:
        client = self._factory()
        guard = None
        if self._close is not None:  # None: the caller owns the client
            guard = _close_at_loop_end(client, self._close)
            await guard.__anext__()  # registers it with this loop's asyncgen hooks
        return _Held(client, guard)

    async def aclose(self) -> None:
        """Close the client of the running loop now, if there is one."""
        await self._held.aclose_current(_release)


async def _release(held: _Held[Any]) -> None:
    if held.guard is not None:
        await held.guard.aclose()


async def _close_at_loop_end(
    client: _T, close: Callable[[_T], Awaitable[object]]
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await close(client)


class SDKChatModel(Generic[_C]):
    """The shared half of a provider adapter over an SDK client of type ``_C``.

    A subclass normalizes its model id, then calls ``super().__init__`` with:
    ``label`` (the provider as people write it, in messages), ``example`` (a valid
    model id, for the empty-id error), ``connect`` (builds a new client; may raise one
    of ``errors`` when the SDK refuses, e.g. without an API key), ``key_env`` (what to
    set then), ``close`` (closes a client the adapter built) and ``client`` (the
    caller's own client, which wins over ``connect`` and is never closed here).
    """

    __slots__ = ("_clients", "model", "name", "params")

    def __init__(
        self,
        model: str,
        name: str,
        *,
        label: str,
        example: str,
        params: Mapping[str, Any] | None,
        client: _C | None,
        connect: Callable[[], _C],
        close: Callable[[_C], Awaitable[object]],
        errors: tuple[type[Exception], ...],
        key_env: str,
    ) -> None:
        if not model:
            raise ConfigError(f"{label} model id is empty; pass e.g. {example!r}")
        self.model = model
        self.name = name
        self.params: dict[str, Any] = dict(params or {})

        def build() -> _C:
            try:
                return connect()
            except errors as exc:
                raise ConfigError(
                    f"cannot create the {label} client: {exc}. Set {key_env} or pass "
                    "api_key= to the model"
                ) from exc

        self._clients: PerLoopClient[_C] = (
            PerLoopClient(build, close) if client is None else PerLoopClient(lambda: client, None)
        )

    async def _client(self) -> _C:
        """The SDK client for the running event loop."""
        return await self._clients.get()

    async def aclose(self) -> None:
        """Close the client of the running event loop now (it is also closed when the
        loop ends under ``asyncio.run``); a caller's own ``client=`` is left open."""
        await self._clients.aclose()


def sdk_options(
    api_key: str | None, base_url: str | None, timeout: float | None, max_retries: int | None
) -> dict[str, Any]:
    """Client keywords for the httpx-based SDKs; ``None`` timeout/retries keep the
    SDK's defaults (``None`` key/url make it read its environment variables)."""
    options: dict[str, Any] = {"api_key": api_key, "base_url": base_url}
    if timeout is not None:
        options["timeout"] = timeout
    if max_retries is not None:
        options["max_retries"] = max_retries
    return options


@dataclass(frozen=True, slots=True)
class Wire:
    """Where a provider SDK's response keeps what :func:`answer` reads, by attribute
    name: its ``id``, the ``model`` it names, its ``usage`` and, on that, the ``counts``
    of input, output and total tokens (total ``None``: input plus output)."""

    id: str
    model: str
    usage: str
    counts: tuple[str, str, str | None]


def answer(
    response: Any, wire: Wire, content: str, calls: Sequence[ToolCall], finish: str | None
) -> ModelResponse:
    """The :class:`ModelResponse` of a provider's ``response`` read through ``wire``:
    ``content``, the tool ``calls`` and the ``finish`` reason as the adapter found them."""
    counted = getattr(response, wire.usage, None)
    usage: dict[str, int] = {}
    if counted is not None:
        given, made, total = (getattr(counted, n) if n else None for n in wire.counts)
        if wire.counts[2] is None and given is not None and made is not None:
            total = given + made
        usage = token_usage(given, made, total)
    return ModelResponse(
        content=content,
        tool_calls=tuple(calls),
        provider_message_id=getattr(response, wire.id, None),
        usage=usage,
        raw_finish_reason=finish,
        model_version=served_model(getattr(response, wire.model, None)),
    )
