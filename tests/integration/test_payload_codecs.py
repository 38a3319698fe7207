"""An engine with a ChainCodec: payloads are unreadable in the raw store, readable
through the chain, still readable after a key rotation, and a reader without the key
(the CLI, the server) shows them as encrypted while still reading compressed ones."""

from __future__ import annotations

import os

from pyweft import WorkflowContext, activity, workflow
from pyweft.codecs import AesGcmCodec, ChainCodec, EncryptedPayload, ZlibCodec, steps_of
from support.backends import Backend
from support.poll import eventually

OLD, NEW = os.urandom(32), os.urandom(32)
SECRET = "4111-1111-1111-1111"


@activity
async def tokenise(card: str) -> dict[str, str]:
    return {"card": card, "token": "tok_" + card[-4:], "padding": "x" * 400}


@workflow
async def pay(ctx: WorkflowContext, card: str) -> dict[str, str]:
    first = await ctx.run(tokenise, card)
    await ctx.sleep(60)
    return first


def chain(keys: dict[str, bytes], current: str) -> ChainCodec:
    return ChainCodec([ZlibCodec(min_size=64), AesGcmCodec(keys, current=current)])


async def _raw_values(backend: Backend) -> list[bytes]:
    """Every value in the store, as bytes (what someone reading the database sees)."""
    async with backend.engine(role="client") as engine:
        return [value for _, value in await engine._core.storage.scan("")]


async def test_encrypted_payloads_survive_a_key_rotation(backend: Backend) -> None:
    async with backend.engine(workflows=[pay], codec=chain({"k1": OLD}, "k1")) as engine:
        await engine.start(pay, SECRET, id="p1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
        step = (await engine.history("p1"))[0]
        assert step.result["token"] == "tok_1111"
    raw = await _raw_values(backend)
    assert raw and not any(SECRET.encode() in value for value in raw)
    assert not any(b"tok_1111" in value for value in raw)

    # Rotate: new payloads use k2, the journal written under k1 still replays.
    rotated = chain({"k1": OLD, "k2": NEW}, "k2")
    async with backend.engine(workflows=[pay], codec=rotated) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep re-armed")
        backend.clock.advance(60)
        result = await engine.get_handle("p1").result(timeout=5)
        assert result["card"] == SECRET
        await engine.start(pay, "5500-0000-0000-0004", id="p2")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="p2 asleep")

    # A reader without the keys: shows what is encrypted instead of failing.
    async with backend.engine(workflows=[pay], role="client") as plain:
        info = await plain.describe("p1")
        assert isinstance(info.result, EncryptedPayload)
        assert info.result == "<encrypted: aes-gcm, key k2>"
        (step,) = [s for s in await plain.history("p1") if s.kind == "activity"]
        assert step.result == "<encrypted: aes-gcm, key k1>"


@workflow
async def report(ctx: WorkflowContext) -> list[str]:
    return ["a fairly repetitive line of the quarterly report"] * 50


async def test_compressed_payloads_are_read_by_a_reader_without_the_chain(
    backend: Backend,
) -> None:
    async with backend.engine(
        workflows=[report], codec=ChainCodec([ZlibCodec(min_size=64)])
    ) as engine:
        await (await engine.start(report, id="r1")).result(timeout=5)
        state = await engine._core.visibility.state("r1")
        assert state.result is not None and [s.name for s in steps_of(state.result)] == ["zlib"]
    async with backend.engine(workflows=[report]) as plain:
        assert (
            await plain.get_handle("r1").result(timeout=5)
            == ["a fairly repetitive line of the quarterly report"] * 50
        )
