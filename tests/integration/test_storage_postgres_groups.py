"""Group commit on PostgreSQL: a group of batches, sent as one statement, has the same
outcome as the batches applied one after another, whichever server function writes it
(the general one, or the set-wise one for batches that share no key)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import psycopg
import pytest

from pyweft.storage import PostgresStorage, Put
from pyweft.storage import pg_arrays as a
from support.pg_store import pg, storage  # noqa: F401  (fixtures these tests take)

pytestmark = pytest.mark.postgres

VALUES = [None, b"", b"a", b"b"]


def sequential(state: dict[str, bytes], batches: list[a.Batch]) -> list[bool]:
    """What applying ``batches`` one after another to ``state`` answers (and leaves)."""
    held = []
    for batch in batches:
        ok = all(state.get(key) == value for key, value in batch.expected.items())
        if ok:
            for key, value in batch.final.items():
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
        held.append(ok)
    return held


def random_batch(rng: random.Random, keys: list[str]) -> a.Batch:
    expected = {k: rng.choice(VALUES) for k in rng.sample(keys, rng.randint(0, len(keys)))}
    final = {k: rng.choice(VALUES) for k in rng.sample(keys, rng.randint(0, len(keys)))}
    if not expected and not final:
        final = {keys[0]: b"x"}
    return a.Batch(expected, final)


async def test_a_group_answers_and_writes_as_its_batches_would_one_after_another(
    storage: PostgresStorage,
) -> None:
    rng = random.Random(1405)
    queries: list[Any] = []
    execute = storage._execute

    async def recorded(what: str, query: Any, *args: Any, **kw: Any) -> Any:
        queries.append(query)
        return await execute(what, query, *args, **kw)

    storage._execute = recorded  # type: ignore[method-assign]
    used = {"disjoint": 0, "general": 0}
    for round_ in range(120):
        prefix = f"r{round_}-{uuid.uuid4().hex[:6]}:"
        size = rng.randint(2, 7)
        if round_ % 2 == 0:  # every batch on keys of its own
            pools = [[f"{prefix}{b}.{k}" for k in range(3)] for b in range(size)]
        else:  # batches drawing on the same few keys
            shared = [f"{prefix}{k}" for k in range(3)]
            pools = [shared] * size
        every = sorted({k for pool in pools for k in pool})
        state = {k: rng.choice([b"a", b"b"]) for k in every if rng.random() < 0.5}
        if state:
            await storage.batch([Put(key=k, value=v) for k, v in state.items()])
        batches = [random_batch(rng, pool) for pool in pools]
        queries.clear()
        held = await storage._send_batches(batches, None)
        [sent] = queries
        assert held == sequential(state, batches), (round_, batches)
        assert dict(await storage.scan(prefix)) == state, round_
        kind = "disjoint" if "pyweft_write_disjoint" in str(sent) else "general"
        assert (kind == "disjoint") == a.disjoint(batches)
        used[kind] += 1
    assert used["disjoint"] >= 50 and used["general"] >= 50  # both functions were exercised


async def test_a_schema_made_before_the_set_wise_function_gets_it_on_first_use(
    pg: tuple[str, str],
) -> None:
    """A newer process on a schema an older one created adds the function it lacks."""
    url, schema = pg
    first = PostgresStorage(url, schema=schema)
    await first.batch([Put(key="seed", value=b"1")])
    await first.close()
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP FUNCTION "{schema}".pyweft_write_disjoint_v1')
    store = PostgresStorage(url, schema=schema)
    try:
        batches = [a.Batch({"seed": b"1"}, {"x": b"x"}), a.Batch({}, {"y": b"y"})]
        assert a.disjoint(batches)
        assert await store._send_batches(batches, None) == [True, True]
        assert await store.scan("") == [("seed", b"1"), ("x", b"x"), ("y", b"y")]
    finally:
        await store.close()
