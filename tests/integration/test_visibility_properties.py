"""list() and aggregate() always equal a brute-force filter over describe() of every run."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyweft import Engine, MemoryStorage, VirtualClock, WorkflowContext, workflow
from support.poll import eventually


@workflow
async def alpha(ctx: WorkflowContext, region: str, amount: int) -> None:
    ctx.set_attributes({"region": region, "amount": amount})
    await ctx.wait_for_signal("end")


@workflow
async def beta(ctx: WorkflowContext, region: str, amount: int) -> None:
    ctx.set_attributes({"region": region, "amount": amount})
    await ctx.wait_for_signal("end")


run_spec = st.tuples(
    st.sampled_from(["alpha", "beta"]),
    st.sampled_from(["eu", "us", "apac"]),
    st.integers(0, 100),
    st.sampled_from(["running", "completed", "cancelled", "suspended"]),
    st.lists(st.sampled_from(["red", "blue"]), unique=True, max_size=2),
)
filter_spec = st.fixed_dictionaries(
    {},
    optional={
        "status": st.one_of(
            st.sampled_from(["running", "completed", "cancelled", "suspended"]),
            st.lists(
                st.sampled_from(["running", "completed", "cancelled", "suspended"]),
                min_size=1,
                max_size=3,
                unique=True,
            ),
        ),
        "workflow_type": st.sampled_from(["alpha", "beta"]),
        "attributes": st.one_of(
            st.fixed_dictionaries({"region": st.sampled_from(["eu", "us", "apac"])}),
            st.fixed_dictionaries({"amount": st.fixed_dictionaries({"gte": st.integers(0, 100)})}),
        ),
        "tags": st.lists(st.sampled_from(["red", "blue"]), min_size=1, max_size=1),
        "id_prefix": st.sampled_from(["r1", "r2", "r"]),
    },
)


def brute(infos: list[Any], flt: dict[str, Any]) -> list[str]:
    out = []
    for info in infos:
        status = flt.get("status")
        if isinstance(status, str) and info.status != status:
            continue
        if isinstance(status, list) and info.status not in status:
            continue
        if "workflow_type" in flt and info.workflow_type != flt["workflow_type"]:
            continue
        if "id_prefix" in flt and not info.id.startswith(flt["id_prefix"]):
            continue
        if any(tag not in info.tags for tag in flt.get("tags", [])):
            continue
        attrs = flt.get("attributes", {})
        if "region" in attrs and info.attributes.get("region") != attrs["region"]:
            continue
        if "amount" in attrs and not info.attributes.get("amount", -1) >= attrs["amount"]["gte"]:
            continue
        out.append(info)
    out.sort(key=lambda i: (i.created_at, i.id), reverse=True)
    return [i.id for i in out]


async def _has_attributes(engine: Engine, workflow_id: str) -> bool:
    return bool((await engine.describe(workflow_id)).attributes)


async def _is_cancelled(handle: Any) -> bool:
    return (await handle.describe()).status == "cancelled"


async def populate(engine: Engine, clock: VirtualClock, runs: list[tuple[Any, ...]]) -> None:
    for n, (wf, region, amount, status, tags) in enumerate(runs):
        handle = await engine.start(wf, region, amount, id=f"r{n}", tags=tags)
        clock.advance(1 if n % 3 else 0)  # some runs share a creation time
        await eventually(lambda h=handle: _has_attributes(engine, h.id), what="attributes")
        if status == "completed":
            await handle.signal("end")
            await handle.result(timeout=5)
        elif status == "cancelled":
            await handle.cancel()
            await eventually(lambda h=handle: _is_cancelled(h), what="cancelled")
        elif status == "suspended":
            await handle.suspend()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=st.lists(run_spec, min_size=1, max_size=12), filters=st.lists(filter_spec, max_size=6))
def test_list_and_aggregate_equal_brute_force(
    runs: list[tuple[Any, ...]], filters: list[dict[str, Any]]
) -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        async with Engine(MemoryStorage(), workflows=[alpha, beta], clock=clock) as engine:
            await populate(engine, clock, runs)
            infos = [await engine.describe(f"r{n}") for n in range(len(runs))]
            for flt in [{}, *filters]:
                expected = brute(infos, flt)
                got: list[str] = []
                cursor = None
                while True:
                    page = await engine.list(**flt, limit=3, cursor=cursor)
                    got += [i.id for i in page.items]
                    if page.next_cursor is None:
                        break
                    cursor = page.next_cursor
                assert got == expected, (flt, got, expected)
                for group_by in ("status", "type", "region"):
                    counts = {
                        g.key: g.count for g in await engine.aggregate(group_by=group_by, **flt)
                    }
                    chosen = [i for i in infos if i.id in set(expected)]
                    want: dict[Any, int] = {}
                    for info in chosen:
                        key = {
                            "status": info.status,
                            "type": info.workflow_type,
                            "region": info.attributes.get("region"),
                        }[group_by]
                        want[key] = want.get(key, 0) + 1
                    assert counts == want, (group_by, flt, counts, want)

    asyncio.run(scenario())


def test_paging_stays_consistent_while_attributes_change() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        async with Engine(MemoryStorage(), workflows=[alpha], clock=clock) as engine:
            await populate(engine, clock, [("alpha", "eu", n, "running", []) for n in range(30)])

            async def churn() -> None:
                for n in range(30):
                    await engine.set_attributes(f"r{n}", {"region": "us" if n % 2 else "eu"})

            mover = asyncio.ensure_future(churn())
            seen: list[str] = []
            cursor = None
            while True:
                page = await engine.list(workflow_type="alpha", limit=4, cursor=cursor)
                seen += [i.id for i in page.items]
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            await mover
            assert len(seen) == len(set(seen)) == 30  # no run lost or repeated
            eu = await engine.list(attributes={"region": "eu"}, limit=100)
            assert sorted(i.id for i in eu.items) == sorted(f"r{n}" for n in range(0, 30, 2))

    asyncio.run(scenario())
