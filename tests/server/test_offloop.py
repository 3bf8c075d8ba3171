"""Large listing bodies are built off the event loop; small ones stay on it."""

from __future__ import annotations

import asyncio
import json
import threading

from oncegraph.server.offloop import OFF_LOOP_FROM, json_page


def test_a_large_page_is_built_in_another_thread_and_a_small_one_on_the_loop() -> None:
    async def main() -> tuple[int, int, int, bytes, bytes]:
        loop_thread = threading.get_ident()
        seen: list[int] = []

        def build(n: int) -> dict[str, list[int]]:
            seen.append(threading.get_ident())
            return {"items": list(range(n))}

        small = await json_page(OFF_LOOP_FROM - 1, lambda: build(OFF_LOOP_FROM - 1))
        large = await json_page(OFF_LOOP_FROM, lambda: build(OFF_LOOP_FROM))
        return loop_thread, seen[0], seen[1], bytes(small.body), bytes(large.body)

    loop_thread, small_thread, large_thread, small, large = asyncio.run(main())
    assert small_thread == loop_thread
    assert large_thread != loop_thread
    assert json.loads(small) == {"items": list(range(OFF_LOOP_FROM - 1))}
    assert json.loads(large) == {"items": list(range(OFF_LOOP_FROM))}
