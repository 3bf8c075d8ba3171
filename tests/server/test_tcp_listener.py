"""The listener ``oncegraph serve --workers N`` hands its processes: the connections it
accepts send small responses at once (``TCP_NODELAY``), as one process's do."""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvicorn

from oncegraph.server.processes import tcp_listener


def _nodelay_of_accepted(listener: socket.socket) -> int:
    """Serve ``listener`` with asyncio, connect once, and read ``TCP_NODELAY`` of the
    connection the server accepted."""
    seen: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        host, port = listener.getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen, "the server accepted no connection"
    return seen[0]


def test_the_supervisors_listener_accepts_connections_without_nagle() -> None:
    config = uvicorn.Config("x:app", host="127.0.0.1", port=0, workers=2)
    listener = tcp_listener(config.bind_socket())
    assert listener.proto == socket.IPPROTO_TCP
    assert listener.get_inheritable()  # the processes are handed the same descriptor
    assert _nodelay_of_accepted(listener) != 0


def test_a_listener_that_already_says_tcp_is_kept() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        assert tcp_listener(sock) is sock
    finally:
        sock.close()


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no unix sockets here")
def test_a_unix_socket_is_left_as_it_is() -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert tcp_listener(sock) is sock
    finally:
        sock.close()
