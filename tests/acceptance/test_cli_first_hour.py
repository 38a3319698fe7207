"""CLI details a new user meets in the first hour: versions, help, purge, reviews, codecs."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pyweft import (
    DefaultPayloadCodec,
    Engine,
    WorkflowContext,
    __version__,
    activity,
    workflow,
)
from pyweft.cli.main import app
from support.poll import eventually

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]


def invoke(*args: str, columns: int = 200, input: str | None = None) -> Any:
    runner = CliRunner(env={"COLUMNS": str(columns), "NO_COLOR": "1", "PYWEFT_DATABASE_URL": None})
    return runner.invoke(app, list(args), input=input)


def cli(*args: str, cwd: Path, columns: int = 200) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    env.update(COLUMNS=str(columns), NO_COLOR="1", PYTHONPATH=str(cwd))
    return subprocess.run(
        [*PYWEFT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flags_print_the_version_and_exit(flag: str) -> None:
    result = invoke(flag)
    assert result.exit_code == 0
    assert result.stdout.startswith(f"pyweft {__version__}\nPython ")


@pytest.mark.parametrize(
    "command", [[], ["workflows", "list"], ["workflows", "purge"], ["reviews", "list"], ["demo"]]
)
def test_help_shows_no_type_for_on_off_flags(command: list[str]) -> None:
    result = invoke(*command, "--help", columns=80)
    assert result.exit_code == 0
    assert "<bool>" not in result.stdout
    assert "--help" in result.stdout


def test_shell_completion_can_be_shown_and_installed() -> None:
    result = invoke("--help")
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout


# --- purge -----------------------------------------------------------------------------


@activity
async def echo(text: str) -> str:
    return text


@workflow
async def quick(ctx: WorkflowContext, text: str) -> str:
    return await ctx.run(echo, text)


@workflow
async def waits(ctx: WorkflowContext) -> str:
    return str(await ctx.wait_for_signal("go"))


async def _fill(db: Path) -> None:
    async with Engine(f"sqlite:///{db}", workflows=[quick, waits]) as engine:
        for n in range(3):
            await (await engine.start(quick, f"t{n}", id=f"old-{n}")).result(timeout=5)
        await (await engine.start(quick, "keep", id="keep-1")).result(timeout=5)
        await engine.start(waits, id="old-running")


def _ids(db: Path) -> list[str]:
    listed = invoke("workflows", "list", "--db", str(db), "--json")
    return sorted(i["id"] for i in json.loads(listed.stdout)["items"])


def test_purge_dry_run_lists_what_would_go_and_deletes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    asyncio.run(_fill(db))
    result = invoke("workflows", "purge", "--id-prefix", "old-", "--dry-run", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert "3 finished run(s) match" in result.stdout
    assert "old-running" not in result.stdout  # running runs are never purged
    assert len(_ids(db)) == 5


def test_purge_without_a_terminal_or_yes_refuses_and_deletes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    asyncio.run(_fill(db))
    result = cli("workflows", "purge", "--db", str(db), cwd=tmp_path)
    assert result.returncode == 2
    assert "--yes" in result.stderr and "--dry-run" in result.stderr
    assert len(_ids(db)) == 5


def test_purge_with_yes_deletes_only_the_finished_runs_that_match(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    asyncio.run(_fill(db))
    result = cli(
        "workflows", "purge", "--id-prefix", "old-", "--yes", "--db", str(db), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "purged 3 finished run(s)" in result.stdout
    assert _ids(db) == ["keep-1", "old-running"]


def _answer_on_a_terminal(db: Path, cwd: Path, answer: str) -> subprocess.CompletedProcess[str]:
    """Run purge with its stdin on a real pseudo-terminal, typing ``answer`` at the prompt."""
    main, child = pty.openpty()
    try:
        os.write(main, answer.encode() + b"\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
        env.update(COLUMNS="200", NO_COLOR="1")
        return subprocess.run(
            [*PYWEFT, "workflows", "purge", "--status", "completed", "--db", str(db)],
            cwd=cwd, env=env, stdin=child, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(main)
        os.close(child)


def test_purge_asks_on_a_terminal_and_a_no_keeps_everything(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    asyncio.run(_fill(db))
    result = _answer_on_a_terminal(db, tmp_path, "n")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Delete these 4 run(s) for good?" in result.stdout
    assert "nothing deleted" in result.stdout
    assert len(_ids(db)) == 5
    yes = _answer_on_a_terminal(db, tmp_path, "y")
    assert yes.returncode == 0, yes.stdout + yes.stderr
    assert _ids(db) == ["old-running"]


# --- reviews ----------------------------------------------------------------------------


@workflow
async def approval_or_signal(ctx: WorkflowContext) -> str:
    winner = await ctx.race(
        ctx.review({"doc": "contract-7"}, review_type="legal", reviewers=["ada"]),
        ctx.wait_for_signal("skip"),
    )
    return str(winner)


@workflow
async def approval(ctx: WorkflowContext, doc: str) -> str:
    decision = await ctx.review({"doc": doc}, review_type="legal", reviewers=["ada", "bo"])
    return decision.decision


async def _reviews(db: Path) -> None:
    async with Engine(f"sqlite:///{db}", workflows=[approval_or_signal, approval]) as engine:
        raced = await engine.start(approval_or_signal, id="raced-review-workflow-with-a-long-id")
        await eventually(
            lambda: _has_reviews(engine, raced.id), what="the raced review to be requested"
        )
        await engine.signal(raced.id, "skip", "skipped")
        assert await raced.result(timeout=5) == "skipped"
        pending = await engine.start(approval, "nda-2024-acme", id="pending-review-run")
        await eventually(lambda: _has_reviews(engine, pending.id), what="a pending review")


async def _has_reviews(engine: Engine, workflow_id: str) -> bool:
    return bool(await engine.list_reviews(status=None, workflow_id=workflow_id))


def test_reviews_list_shows_withdrawn_reviews(tmp_path: Path) -> None:
    db = tmp_path / "reviews.db"
    asyncio.run(_reviews(db))
    result = invoke("reviews", "list", "--status", "withdrawn", "--db", str(db), "--json")
    assert result.exit_code == 0, result.output
    items = json.loads(result.stdout)["items"]
    assert [(i["workflow_id"], i["status"]) for i in items] == [
        ("raced-review-workflow-with-a-long-id", "withdrawn")
    ]


def test_reviews_list_is_legible_at_80_columns(tmp_path: Path) -> None:
    db = tmp_path / "reviews.db"
    asyncio.run(_reviews(db))
    result = invoke("reviews", "list", "--status", "all", "--db", str(db), columns=80)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), result.stdout
    text = result.stdout
    # Every identifier a user copies into `reviews decide` or `workflows show` is whole.
    reviews = asyncio.run(_listed(db))
    for review in reviews:
        assert review.review_id in text
        assert review.workflow_id in text
    assert "withdrawn" in text and "pending" in text and "ada, bo" in text


async def _listed(db: Path) -> list[Any]:
    async with Engine(f"sqlite:///{db}", recover=False) as engine:
        return await engine.list_reviews(status=None)


# --- a custom codec for the CLI -----------------------------------------------------------


CODEC_MODULE = textwrap.dedent(
    '''
    from pyweft import DefaultPayloadCodec

    class Scrambled:
        """Stands in for an encrypting codec: XOR over the default codec's bytes."""

        def __init__(self) -> None:
            self.inner = DefaultPayloadCodec()

        def encode(self, value):
            return bytes(b ^ 0x5A for b in self.inner.encode(value))

        def decode(self, data, into=object):
            from typing import Any
            return self.inner.decode(bytes(b ^ 0x5A for b in data), Any if into is object else into)

    codec = Scrambled()
    '''
)


class Scrambled:
    def __init__(self) -> None:
        self.inner = DefaultPayloadCodec()

    def encode(self, value: object) -> bytes:
        return bytes(b ^ 0x5A for b in self.inner.encode(value))

    def decode(self, data: bytes, into: object = Any) -> Any:
        return self.inner.decode(bytes(b ^ 0x5A for b in data), into)


async def _scrambled_store(db: Path) -> None:
    async with Engine(f"sqlite:///{db}", workflows=[quick], codec=Scrambled()) as engine:
        await (await engine.start(quick, "secret text", id="enc-1")).result(timeout=5)


def test_codec_option_lets_workflows_show_read_payloads_a_custom_codec_wrote(
    tmp_path: Path,
) -> None:
    (tmp_path / "mycodecs.py").write_text(CODEC_MODULE)
    db = tmp_path / "enc.db"
    asyncio.run(_scrambled_store(db))
    shown = cli("--codec", "mycodecs:codec", "workflows", "show", "enc-1", "--db", str(db),
                "--json", cwd=tmp_path)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert "secret text" in json.dumps(info)
    by_env = subprocess.run(
        [*PYWEFT, "workflows", "show", "enc-1", "--db", str(db), "--json"],
        cwd=tmp_path,
        env={**os.environ, "PYWEFT_CODEC": "mycodecs:Scrambled", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert by_env.returncode == 0, by_env.stderr
    assert "secret text" in by_env.stdout


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("mycodecs", "must be MODULE:NAME"),
        ("nosuchmodule:codec", "cannot be imported"),
        ("mycodecs:missing", "has no attribute"),
        ("mycodecs:DefaultPayloadCodec.encode", "calling it raised"),
    ],
)
def test_a_codec_option_that_names_no_codec_is_a_clear_usage_error(
    tmp_path: Path, spec: str, says: str
) -> None:
    (tmp_path / "mycodecs.py").write_text(CODEC_MODULE)
    result = cli("--codec", spec, "workflows", "list", "--db", str(tmp_path / "x.db"), cwd=tmp_path)
    assert result.returncode == 2
    assert says in result.stderr
    assert "Traceback" not in result.stderr
