"""When requests are sent: a fixed number in flight, or Poisson arrivals.

Both take ``send``, an async function from an item to its result, and return
the results in the items' order whatever order they finish in.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


async def at_fixed_concurrency(
    send: Callable[[Item], Awaitable[Result]], items: Sequence[Item], concurrency: int
) -> list[Result]:
    """``concurrency`` workers, each sending the next unsent item as soon as its last one is done."""
    results: list = [None] * len(items)
    indices = iter(range(len(items)))  # shared: each index is taken by exactly one worker

    async def worker() -> None:
        for index in indices:
            results[index] = await send(items[index])

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))
    return results


def poisson_arrival_times(rate: float, count: int, seed: int) -> list[float]:
    """Seconds from the start at which each of ``count`` requests is due: the first at 0,
    then exponential gaps with mean ``1 / rate`` from a generator seeded by ``seed``."""
    rng = random.Random(f"arrivals:{seed}")
    gaps = [0.0] + [rng.expovariate(rate) for _ in range(count - 1)]
    return list(itertools.accumulate(gaps))[:count]


async def at_poisson_rate(
    send: Callable[[Item], Awaitable[Result]],
    items: Sequence[Item],
    rate: float,
    seed: int,
    max_concurrency: int | None = None,
) -> list[Result]:
    """Send each item when it is due; with ``max_concurrency``, a due item also waits for a free slot."""
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def send_in_slot(item: Item) -> Result:
        if slots is None:
            return await send(item)
        async with slots:
            return await send(item)

    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for item, due in zip(items, poisson_arrival_times(rate, len(items), seed)):
        # Sleeping until an absolute time keeps the schedule from drifting late.
        await asyncio.sleep(max(0.0, start + due - loop.time()))
        tasks.append(asyncio.create_task(send_in_slot(item)))
    return list(await asyncio.gather(*tasks))
