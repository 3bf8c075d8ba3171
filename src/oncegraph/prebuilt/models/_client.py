"""What the SDK-backed adapters share: a per-event-loop client, its closing, and the
``ConfigError`` (naming the API-key variable) when the SDK refuses to build one.

``SDKChatModel`` is their base (the constructor, ``model``, ``name``, ``params``,
``generate``, ``generate_stream``, ``aclose``); :func:`sdk_import` guards their SDK
import; :class:`ClientOptions` is what builds a client; :meth:`Wire.answer` reads a
response into a ``ModelResponse`` through each provider's :class:`Wire` (where its SDK keeps id,
model and token counts). Not public API.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypedDict, TypeVar

from oncegraph._loopbound import LoopBound
from oncegraph.errors import ConfigError
from oncegraph.messages import Message, ToolCall, ToolSpec
from oncegraph.prebuilt.models.base import (
    ModelResponse,
    OnText,
    install_hint,
    served_model,
    token_usage,
)

_T = TypeVar("_T")
_C = TypeVar("_C")
_Req = TypeVar("_Req")


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


@contextmanager
def sdk_import(extra: str, sdk: str) -> Iterator[None]:
    """Wraps an adapter's SDK import: a missing ``sdk`` raises ``ImportError`` whose
    message is the install command of the ``extra``."""
    try:
        yield
    except ImportError as exc:  # pragma: no cover - exercised by a test with the SDK hidden
        raise ImportError(install_hint(extra, sdk)) from exc


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How an adapter builds its SDK client: ``api_key`` and ``base_url`` (``None``: the
    SDK reads its environment variables), ``timeout`` in seconds and the SDK's own
    ``max_retries`` (``None`` for either: the SDK's default)."""

    api_key: str | None
    base_url: str | None
    timeout: float | None
    max_retries: int | None

    def httpx_keywords(self) -> dict[str, Any]:
        """Client keywords for the httpx-based SDKs (``openai``, ``anthropic``)."""
        options: dict[str, Any] = {"api_key": self.api_key, "base_url": self.base_url}
        if self.timeout is not None:
            options["timeout"] = self.timeout
        if self.max_retries is not None:
            options["max_retries"] = self.max_retries
        return options


class SDKOptions(TypedDict, Generic[_C], total=False):
    """The keywords of :class:`SDKChatModel`, for an adapter that adds its own."""

    api_key: str | None
    base_url: str | None
    timeout: float | None
    max_retries: int | None
    params: Mapping[str, Any] | None
    client: _C | None


class SDKChatModel(ABC, Generic[_C, _Req]):
    """The shared half of a provider adapter over an SDK client of type ``_C``, sending
    requests of type ``_Req``.

    A subclass names its provider (``provider``, the ``name`` prefix; ``label``, as
    people write it, in messages; ``example``, a valid model id, for the empty-id error;
    ``key_env``, what to set when the SDK refuses to build a client, raising one of
    ``errors``) and implements ``_connect`` (a new client), ``_disconnect`` (closes one
    the adapter built), ``_request`` (the request of a call), ``_send`` (sends it, maps the
    response) and ``_stream`` (the same, streaming the text to ``on_text``). A caller's own
    ``client=`` wins over ``_connect`` and is never closed here.
    """

    __slots__ = ("_clients", "model", "name", "params")

    provider: ClassVar[str]
    label: ClassVar[str]
    example: ClassVar[str]
    key_env: ClassVar[str]
    errors: ClassVar[tuple[type[Exception], ...]]

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = 0,
        params: Mapping[str, Any] | None = None,
        client: _C | None = None,
    ) -> None:
        model, name = self._names(model, own_endpoint=base_url is not None or client is not None)
        if not model:
            raise ConfigError(f"{self.label} model id is empty; pass e.g. {self.example!r}")
        self.model = model
        self.name = name
        self.params: dict[str, Any] = dict(params or {})
        options = ClientOptions(api_key, base_url, timeout, max_retries)

        def build() -> _C:
            try:
                return self._connect(options)
            except self.errors as exc:
                raise ConfigError(
                    f"cannot create the {self.label} client: {exc}. Set {self.key_env} or "
                    "pass api_key= to the model"
                ) from exc

        self._clients: PerLoopClient[_C] = (
            PerLoopClient(build, self._disconnect)
            if client is None
            else PerLoopClient(lambda: client, None)
        )

    def _names(self, model: str, *, own_endpoint: bool) -> tuple[str, str]:
        """The model id sent to the API and the adapter's ``name``; by default a leading
        ``"<provider>/"`` is stripped from the id and put before it in the name."""
        model = model.removeprefix(f"{self.provider}/")
        return model, f"{self.provider}/{model}"

    @abstractmethod
    def _connect(self, options: ClientOptions) -> _C: ...

    @abstractmethod
    def _disconnect(self, client: _C) -> Awaitable[object]: ...

    @abstractmethod
    def _request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> _Req: ...

    @abstractmethod
    async def _send(self, client: _C, request: _Req) -> ModelResponse: ...

    @abstractmethod
    async def _stream(self, client: _C, request: _Req, on_text: OnText) -> ModelResponse: ...

    async def generate(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        return await self._send(await self._client(), self._request(messages, tools))

    async def generate_stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec], on_text: OnText
    ) -> ModelResponse:
        request = self._request(messages, tools)
        return await self._stream(await self._client(), request, on_text)

    async def _client(self) -> _C:
        """The SDK client for the running event loop."""
        return await self._clients.get()

    async def aclose(self) -> None:
        """Close the client of the running event loop now (it is also closed when the
        loop ends under ``asyncio.run``); a caller's own ``client=`` is left open."""
        await self._clients.aclose()


@dataclass(frozen=True, slots=True)
class Wire:
    """Where a provider SDK's response keeps what :meth:`answer` reads, by attribute
    name: its ``id``, the ``model`` it names, its ``usage`` and, on that, the ``counts``
    of input, output and total tokens (total ``None``: input plus output)."""

    id: str
    model: str
    usage: str
    counts: tuple[str, str, str | None]

    def answer(
        self, response: Any, content: str, calls: Sequence[ToolCall], finish: str | None
    ) -> ModelResponse:
        """The :class:`ModelResponse` of a provider's ``response`` read through this
        wire: ``content``, the tool ``calls`` and the ``finish`` reason as the adapter
        found them."""
        counted = getattr(response, self.usage, None)
        usage: dict[str, int] = {}
        if counted is not None:
            given, made, total = (getattr(counted, n) if n else None for n in self.counts)
            if self.counts[2] is None and given is not None and made is not None:
                total = given + made
            usage = token_usage(given, made, total)
        return ModelResponse(
            content=content,
            tool_calls=tuple(calls),
            provider_message_id=getattr(response, self.id, None),
            usage=usage,
            raw_finish_reason=finish,
            model_version=served_model(getattr(response, self.model, None)),
        )
