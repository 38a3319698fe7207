"""A property test over the OpenAPI document: whatever a caller sends to any documented
operation, the server never answers 5xx, and every 4xx carries the error shape.

Schemathesis is not installable offline here, so hypothesis plays its role: it draws
requests (operation, path parameters, query, JSON body) and the test sends each one
to the app on the test's event loop.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from pyweft import Engine, MemoryStorage
from pyweft.server import create_app
from support.poll import eventually

from .conftest import WORKFLOWS

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=10,
)
segment = st.text(min_size=1, max_size=30).filter(lambda s: s not in (".", ".."))
query_names = st.sampled_from(
    ["limit", "cursor", "status", "wait", "group_by", "type", "attribute.n.gte", "tag",
     "created_after", "id_prefix", "kind"]
) | st.text(max_size=8)  # fmt: skip


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if "sse" not in path  # streams are exercised in test_feeds
    ]


def draw_requests(ops: list[tuple[str, str, dict[str, Any]]], n: int) -> list[Any]:
    drawn: list[Any] = []

    @settings(max_examples=n, deadline=None, database=None)
    @given(
        op=st.sampled_from(ops),
        params=st.lists(st.sampled_from(["known", "x"]) | segment, min_size=3, max_size=3),
        query=st.dictionaries(query_names, st.text(max_size=12), max_size=3),
        body=st.one_of(json_values, st.dictionaries(st.text(max_size=12), json_values)),
    )
    def collect(op: Any, params: list[str], query: dict[str, str], body: Any) -> None:
        drawn.append((op, params, query, body))

    collect()
    return drawn


async def test_no_documented_operation_answers_5xx_and_every_4xx_has_the_shape() -> None:
    from pyweft.server.app import API_PREFIX, ENDPOINTS
    from pyweft.server.openapi import document

    # Drawn before the engine runs: drawing blocks the loop for seconds.
    requests = draw_requests(operations(document(ENDPOINTS, API_PREFIX)), 400)
    async with Engine(MemoryStorage(), workflows=WORKFLOWS) as engine:
        app = create_app(engine)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://t") as client,
        ):
            await engine.start("waits_for_go", id="known")
            served = (await client.get("/openapi.json")).json()
            assert served == document(ENDPOINTS, API_PREFIX)
            for (method, path, spec), params, query, body in requests:
                for name, value in zip(re.findall(r"{(\w+)}", path), params, strict=False):
                    path = path.replace("{" + name + "}", quote(value, safe=""))
                if "wait" in query or path.endswith("/result"):
                    # A valid long poll would hold the probe for up to 60 s, and a result
                    # poll without `wait` waits 30 s: a few of them on the run above
                    # outlasted the test's timeout.
                    query["wait"] = "0"
                kwargs: dict[str, Any] = {"params": query}
                if "requestBody" in spec:
                    kwargs["json"] = body
                resp = await client.request(method, path, **kwargs)
                assert resp.status_code < 500, (method, path, query, body, resp.text)
                if resp.status_code >= 400:
                    error = resp.json()["error"]
                    assert set(error) == {"code", "message", "details"}, resp.text


async def test_internal_errors_are_masked(engine: Engine, http: httpx.AsyncClient) -> None:
    from pyweft import WorkflowContext, workflow

    @workflow
    async def leaky(ctx: WorkflowContext) -> None:
        def boom() -> None:
            raise RuntimeError("password=hunter2 at /srv/secret.db")

        ctx.on_query("boom", boom)
        await ctx.wait_for_signal("never")

    engine.register_workflow(leaky)
    await engine.start(leaky, id="leaky")
    answers: list[httpx.Response] = []

    async def answered() -> bool:  # 404 until the run has registered its query handler
        answers.append(await http.post("/api/v1/workflows/leaky/query/boom", json={}))
        return answers[-1].status_code != 404

    await eventually(answered, what="the query handler")
    resp = answers[-1]
    assert resp.status_code == 500
    assert resp.json() == {
        "error": {
            "code": "ServerError",
            "message": "internal server error",
            "details": {"status": 500},
        }
    }
    assert "hunter2" not in resp.text
