"""The storage conformance suite: the contract every adapter, ours or yours, must pass.

The engine's correctness rests on a handful of storage promises (byte-order
scans, atomic batches, conditions on raw bytes, errors raised rather than
reported as failed conditions). Writing them down as tests in one place lets
each adapter prove them the same way. To check your own adapter::

    from pyweft.testing import StorageConformance

    class TestMyStorage(StorageConformance):
        async def make_storage(self, tmp_path):
            return MyStorage(tmp_path / "data")

        async def reopen_storage(self, tmp_path):  # omit for an ephemeral store
            return MyStorage(tmp_path / "data")

The suite needs pytest with pytest-asyncio in ``asyncio_mode = "auto"``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pyweft.errors import StorageClosedError, StorageError
from pyweft.storage.base import (
    Delete,
    Expect,
    Get,
    Op,
    Put,
    Scan,
    Storage,
    StorageCapabilities,
)

# Deliberately awkward neighbours: numbers that sort as text, the characters on
# either side of ":", and a non-ASCII key that must sort by its UTF-8 bytes.
_SCAN_KEYS = ["a", "a:", "a:1", "a:10", "a:2", "a:~", "a:\u00e9", "a;", "a9", "`z", "b", "b:1"]


class StorageConformance(ABC):
    """Subclass as ``Test...`` and implement :meth:`make_storage`; every test comes along."""

    @abstractmethod
    async def make_storage(self, tmp_path: Path) -> Storage:
        """A fresh, empty store. ``tmp_path`` is private to the test."""

    async def reopen_storage(self, tmp_path: Path) -> Storage | None:
        """Open the store made by :meth:`make_storage` again, or ``None`` if it is ephemeral."""
        return None

    async def break_storage(self, storage: Storage) -> bool:
        """Induce a real infrastructure failure for writes; ``False`` skips that test."""
        return False

    async def repair_storage(self, storage: Storage) -> None:
        """Undo :meth:`break_storage` (always called after it returned ``True``)."""
        return None

    @pytest.fixture
    async def storage(self, tmp_path: Path) -> AsyncIterator[Storage]:
        store = await self.make_storage(tmp_path)
        try:
            yield store
        finally:
            await store.close()

    # --- single keys ------------------------------------------------------------------

    async def test_the_adapter_satisfies_the_protocol(self, storage: Storage) -> None:
        assert isinstance(storage, Storage)
        assert isinstance(storage.capabilities, StorageCapabilities)
        assert storage.capabilities.persistence in ("local", "remote", "ephemeral")

    async def test_get_of_a_missing_key_returns_none(self, storage: Storage) -> None:
        assert await storage.get("missing") is None

    async def test_put_then_get_returns_the_value(self, storage: Storage) -> None:
        await storage.batch([Put(key="k", value=b"v")])
        assert await storage.get("k") == b"v"

    async def test_put_overwrites_an_existing_value(self, storage: Storage) -> None:
        await storage.batch([Put(key="k", value=b"old")])
        await storage.batch([Put(key="k", value=b"new")])
        assert await storage.get("k") == b"new"
        assert await storage.scan("k") == [("k", b"new")]

    async def test_delete_removes_a_key(self, storage: Storage) -> None:
        await storage.batch([Put(key="k", value=b"v"), Put(key="other", value=b"o")])
        await storage.batch([Delete(key="k")])
        assert await storage.get("k") is None
        assert await storage.scan("") == [("other", b"o")]

    async def test_delete_of_a_missing_key_is_not_an_error(self, storage: Storage) -> None:
        await storage.batch([Delete(key="never-written")])
        assert await storage.get("never-written") is None

    async def test_an_empty_value_is_stored_and_differs_from_absence(
        self, storage: Storage
    ) -> None:
        await storage.batch([Put(key="k", value=b"")])
        assert await storage.get("k") == b""
        assert not await storage.conditional_batch([Expect(key="k", value=None)], [])
        assert await storage.conditional_batch([Expect(key="k", value=b"")], [])

    async def test_large_values_round_trip(self, storage: Storage) -> None:
        big = bytes(range(256)) * 4096  # 1 MiB holding every byte value
        await storage.batch([Put(key="big", value=big)])
        assert await storage.get("big") == big
        assert await storage.conditional_batch([Expect(key="big", value=big)], [Delete(key="big")])

    # --- scans ------------------------------------------------------------------------

    async def _seed_scan_keys(self, storage: Storage) -> None:
        await storage.batch([Put(key=key, value=key.encode()) for key in _SCAN_KEYS])

    async def test_scan_returns_keys_under_the_prefix_in_byte_order(self, storage: Storage) -> None:
        await self._seed_scan_keys(storage)
        expected = ["a:", "a:1", "a:10", "a:2", "a:~", "a:\u00e9"]
        assert await storage.scan("a:") == [(key, key.encode()) for key in expected]
        assert [key for key, _ in await storage.scan("a")] == ["a", "a9", *expected, "a;"]

    async def test_count_when_offered_matches_a_scan(self, storage: Storage) -> None:
        count = getattr(storage, "count", None)
        if count is None:
            return  # an optional extension; nothing to check
        await storage.batch([Put(key=k, value=b"") for k in ("c:1", "c:2", "c:10", "cd", "b")])
        for prefix in ("c:", "c", "", "zz"):
            assert await count(prefix) == len(await storage.scan(prefix)), prefix

    async def test_read_many_when_offered_answers_as_gets_and_scans(self, storage: Storage) -> None:
        read_many = getattr(storage, "read_many", None)
        if read_many is None:
            return  # an optional extension; nothing to check
        await self._seed_scan_keys(storage)
        reads: list[Get | Scan] = [
            Get(key="a:1"),
            Get(key="absent"),
            Scan(prefix="a:"),
            Scan(prefix="a:", limit=0),
            Scan(prefix="", start="a:", end="a:~", reverse=True, limit=2),
            Scan(prefix="none:"),
        ]
        expected = [
            await storage.get("a:1"),
            None,
            await storage.scan("a:"),
            [],
            await storage.scan("", start="a:", end="a:~", reverse=True, limit=2),
            [],
        ]
        assert await read_many(reads) == expected
        assert await read_many([]) == []

    async def test_take_when_offered_writes_the_planned_batches(self, storage: Storage) -> None:
        take = getattr(storage, "take", None)
        if take is None:
            return  # an optional extension; nothing to check
        await storage.batch([Put(key=k, value=k.encode()) for k in ("q:!", "q:1", "q:2", "q:3")])
        await storage.batch([Put(key="cfg", value=b"c")])
        seen: list[object] = []

        def plan(
            pairs: list[tuple[str, bytes]], peeked: list[bytes | None]
        ) -> list[tuple[list[Expect], list[Op]]]:
            seen.extend([pairs, peeked])
            batches: list[tuple[list[Expect], list[Op]]] = [
                ([Expect(key=k, value=v)], [Delete(key=k), Put(key="t:" + k, value=v)])
                for k, v in pairs
            ]
            batches.append(([Expect(key="q:1", value=b"other")], [Put(key="never", value=b"")]))
            return batches

        got = await take("q:", start="q:0", limit=2, plan=plan, peek=["cfg", "absent"])
        assert seen == [[("q:1", b"q:1"), ("q:2", b"q:2")], [b"c", None]]
        assert got == [True, True, False]
        assert await storage.scan("q:") == [("q:!", b"q:!"), ("q:3", b"q:3")]
        assert await storage.scan("t:") == [("t:q:1", b"q:1"), ("t:q:2", b"q:2")]
        assert await storage.get("never") is None
        assert await take("none:", limit=5, plan=lambda pairs, _: []) == []

    async def test_take_when_offered_writes_nothing_when_the_plan_fails(
        self, storage: Storage
    ) -> None:
        take = getattr(storage, "take", None)
        if take is None:
            return  # an optional extension; nothing to check
        await storage.batch([Put(key="q:1", value=b"1")])

        def plan(pairs: list[tuple[str, bytes]], peeked: list[bytes | None]) -> list[object]:
            raise RuntimeError("plan failed")

        with pytest.raises(RuntimeError, match="plan failed"):
            await take("q:", limit=5, plan=plan)
        assert await storage.scan("q:") == [("q:1", b"1")]
        assert await take("q:", limit=5, plan=lambda pairs, _: []) == []  # still usable

    async def test_scan_with_an_empty_prefix_returns_every_key(self, storage: Storage) -> None:
        await self._seed_scan_keys(storage)
        ordered = sorted(_SCAN_KEYS, key=lambda key: key.encode())
        assert [key for key, _ in await storage.scan("")] == ordered

    async def test_scan_honours_inclusive_start_and_exclusive_end(self, storage: Storage) -> None:
        await self._seed_scan_keys(storage)
        keys = [key for key, _ in await storage.scan("a:", start="a:10", end="a:~")]
        assert keys == ["a:10", "a:2"]
        assert [key for key, _ in await storage.scan("a:", start="a")] == [
            key for key, _ in await storage.scan("a:")
        ]
        assert [key for key, _ in await storage.scan("a:", end="zzz")][-1] == "a:\u00e9"
        assert await storage.scan("a:", start="a:2", end="a:1") == []
        assert await storage.scan("", start="b") == [("b", b"b"), ("b:1", b"b:1")]

    async def test_scan_in_reverse_returns_descending_key_order(self, storage: Storage) -> None:
        await self._seed_scan_keys(storage)
        forward = await storage.scan("a:")
        assert await storage.scan("a:", reverse=True) == forward[::-1]
        keys = [key for key, _ in await storage.scan("a:", start="a:1", end="a:~", reverse=True)]
        assert keys == ["a:2", "a:10", "a:1"]

    async def test_scan_limit_keeps_the_first_keys_in_scan_order(self, storage: Storage) -> None:
        await self._seed_scan_keys(storage)
        assert [key for key, _ in await storage.scan("a:", limit=2)] == ["a:", "a:1"]
        assert [key for key, _ in await storage.scan("a:", limit=2, reverse=True)] == [
            "a:\u00e9",
            "a:~",
        ]
        assert len(await storage.scan("a:", limit=100)) == 6
        assert await storage.scan("a:", limit=0) == []

    async def test_scan_with_a_prefix_next_to_the_surrogate_range_works(
        self, storage: Storage
    ) -> None:
        inside, outside = "p\ud7ff:1", "p\ue000"
        await storage.batch([Put(key=inside, value=b"1"), Put(key=outside, value=b"2")])
        assert await storage.scan("p\ud7ff") == [(inside, b"1")]

    # --- batches ----------------------------------------------------------------------

    async def test_ops_in_a_batch_apply_in_order(self, storage: Storage) -> None:
        await storage.batch([Put(key="gone", value=b"1"), Delete(key="gone")])
        await storage.batch([Delete(key="back"), Put(key="back", value=b"2")])
        await storage.batch([Put(key="twice", value=b"first"), Put(key="twice", value=b"last")])
        assert await storage.get("gone") is None
        assert await storage.get("back") == b"2"
        assert await storage.get("twice") == b"last"

    async def test_a_failed_conditional_batch_writes_nothing(self, storage: Storage) -> None:
        await storage.batch([Put(key="guard", value=b"1"), Put(key="victim", value=b"keep")])
        ops: list[Op] = [
            Put(key="new:1", value=b"x"),
            Delete(key="victim"),
            Put(key="new:2", value=b"y"),
        ]
        applied = await storage.conditional_batch([Expect(key="guard", value=b"2")], ops)
        assert applied is False
        assert await storage.scan("") == [("guard", b"1"), ("victim", b"keep")]

    async def test_concurrent_scans_never_observe_half_a_batch(self, storage: Storage) -> None:
        async def writer() -> None:
            for i in range(50):
                value = str(i).encode()
                await storage.batch(
                    [Put(key="pair:a", value=value), Put(key="pair:b", value=value)]
                )

        async def reader() -> None:
            while not writing.done():
                pairs = dict(await storage.scan("pair:"))
                assert pairs.get("pair:a") == pairs.get("pair:b"), pairs

        writing = asyncio.ensure_future(writer())
        await asyncio.gather(writing, reader(), reader())

    async def test_many_concurrent_batches_all_land(self, storage: Storage) -> None:
        await asyncio.gather(
            *(storage.batch([Put(key=f"many:{i:04d}", value=b"%d" % i)]) for i in range(300))
        )
        stored = await storage.scan("many:")
        assert stored == [(f"many:{i:04d}", b"%d" % i) for i in range(300)]

    # --- conditional batches ----------------------------------------------------------

    async def test_conditional_batch_applies_when_every_condition_holds(
        self, storage: Storage
    ) -> None:
        await storage.batch([Put(key="x", value=b"1")])
        conditions = [Expect(key="x", value=b"1"), Expect(key="y", value=None)]
        assert await storage.conditional_batch(conditions, [Put(key="y", value=b"2")]) is True
        assert await storage.get("y") == b"2"

    async def test_conditional_batch_fails_on_a_different_value(self, storage: Storage) -> None:
        await storage.batch([Put(key="x", value=b"1")])
        applied = await storage.conditional_batch(
            [Expect(key="x", value=b"2")], [Put(key="x", value=b"3")]
        )
        assert applied is False
        assert await storage.get("x") == b"1"

    async def test_conditional_batch_fails_when_a_key_expected_absent_is_present(
        self, storage: Storage
    ) -> None:
        await storage.batch([Put(key="x", value=b"1")])
        applied = await storage.conditional_batch(
            [Expect(key="x", value=None)], [Put(key="y", value=b"2")]
        )
        assert applied is False
        assert await storage.get("y") is None

    async def test_conditional_batch_fails_when_a_key_expected_present_is_absent(
        self, storage: Storage
    ) -> None:
        applied = await storage.conditional_batch(
            [Expect(key="x", value=b"1")], [Put(key="y", value=b"2")]
        )
        assert applied is False
        assert await storage.get("y") is None

    async def test_conditions_compare_the_raw_stored_bytes(self, storage: Storage) -> None:
        await storage.batch([Put(key="raw", value=b"\x00\x01")])
        for near_miss in (b"\x00", b"\x01", b"\x00\x01\x00", b"\x00\x02", b""):
            assert not await storage.conditional_batch([Expect(key="raw", value=near_miss)], [])
        exact = [Expect(key="raw", value=b"\x00\x01")]
        assert await storage.conditional_batch(exact, [Put(key="raw", value=b"\xff")])
        assert await storage.get("raw") == b"\xff"

    async def test_concurrent_compare_and_swap_increments_never_lose_an_update(
        self, storage: Storage
    ) -> None:
        async def increment(worker: int) -> int:
            for _ in range(10_000):
                raw = await storage.get("counter")
                new = (int(raw) if raw is not None else 0) + 1
                ops = [
                    Put(key="counter", value=b"%d" % new),
                    Put(key=f"won:{new:03d}", value=b"%d" % worker),
                ]
                if await storage.conditional_batch([Expect(key="counter", value=raw)], ops):
                    return new
            raise AssertionError(f"worker {worker} never won a compare-and-swap")

        won = await asyncio.gather(*(increment(worker) for worker in range(50)))
        assert sorted(won) == list(range(1, 51))
        assert await storage.get("counter") == b"50"
        winners = [value for _, value in await storage.scan("won:")]
        assert sorted(winners) == sorted(b"%d" % worker for worker in range(50))

    async def test_exactly_one_of_many_racing_creates_wins(self, storage: Storage) -> None:
        results = await asyncio.gather(
            *(
                storage.conditional_batch(
                    [Expect(key="lock", value=None)], [Put(key="lock", value=b"%d" % i)]
                )
                for i in range(30)
            )
        )
        assert results.count(True) == 1
        assert await storage.get("lock") == b"%d" % results.index(True)

    # --- lifecycle and failures -------------------------------------------------------

    async def test_data_survives_close_and_reopen(self, tmp_path: Path) -> None:
        first = await self.make_storage(tmp_path)
        try:
            await first.batch([Put(key="durable", value=b"yes"), Put(key="gone", value=b"x")])
            assert await first.conditional_batch([], [Delete(key="gone")])
        finally:
            await first.close()
        second = await self.reopen_storage(tmp_path)
        if second is None:
            pytest.skip(f"{type(self).__name__}: the adapter is ephemeral (reopen_storage is None)")
        try:
            assert await second.scan("") == [("durable", b"yes")]
        finally:
            await second.close()

    async def test_calls_after_close_raise_storage_closed_error(self, storage: Storage) -> None:
        await storage.batch([Put(key="k", value=b"v")])
        await storage.close()
        await storage.close()  # idempotent
        with pytest.raises(StorageClosedError):
            await storage.get("k")
        with pytest.raises(StorageClosedError):
            await storage.scan("")
        with pytest.raises(StorageClosedError):
            await storage.batch([Put(key="k", value=b"w")])
        with pytest.raises(StorageClosedError):
            await storage.conditional_batch([Expect(key="k", value=b"v")], [])

    async def test_infrastructure_failures_raise_storage_error_instead_of_returning_false(
        self, storage: Storage
    ) -> None:
        await storage.batch([Put(key="fault:kept", value=b"v")])
        holds = [Expect(key="fault:kept", value=b"v")]
        if not await self.break_storage(storage):
            pytest.skip(f"{type(self).__name__} cannot induce an I/O failure (break_storage)")
        try:
            with pytest.raises(StorageError) as cas_failure:
                await storage.conditional_batch(holds, [Put(key="fault:kept", value=b"w")])
            with pytest.raises(StorageError) as batch_failure:
                await storage.batch([Put(key="fault:new", value=b"n")])
        finally:
            await self.repair_storage(storage)
        for failure in (cas_failure.value, batch_failure.value):
            assert not isinstance(failure, StorageClosedError)
            assert failure.__cause__ is not None, "keep the driver error as __cause__"
        assert await storage.get("fault:kept") == b"v"
        assert await storage.get("fault:new") is None
        # Once the fault clears, the same adapter works again.
        assert await storage.conditional_batch(holds, [Put(key="fault:kept", value=b"w")])
