"""The routes the dashboard needs: schedules, the registry with JSON Schemas, activities
completed by token, and the dashboard's own static files (served only when asked for)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from pyweft import Engine, MemoryStorage, WorkflowContext, activity, activity_context, workflow
from pyweft.definitions import workflow_definition_of
from pyweft.engine.schemas import workflow_schema
from pyweft.server import create_app
from support.poll import eventually

API = "/api/v1"


async def test_a_schedule_is_created_listed_paused_resumed_triggered_and_deleted(
    http: httpx.AsyncClient, engine: Engine
) -> None:
    made = await http.post(
        f"{API}/schedules",
        json={"id": "hourly", "type": "add_three", "args": [1], "cron": "0 * * * *"},
    )
    assert made.status_code == 201, made.text
    assert made.json()["cron"] == "0 * * * *" and made.json()["paused"] is False
    listed = (await http.get(f"{API}/schedules")).json()["items"]
    assert [s["id"] for s in listed] == ["hourly"]

    detail = (await http.get(f"{API}/schedules/hourly?preview=3")).json()
    fires = [datetime.fromisoformat(t) for t in detail["next_fires"]]
    assert len(fires) == 3 and all(t.minute == 0 for t in fires) and fires == sorted(fires)

    assert (await http.post(f"{API}/schedules/hourly/pause")).json()["paused"] is True
    assert (await http.get(f"{API}/schedules?paused=true")).json()["items"][0]["id"] == "hourly"
    assert (await http.post(f"{API}/schedules/hourly/resume")).json()["paused"] is False

    run_id = (await http.post(f"{API}/schedules/hourly/trigger")).json()["id"]
    assert await engine.result(run_id, timeout=5) == 4

    edited = await http.patch(f"{API}/schedules/hourly", json={"cron": "30 * * * *"})
    assert edited.json()["cron"] == "30 * * * *"
    assert (await http.delete(f"{API}/schedules/hourly")).json() == {"ok": True}
    gone = await http.get(f"{API}/schedules/hourly")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "ScheduleNotFoundError"


async def test_a_backfill_runs_each_past_occurrence_in_the_window(
    http: httpx.AsyncClient, engine: Engine
) -> None:
    # allow_all: under the default (skip) an occurrence whose predecessor still runs is
    # dropped, which is the overlap policy working, not the backfill.
    body = {"id": "h", "type": "add_three", "args": [0], "cron": "0 * * * *"}
    await http.post(f"{API}/schedules", json={**body, "overlap": "allow_all"})
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start, end = hour - timedelta(hours=3, minutes=30), hour - timedelta(hours=1, minutes=30)
    window = {"start": start.isoformat(), "end": end.isoformat()}  # holds H-3h and H-2h
    answer = await http.post(f"{API}/schedules/h/backfill", json=window)
    assert answer.json() == {"started": 2}
    assert (await http.post(f"{API}/schedules/h/backfill", json=window)).json() == {"started": 0}


async def test_bad_schedule_input_is_refused_and_stores_nothing(
    http: httpx.AsyncClient, engine: Engine
) -> None:
    cases: list[dict[str, Any]] = [
        {"type": "add_three", "cron": "0 * * * *"},  # no id
        {"id": "x", "type": "add_three", "cron": "not a cron"},
        {"id": "x", "type": "add_three", "every": "1h", "overlap": "sometimes"},
        {"id": "x", "type": "add_three", "every": "1h", "colour": "red"},
    ]
    for body in cases:
        answer = await http.post(f"{API}/schedules", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["message"]
    assert (await http.get(f"{API}/schedules")).json()["items"] == []
    future = await http.post(f"{API}/schedules", json={"id": "d", "type": "add_three",
                                                       "every": "1h", "args": [1]})  # fmt: skip
    assert future.status_code == 201
    late = datetime.now(UTC) + timedelta(days=1)
    refused = await http.post(
        f"{API}/schedules/d/backfill", json={"start": 0, "end": late.isoformat()}
    )
    assert refused.status_code == 400 and "future" in refused.json()["error"]["message"]
    assert (await http.get(f"{API}/schedules/d?preview=0")).status_code == 400
    assert (await http.get(f"{API}/schedules?paused=maybe")).status_code == 400


@dataclass
class Parcel:
    weight_kg: float
    fragile: bool = False


@workflow
async def send(ctx: WorkflowContext, parcel: Parcel, to: str, copies: int = 1) -> list[str]:
    """Send a parcel.

    More text that is not the summary."""
    return [to] * copies


@workflow
async def untyped(ctx, thing, other=None):  # type: ignore[no-untyped-def]
    return thing


def test_schemas_follow_the_type_hints_and_accept_anything_where_there_are_none() -> None:
    definition = workflow_definition_of(send)
    assert definition is not None
    schema = workflow_schema(definition)
    assert [(p.name, p.required, p.default) for p in schema.parameters] == [
        ("parcel", True, None),
        ("to", True, None),
        ("copies", False, 1),
    ]
    assert schema.input["minItems"] == 2 and schema.input["maxItems"] == 3
    assert schema.input["prefixItems"][1] == {"title": "to", "type": "string"}
    parcel = schema.input["$defs"]["Parcel"]
    assert parcel["properties"]["weight_kg"] == {"type": "number"}
    assert parcel["required"] == ["weight_kg"]
    assert schema.output == {"type": "array", "items": {"type": "string"}}
    assert schema.description == "Send a parcel."

    loose = workflow_definition_of(untyped)
    assert loose is not None
    plain = workflow_schema(loose)
    assert [(p.name, p.schema, p.required) for p in plain.parameters] == [
        ("thing", {}, True),
        ("other", {}, False),
    ]
    assert plain.output == {}


async def test_the_registry_route_lists_every_workflow_with_its_schemas(
    http: httpx.AsyncClient,
) -> None:
    body = (await http.get(f"{API}/registry/workflows")).json()
    by_type = {w["workflow_type"]: w for w in body["workflows"]}
    assert set(by_type) == {"add_three", "waits_for_go", "collects_two", "fails"}
    assert by_type["add_three"]["parameters"] == [
        {"name": "x", "required": True, "schema": {"type": "integer"}, "default": None}
    ]
    assert by_type["add_three"]["output"] == {"type": "integer"}


async def test_the_dashboard_is_served_only_when_asked_for(
    make_client: Callable[..., Any],
) -> None:
    plain: httpx.AsyncClient = await make_client()
    assert (await plain.get("/")).status_code == 404

    client: httpx.AsyncClient = await make_client(dashboard=True)
    page = await client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    # Every file the page and its modules refer to is in the package; nothing external.
    pending, seen = re.findall(r'(?:src|href)="(/ui/[^"]+)"', page.text), set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        asset = await client.get(path)
        assert asset.status_code == 200, path
        if path.endswith(".js"):
            # The SVG namespace is an identifier, not a fetch.
            text = asset.text.replace("http://www.w3.org/2000/svg", "")
            assert "http://" not in text and "https://" not in text, path
            pending += ["/ui/" + m for m in re.findall(r'from "\./([\w-]+\.js)"', asset.text)]
    assert len([p for p in seen if p.endswith(".js")]) >= 10
    again = await client.get("/ui/app.js", headers={"If-None-Match": asset.headers["etag"]})
    assert again.status_code in (200, 304)
    assert (await client.get("/ui/nope.js")).status_code == 404
    assert (await client.get("/ui/..%2F__init__.py")).status_code == 404


async def test_the_dashboard_guide_example_serves_the_page_and_its_start_form_schema(
    tmp_path: Any,
) -> None:
    from support import guides

    code = guides.block("dashboard", 1).replace("sqlite:///shop.db", f"sqlite:///{tmp_path}/s.db")
    scope: dict[str, Any] = {}
    exec(compile(code, "dashboard.md", "exec"), scope)
    engine, app = scope["engine"], scope["app"]
    async with engine:
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert (await client.get("/")).status_code == 200
            assert (await client.get(f"{API}/registry/workflows")).status_code == 401
        await lifespan.__aexit__(None, None, None)
        (schema,) = engine.workflow_schemas()
        assert [(p.name, p.required) for p in schema.parameters] == [
            ("sku", True),
            ("quantity", False),
        ]
        assert schema.description == "Charge for an order."


@activity
async def signed(doc: str) -> dict[str, str]:
    return activity_context().complete_async()  # type: ignore[no-any-return]


@workflow
async def signs(ctx: WorkflowContext, doc: str) -> dict[str, str]:
    return await ctx.run(signed, doc)


async def test_an_activity_waiting_for_its_token_is_listed_and_completed_over_http() -> None:
    async with Engine(MemoryStorage(), workflows=[signs]) as eng:
        app = create_app(eng)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            handle = await eng.start(signs, "contract", id="doc-1")

            seen: list[dict[str, Any]] = []

            async def listed() -> bool:
                answer = await http.get(f"{API}/activities/pending?workflow_id=doc-1")
                seen[:] = answer.json()["items"]
                return bool(seen)

            await eventually(listed, what="the activity waiting for its token")
            (item,) = seen
            assert item["activity"] == "signed" and item["step"] == 1
            missing = await http.post(f"{API}/activities/complete", json={"result": 1})
            assert missing.status_code == 400
            done = await http.post(
                f"{API}/activities/complete", json={"token": item["token"], "result": {"by": "ana"}}
            )
            assert done.json() == {"ok": True}
            assert await handle.result(timeout=5) == {"by": "ana"}
            again = await http.post(f"{API}/activities/fail", json={"token": item["token"],
                                                                    "error": "late"})  # fmt: skip
            assert again.status_code == 404
            assert again.json()["error"]["code"] == "ActivityTokenNotFoundError"
            assert (await http.get(f"{API}/activities/pending?limit=0")).status_code == 400
