"""Finding, counting and forking runs, and checking versions before a deploy, from the CLI.

A real SQLite store is filled by an engine in this process; ``pyweft`` runs as
a subprocess against it. The workflows live in an application module written
to a temporary directory, which this process imports and the CLI loads with
``--app`` (the directory is on the subprocess's ``PYTHONPATH``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pyweft import Engine, VirtualClock, WorkflowContext, workflow

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]

APP = '''
"""The application the CLI imports with --app."""

from __future__ import annotations

import os
from pathlib import Path

from pyweft import WorkflowContext, activity, workflow

LEDGER = Path(__file__).with_name("ledger.txt")


@activity
async def note(text: str) -> str:
    """Append `pid<TAB>text` to the ledger: which process ran which activity."""
    with LEDGER.open("a") as ledger:
        ledger.write(f"{os.getpid()}\\t{text}\\n")
    return text


@workflow(version="2")
async def order(ctx: WorkflowContext, region: str, amount: int) -> int:
    ctx.set_attributes({"region": region, "amount": amount, "rush": amount >= 100})
    await ctx.run(note, f"{ctx.workflow_id}:reserve")
    await ctx.run(note, f"{ctx.workflow_id}:charge")
    return amount


@workflow
async def batch(ctx: WorkflowContext, amounts: list[int]) -> int:
    for amount in amounts:
        await ctx.start_child(order, "eu", amount)
    return len(amounts)


@workflow
async def waiter(ctx: WorkflowContext) -> str:
    return await ctx.wait_for_signal("go")
'''

# The next deploy: `order` moved to version 3 and `waiter` is gone.
NEXT_APP = """
from pyweft import WorkflowContext, workflow

from vis_app import batch, note


@workflow(name="order", version="3")
async def order(ctx: WorkflowContext, region: str, amount: int) -> int:
    await ctx.run(note, "v3")
    return amount
"""


# --- the CLI as a subprocess -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Done:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return f"exit {self.code}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"

    def json(self) -> Any:
        return json.loads(self.stdout)


def pyweft(db: Path, *args: str, app_dir: Path | None = None) -> Done:
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="200", NO_COLOR="1", PYWEFT_DATABASE_URL=f"sqlite:///{db}")
    if app_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(app_dir), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [*PYWEFT, *args], env=env, cwd=db.parent, capture_output=True, text=True, timeout=30
    )
    return Done(done.returncode, done.stdout, done.stderr)


def concurrently(db: Path, *commands: tuple[str, ...], app_dir: Path | None = None) -> list[Done]:
    """Run several independent commands at once: each one spends most of its time starting."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: pyweft(db, *args, app_dir=app_dir), commands))


def listed(db: Path, *queries: tuple[str, ...]) -> list[list[str]]:
    """The run ids ``workflows list --json`` prints for each query's arguments."""
    found = []
    for done in concurrently(db, *(("workflows", "list", "--json", *q) for q in queries)):
        assert done.code == 0, done.output
        found.append([item["id"] for item in done.json()["items"]])
    return found


def counted(db: Path, *queries: tuple[str, ...]) -> list[dict[Any, int]]:
    """``{key: count}`` that ``workflows count --json`` prints for each query's arguments."""
    found = []
    for done in concurrently(db, *(("workflows", "count", "--json", *q) for q in queries)):
        assert done.code == 0, done.output
        found.append({g["key"]: g["count"] for g in done.json()["groups"]})
    return found


def cells(text: str) -> list[list[str]]:
    """A printed table's rows as words, without the column rules."""
    return [[w for w in line.split() if w not in ("│", "┃")] for line in text.splitlines()]


def one_error_line(done: Done, code: str, exit_code: int) -> str:
    assert done.code == exit_code, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.output
    assert lines[0].startswith(f"error: {code}: "), done.output
    return lines[0]


# --- the application and a store of runs -----------------------------------------------


@dataclass(frozen=True, slots=True)
class Store:
    db: Path
    app_dir: Path
    app: ModuleType


def import_app(app_dir: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("vis_app", app_dir / "vis_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def populate(db: Path, app: ModuleType) -> None:
    workflows = [app.order, app.batch, app.waiter]
    old = VirtualClock(start=datetime(2023, 1, 1, tzinfo=UTC).timestamp())
    async with Engine(f"sqlite:///{db}", workflows=workflows, clock=old) as engine:
        await (await engine.start(app.order, "ap", 5, id="old-1")).result(timeout=5)
    async with Engine(f"sqlite:///{db}", workflows=workflows) as engine:
        for run_id, region, amount, tags in (
            ("ord-eu-1", "eu", 50, ["vip"]),
            ("ord-eu-2", "eu", 150, ["vip", "gift"]),
            ("ord-us-1", "us", 120, []),
        ):
            handle = await engine.start(app.order, region, amount, id=run_id, tags=tags)
            await handle.result(timeout=5)
        await (await engine.start(app.batch, [1, 2], id="batch-1")).result(timeout=5)
        await engine.start(app.order, "us", 7, id="ord-later", start_delay="1h")
        await engine.start(app.waiter, id="wait-1", tags=["idle"])
        await engine.start(app.waiter, id="wait-2")
        await engine.suspend("wait-2")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    app_dir = tmp_path_factory.mktemp("app")
    (app_dir / "vis_app.py").write_text(textwrap.dedent(APP))
    (app_dir / "vis_app_next.py").write_text(textwrap.dedent(NEXT_APP))
    (app_dir / "vis_no_workflows.py").write_text("ANSWER = 42\n")
    app = import_app(app_dir)
    db = tmp_path_factory.mktemp("store") / "runs.db"
    asyncio.run(populate(db, app))
    yield Store(db, app_dir, app)


ALL_IDS = {
    "old-1",
    "ord-eu-1",
    "ord-eu-2",
    "ord-us-1",
    "batch-1",
    "batch-1/1",
    "batch-1/2",
    "ord-later",
    "wait-1",
    "wait-2",
}


# --- workflows list --------------------------------------------------------------------


def test_list_filters_by_status_type_id_prefix_and_parent(store: Store) -> None:
    everything, two_statuses, running, waiters, prefixed, children, child, none = listed(
        store.db,
        ("--limit", "100"),
        ("--status", "pending", "--status", "suspended"),
        ("--status", "running"),
        ("--type", "waiter"),
        ("--id-prefix", "ord-eu-"),
        ("--parent", "batch-1"),
        ("--parent", "batch-1", "--id-prefix", "batch-1/2", "--type", "order"),
        ("--type", "order", "--status", "completed", "--parent", "ord-eu-1"),
    )
    assert set(everything) == ALL_IDS
    assert set(two_statuses) == {"ord-later", "wait-2"}
    assert running == ["wait-1"]
    assert set(waiters) == {"wait-1", "wait-2"}
    assert set(prefixed) == {"ord-eu-1", "ord-eu-2"}
    assert children == ["batch-1/2", "batch-1/1"]  # newest first
    assert child == ["batch-1/2"]
    assert none == []


def test_list_filters_by_attribute_values_and_ranges(store: Store) -> None:
    eu, us, at_least, above, below, between, flags, number, text = listed(
        store.db,
        ("--attr", "region=eu"),
        ("--attr", 'region="us"'),  # a JSON string works too
        ("--attr", "amount>=120"),
        ("--attr", "amount>120"),
        ("--attr", "amount<2"),
        ("--attr", "amount>=5", "--attr", "amount<=120"),
        ("--attr", "rush=true", "--attr", "region=eu"),
        ("--attr", "amount=50"),
        ("--attr", 'amount="50"'),  # the string "50" is not the number 50
    )
    assert set(eu) == {"ord-eu-1", "ord-eu-2", "batch-1/1", "batch-1/2"}
    assert us == ["ord-us-1"]
    assert set(at_least) == {"ord-eu-2", "ord-us-1"}
    assert above == ["ord-eu-2"]
    assert below == ["batch-1/1"]
    assert set(between) == {"old-1", "ord-eu-1", "ord-us-1"}
    assert flags == ["ord-eu-2"]
    assert (number, text) == (["ord-eu-1"], [])


def test_list_filters_by_tags_requiring_every_tag(store: Store) -> None:
    vip, both, idle = listed(
        store.db, ("--tag", "vip"), ("--tag", "vip", "--tag", "gift"), ("--tag", "idle")
    )
    assert set(vip) == {"ord-eu-1", "ord-eu-2"}
    assert both == ["ord-eu-2"]
    assert idle == ["wait-1"]


def test_list_filters_by_creation_and_update_time(store: Store) -> None:
    recent, old, old_by_date, window, empty_window, stale, fresh = listed(
        store.db,
        ("--since", "1h", "--limit", "100"),
        ("--until", "2 days"),
        ("--until", "2024-01-01"),  # a date alone: local midnight
        ("--since", "2022-12-31T00:00:00Z", "--until", "2023-01-02T00:00:00+00:00"),
        ("--since", "2023-01-01T00:00:01Z", "--until", "2023-06-01T00:00:00Z"),
        ("--updated-until", "30 minutes"),
        ("--updated-since", "1h", "--type", "waiter"),
    )
    assert set(recent) == ALL_IDS - {"old-1"}
    assert old == old_by_date == window == stale == ["old-1"]
    assert empty_window == []
    assert set(fresh) == {"wait-1", "wait-2"}


def test_list_table_shows_parent_and_tags_columns_and_pages_with_a_cursor(store: Store) -> None:
    children, tagged, first = concurrently(
        store.db,
        ("workflows", "list", "--parent", "batch-1"),
        ("workflows", "list", "--tag", "vip"),
        ("workflows", "list", "--type", "order", "--limit", "2", "--json"),
    )
    assert cells(children.stdout)[0][-1] == "parent"
    assert cells(children.stdout)[2][-1] == "batch-1"
    assert cells(tagged.stdout)[0][-1] == "tags"
    assert "gift, vip" in tagged.stdout  # tags are stored sorted

    page = first.json()
    assert len(page["items"]) == 2 and page["next_cursor"]
    [rest] = listed(store.db, ("--type", "order", "--cursor", page["next_cursor"]))
    assert {i["id"] for i in page["items"]}.isdisjoint(rest)
    assert len(rest) + 2 == 7


# --- workflows count -------------------------------------------------------------------


def test_count_groups_by_status_type_and_attribute(store: Store) -> None:
    by_status, by_type, by_region, by_rush = counted(
        store.db,
        (),
        ("--by", "type"),
        ("--by", "attr:region", "--status", "completed"),
        ("--by", "attr:rush", "--type", "order", "--since", "1h"),
    )
    assert by_status == {"completed": 7, "pending": 1, "running": 1, "suspended": 1}
    assert by_type == {"order": 7, "batch": 1, "waiter": 2}
    # Runs without the attribute are not counted: the batch, and ord-later (not started yet).
    assert by_region == {"eu": 4, "us": 1, "ap": 1}
    assert by_rush == {False: 3, True: 2}

    table = pyweft(store.db, "workflows", "count", "--by", "attr:region", "--type", "order")
    assert table.code == 0, table.output
    rows = cells(table.stdout)
    assert rows[0] == ["attr:region", "count"]
    assert rows[2:] == [["eu", "4"], ["ap", "1"], ["us", "1"]]


def test_count_applies_every_filter_list_takes(store: Store) -> None:
    filtered, children, none = counted(
        store.db,
        (
            "--by",
            "type",
            "--attr",
            "region=eu",
            "--tag",
            "vip",
            "--since",
            "1h",
            "--id-prefix",
            "ord",
        ),
        ("--parent", "batch-1", "--updated-since", "1h"),
        ("--status", "timed_out"),
    )
    assert filtered == {"order": 2}
    assert children == {"completed": 2}
    assert none == {}
    empty = pyweft(store.db, "workflows", "count", "--status", "timed_out")
    assert (empty.code, empty.stdout.strip()) == (0, "no workflow runs match")


# --- bad input ----------------------------------------------------------------------------

UNPARSABLE = [
    (("list", "--attr", "region"), "--attr 'region' is not NAME=VALUE"),
    (("list", "--attr", "region="), "--attr 'region=' has no value"),
    (("list", "--attr", "region=null"), "is JSON but not one value"),
    (("list", "--attr", "a=1", "--attr", "a=2"), "'a' is already filtered"),
    (("list", "--attr", "a>1", "--attr", "a>2"), "'a' already has a > bound"),
    (("list", "--since", "yesterday"), "--since 'yesterday' is neither a duration"),
    (("count", "--until", "2023-13-01"), "--until '2023-13-01' is neither a duration"),
    (("count", "--by", "region"), "--by 'region' is not status, type or attr:NAME"),
]


def test_a_filter_the_cli_cannot_parse_exits_2_before_opening_the_store(tmp_path: Path) -> None:
    db = tmp_path / "untouched.db"
    results = concurrently(db, *(("workflows", *args) for args, _ in UNPARSABLE))
    for done, (_, message) in zip(results, UNPARSABLE, strict=True):
        assert message in one_error_line(done, "BadParameter", 2)
    assert not db.exists()


def test_a_filter_the_engine_refuses_exits_1_with_its_error_code(store: Store) -> None:
    status, name, by = concurrently(
        store.db,
        ("workflows", "list", "--status", "running", "--status", "asleep"),
        ("workflows", "count", "--attr", "no good=1"),
        ("workflows", "count", "--by", "attr:no good"),
    )
    assert "unknown status 'asleep'" in one_error_line(status, "InvalidArgumentError", 1)
    assert "'no good' is invalid" in one_error_line(name, "InvalidArgumentError", 1)
    assert "'no good' is invalid" in one_error_line(by, "InvalidArgumentError", 1)


# --- workflows fork ----------------------------------------------------------------------


def ledger(store: Store, run_id: str) -> list[tuple[int, str]]:
    """``(pid, text)`` of every activity that ran for ``run_id``."""
    lines = (store.app_dir / "ledger.txt").read_text().splitlines()
    rows = [(int(pid), text) for pid, text in (line.split("\t") for line in lines)]
    return [(pid, text) for pid, text in rows if text.startswith(f"{run_id}:")]


async def test_fork_with_app_stores_a_run_that_the_next_engine_drives_from_the_fork_point(
    store: Store, tmp_path: Path
) -> None:
    db = tmp_path / "fork.db"
    async with Engine(f"sqlite:///{db}", workflows=[store.app.order]) as engine:
        await (await engine.start(store.app.order, "eu", 80, id="src", tags=["vip"])).result()

    fork = ("workflows", "fork", "src", "--app", "vis_app")
    done, as_json = concurrently(
        db, (*fork, "--from-step", "1", "--id", "again"), (*fork, "--json"), app_dir=store.app_dir
    )
    assert done.code == 0, done.output
    assert "forked src at step 1 as again (order version 2)" in done.stdout
    assert "registers 'order' picks it up" in done.stdout
    assert as_json.code == 0, as_json.output
    data = as_json.json()
    assert (data["status"], data["forked_from"], data["forked_at_step"]) == ("running", "src", 2)
    # The CLI ran none of the workflow's code: no activity, and the runs stay running.
    assert ledger(store, "again") == ledger(store, data["id"]) == []

    async with Engine(f"sqlite:///{db}", recover=False) as engine:
        forked = await engine.describe("again")
    assert (forked.status, forked.version, forked.step_count) == ("running", "2", 1)
    assert (forked.forked_from, forked.forked_at_step) == ("src", 1)
    assert forked.tags == ["vip"]
    assert forked.attributes == {"region": "eu", "amount": 80, "rush": False}

    async with Engine(f"sqlite:///{db}", workflows=[store.app.order]) as engine:
        assert await engine.get_handle("again").result(timeout=5) == 80
        assert await engine.get_handle(data["id"]).result(timeout=5) == 80
    # Step 1 was replayed from src's journal; only step 2 ran, in this process.
    assert ledger(store, "again") == [(os.getpid(), "again:charge")]
    assert ledger(store, data["id"]) == []  # forked after both steps: nothing left to run


def one_error_line_then_hint(done: Done, code: str) -> tuple[str, str]:
    assert done.code == 1, done.output
    error, hint = done.stderr.strip().splitlines()
    assert error.startswith(f"error: {code}: "), done.output
    return error, hint


def test_fork_reports_missing_apps_types_runs_and_modules(store: Store) -> None:
    fork = ("workflows", "fork")
    missing, bad_step, taken, unknown, empty = concurrently(
        store.db,
        (*fork, "no-such-run", "--app", "vis_app"),
        (*fork, "ord-eu-1", "--app", "vis_app", "--from-step", "-1"),
        (*fork, "ord-eu-1", "--app", "vis_app", "--id", "ord-eu-2"),
        (*fork, "ord-eu-1", "--app", "no_such_module"),
        (*fork, "ord-eu-1", "--app", "vis_no_workflows"),
        app_dir=store.app_dir,
    )
    assert "'no-such-run'" in one_error_line(missing, "WorkflowNotFoundError", 1)
    assert "from_step must be an int >= 0" in one_error_line(bad_step, "InvalidArgumentError", 1)
    assert "'ord-eu-2'" in one_error_line(taken, "WorkflowAlreadyExistsError", 1)
    assert "cannot be imported: No module named 'no_such_module'" in one_error_line(
        unknown, "BadParameter", 2
    )
    assert "defines no @workflow functions" in one_error_line(empty, "BadParameter", 2)
    [after] = listed(store.db, ("--limit", "100"))
    assert set(after) == ALL_IDS  # nothing was created


def test_fork_without_an_app_keeps_the_source_version(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"

    async def seed() -> None:
        async with Engine(f"sqlite:///{db}", workflows=[plain_source]) as engine:
            await (await engine.start(plain_source, id="src")).result(timeout=5)

    asyncio.run(seed())
    done = pyweft(db, "workflows", "fork", "src", "--id", "plain", "--json")
    assert done.code == 0, done.output
    data = json.loads(done.stdout)
    assert (data["id"], data["status"], data["version"]) == ("plain", "running", "7")
    assert data["forked_from"] == "src"


@workflow(name="plain_source", version="7")
async def plain_source(ctx: WorkflowContext) -> int:
    return 1


def test_fork_with_an_app_that_lacks_the_type_names_it(store: Store) -> None:
    done = pyweft(
        store.db, "workflows", "fork", "wait-1", "--app", "vis_app_next", app_dir=store.app_dir
    )
    _, hint = one_error_line_then_hint(done, "WorkflowNotRegisteredError")
    assert hint == "--app vis_app_next defines no workflow named 'waiter'"


# --- versions check ---------------------------------------------------------------------


def test_versions_check_passes_when_every_unfinished_run_matches_its_registered_version(
    store: Store,
) -> None:
    check = ("versions", "check", "--app", "vis_app")
    done, as_json = concurrently(store.db, check, (*check, "--json"), app_dir=store.app_dir)
    assert done.code == 0, done.output
    rows = cells(done.stdout)
    assert rows[0] == [
        "workflow",
        "type",
        "registered",
        "unfinished",
        "runs",
        "by",
        "version",
        "verdict",
    ]
    assert ["order", "2", "2:", "1", "ok"] in rows
    assert ["waiter", "1", "1:", "2", "ok"] in rows
    assert ["batch", "1", "none", "ok"] in rows
    assert "safe: every unfinished run matches the version vis_app registers" in done.stdout

    assert as_json.code == 0, as_json.output
    report = as_json.json()
    assert (report["safe"], report["unsafe_runs"]) == (True, 0)
    assert {t["workflow_type"]: t["unfinished"] for t in report["types"]} == {
        "batch": {},
        "order": {"2": 1},
        "waiter": {"1": 2},
    }


def test_versions_check_fails_for_stale_versions_and_unregistered_types(store: Store) -> None:
    check = ("versions", "check", "--app", "vis_app_next")
    done, as_json = concurrently(store.db, check, (*check, "--json"), app_dir=store.app_dir)
    assert done.code == 1, done.output
    rows = cells(done.stdout)
    assert ["order", "3", "2:", "1", "unsafe:", "1", "unfinished", "on", "version", "2"] in rows
    assert [
        "waiter",
        "-",
        "1:",
        "2",
        "unsafe:",
        "2",
        "unfinished,",
        "type",
        "not",
        "registered",
    ] in rows
    assert "unsafe: 3 unfinished run(s) of order, waiter do not match" in done.stdout

    assert as_json.code == 1, as_json.output
    report = as_json.json()
    assert (report["safe"], report["unsafe_runs"]) == (False, 3)
    by_type = {t["workflow_type"]: t for t in report["types"]}
    assert by_type["order"]["registered_version"] == "3"
    assert (by_type["order"]["unsafe_runs"], by_type["order"]["safe"]) == (1, False)
    assert (by_type["waiter"]["registered_version"], by_type["waiter"]["unsafe_runs"]) == (None, 2)
    assert by_type["batch"]["safe"] is True


def test_versions_check_needs_an_importable_app_with_workflows(store: Store) -> None:
    no_app, unknown, empty = concurrently(
        store.db,
        ("versions", "check"),
        ("versions", "check", "--app", "nope"),
        ("versions", "check", "--app", "vis_no_workflows"),
        app_dir=store.app_dir,
    )
    assert "needs --app MODULE" in one_error_line(no_app, "BadParameter", 2)
    assert "cannot be imported" in one_error_line(unknown, "BadParameter", 2)
    assert "defines no @workflow functions" in one_error_line(empty, "BadParameter", 2)
