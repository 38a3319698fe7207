"""The REST API over the ASGI app: each engine capability, and the error shape."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pyweft import Engine

API = "/api/v1"


def error_of(resp: httpx.Response) -> dict[str, object]:
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    return body["error"]  # type: ignore[no-any-return]


async def test_start_then_result_returns_the_workflow_value(http: httpx.AsyncClient) -> None:
    resp = await http.post(f"{API}/workflows", json={"type": "add_three", "args": [1], "id": "r1"})
    assert resp.status_code == 201
    assert resp.json() == {"id": "r1"}
    resp = await http.get(f"{API}/workflows/r1/result", params={"wait": 10})
    assert resp.status_code == 200
    assert resp.json()["result"] == 4


async def test_starting_a_taken_id_is_409_with_the_error_code(http: httpx.AsyncClient) -> None:
    body = {"type": "waits_for_go", "id": "dup"}
    assert (await http.post(f"{API}/workflows", json=body)).status_code == 201
    resp = await http.post(f"{API}/workflows", json=body)
    assert resp.status_code == 409
    err = error_of(resp)
    assert err["code"] == "WorkflowAlreadyExistsError"
    assert err["details"] == {"workflow_id": "dup"}
    again = await http.post(f"{API}/workflows", json={**body, "on_conflict": "use_existing"})
    assert again.status_code == 201 and again.json() == {"id": "dup"}


async def test_unknown_run_is_404_and_unknown_type_is_404(http: httpx.AsyncClient) -> None:
    resp = await http.get(f"{API}/workflows/nope")
    assert resp.status_code == 404
    assert error_of(resp)["code"] == "WorkflowNotFoundError"
    resp = await http.post(f"{API}/workflows", json={"type": "no_such_type"})
    assert resp.status_code == 404
    assert error_of(resp)["code"] == "WorkflowNotRegisteredError"


async def test_bad_input_is_400_and_stores_nothing(http: httpx.AsyncClient, engine: Engine) -> None:
    for body in (
        {"type": "add_three", "args": "not a list"},
        {"type": "add_three", "bogus": 1},
        {"args": [1]},
        {"type": "add_three", "id": "x", "idempotency_key": "k"},
        {"type": "add_three", "args": [1], "attributes": {"bad": {"nested": 1}}},
    ):
        resp = await http.post(f"{API}/workflows", json=body)
        assert resp.status_code == 400, body
        assert error_of(resp)["code"] == "InvalidArgumentError"
    resp = await http.post(
        f"{API}/workflows", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 400
    assert (await engine.list()).items == []


async def test_signal_query_update_and_describe(http: httpx.AsyncClient) -> None:
    await http.post(f"{API}/workflows", json={"type": "waits_for_go", "id": "w"})
    resp = await http.post(f"{API}/workflows/w/update/bump", json={"payload": 2})
    assert resp.status_code == 200 and resp.json() == {"result": 2}
    resp = await http.post(f"{API}/workflows/w/query/seen", json={})
    assert resp.json() == {"result": 2}
    resp = await http.post(f"{API}/workflows/w/signal/go", json={"payload": "now"})
    assert resp.json() == {"ok": True}
    result = await http.get(f"{API}/workflows/w/result", params={"wait": 10})
    assert result.json()["result"] == {"go": "now"}
    info = (await http.get(f"{API}/workflows/w")).json()
    assert info["status"] == "completed" and info["workflow_type"] == "waits_for_go"
    resp = await http.post(f"{API}/workflows/w/signal/go", json={})
    assert resp.status_code == 409
    assert error_of(resp)["code"] == "WorkflowTerminalError"


async def test_failed_run_result_is_422_with_the_failure(http: httpx.AsyncClient) -> None:
    await http.post(f"{API}/workflows", json={"type": "fails", "id": "f"})
    resp = await http.get(f"{API}/workflows/f/result", params={"wait": 10})
    assert resp.status_code == 422
    err = error_of(resp)
    assert err["code"] == "WorkflowFailedError"
    assert err["details"]["error_type"] == "ValueError"  # type: ignore[index]


async def test_result_long_poll_is_bounded_and_answers_408(http: httpx.AsyncClient) -> None:
    await http.post(f"{API}/workflows", json={"type": "waits_for_go", "id": "slow"})
    resp = await http.get(f"{API}/workflows/slow/result", params={"wait": 0.05})
    assert resp.status_code == 408
    assert error_of(resp)["code"] == "ResultTimeoutError"
    resp = await http.get(f"{API}/workflows/slow/result", params={"wait": 61})
    assert resp.status_code == 400


async def test_list_filters_and_cursor_paging(http: httpx.AsyncClient) -> None:
    for i in range(5):
        await http.post(
            f"{API}/workflows",
            json={"type": "waits_for_go", "id": f"p{i}", "tags": ["t"], "attributes": {"n": i}},
        )
    await http.post(f"{API}/workflows", json={"type": "waits_for_go", "id": "other"})
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, object] = {"id_prefix": "p", "limit": 2, "tag": "t"}
        if cursor:
            params["cursor"] = cursor
        page = (await http.get(f"{API}/workflows", params=params)).json()  # type: ignore[arg-type]
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == [f"p{i}" for i in range(5)]
    page = (await http.get(f"{API}/workflows", params={"attribute.n.gte": 3})).json()
    assert sorted(i["id"] for i in page["items"]) == ["p3", "p4"]
    groups = (await http.get(f"{API}/workflows/aggregate", params={"group_by": "type"})).json()[
        "groups"
    ]
    assert groups == [{"key": "waits_for_go", "count": 6}]
    resp = await http.get(f"{API}/workflows", params={"limit": 0})
    assert resp.status_code == 400
    resp = await http.get(f"{API}/workflows", params={"colour": "red"})
    assert resp.status_code == 400


async def test_cancel_and_history(http: httpx.AsyncClient) -> None:
    await http.post(f"{API}/workflows", json={"type": "waits_for_go", "id": "c"})
    assert (await http.post(f"{API}/workflows/c/cancel")).json() == {"ok": True}
    resp = await http.get(f"{API}/workflows/c/result", params={"wait": 10})
    assert error_of(resp)["code"] == "WorkflowCancelledError"
    history = (await http.get(f"{API}/workflows/c/history")).json()
    assert history["workflow_id"] == "c"
    assert history["events"][0]["kind"] == "created"


async def test_purge_needs_a_matching_confirmation(http: httpx.AsyncClient) -> None:
    await http.post(f"{API}/workflows", json={"type": "add_three", "args": [0], "id": "done"})
    await http.get(f"{API}/workflows/done/result", params={"wait": 10})
    await http.post(f"{API}/workflows", json={"type": "waits_for_go", "id": "live"})
    dry = (await http.post(f"{API}/workflows/purge", json={"filter": {}})).json()
    assert dry["count"] == 1 and dry["sample"] == ["done"]
    wrong = await http.post(
        f"{API}/workflows/purge",
        json={"filter": {"id_prefix": "l"}, "dry_run": False, "confirmation": dry["confirmation"]},
    )
    assert wrong.status_code == 400
    assert (await http.get(f"{API}/workflows/done")).status_code == 200
    done = await http.post(
        f"{API}/workflows/purge",
        json={"filter": {}, "dry_run": False, "confirmation": dry["confirmation"]},
    )
    assert done.json() == {"dry_run": False, "purged": 1}
    assert (await http.get(f"{API}/workflows/done")).status_code == 404
    assert (await http.get(f"{API}/workflows/live")).status_code == 200


async def test_bulk_signal_dry_run_then_commit_with_the_token(
    http: httpx.AsyncClient,
) -> None:
    for i in range(3):
        await http.post(f"{API}/workflows", json={"type": "waits_for_go", "id": f"bk-{i}"})
    body: dict[str, Any] = {
        "filter": {"id_prefix": "bk-", "status": "running"},
        "signal": {"name": "go", "payload": "all"},
    }
    dry = (await http.post(f"{API}/bulk/signal", json=body)).json()
    assert dry["dry_run"] is True and dry["matched"] == 3 and len(dry["sample"]) == 3
    unscoped = await http.post(f"{API}/bulk/cancel", json={"filter": {}})
    assert unscoped.status_code == 400
    assert unscoped.json()["error"]["code"] == "BulkScopeError"
    other = {**body, "signal": {"name": "go", "payload": "x"}}
    wrong = await http.post(
        f"{API}/bulk/signal",
        json={**other, "dry_run": False, "confirmation_token": dry["confirmation_token"]},
    )
    assert wrong.status_code == 409
    assert wrong.json()["error"]["code"] == "BulkOperationConfirmationError"
    done = await http.post(
        f"{API}/bulk/signal",
        json={**body, "dry_run": False, "confirmation_token": dry["confirmation_token"]},
    )
    assert done.status_code == 200
    assert (done.json()["matched"], done.json()["applied"]) == (3, 3)
    for i in range(3):
        got = await http.get(f"{API}/workflows/bk-{i}/result", params={"wait": 10})
        assert got.json()["result"] == {"go": "all"}
    audit = (await http.get(f"{API}/bulk/audit")).json()["items"]
    assert [a["audit_id"] for a in audit] == [done.json()["audit_id"]]
    assert audit[0]["operation"] == "signal" and audit[0]["actor"] == "anonymous"
    assert (await http.post(f"{API}/bulk/terminate", json={})).status_code == 400


async def test_body_over_the_cap_is_413_before_reading(make_client: object) -> None:
    client = await make_client(max_body_bytes=100)  # type: ignore[operator]
    resp = await client.post(f"{API}/workflows", json={"type": "add_three", "args": ["x" * 200]})
    assert resp.status_code == 413
    err = error_of(resp)
    assert err["code"] == "RequestTooLargeError" and err["details"] == {"max_bytes": 100}


async def test_unknown_route_keeps_the_error_shape(http: httpx.AsyncClient) -> None:
    resp = await http.get(f"{API}/nothing-here")
    assert resp.status_code == 404
    error_of(resp)


async def test_health_and_version_are_public(authed: httpx.AsyncClient) -> None:
    assert (await authed.get(f"{API}/health")).json() == {"status": "ok"}
    assert (await authed.get(f"{API}/version")).status_code == 200
    assert (await authed.get(f"{API}/principal")).json()["method"] == "unauthenticated"


@pytest.mark.parametrize("path", ["/openapi.json"])
async def test_openapi_document_lists_every_route(http: httpx.AsyncClient, path: str) -> None:
    from pyweft.server.app import ENDPOINTS

    doc = (await http.get(path)).json()
    assert doc["openapi"] == "3.1.0"
    for ep in ENDPOINTS:
        assert ep.method.lower() in doc["paths"][f"{API}{ep.path}"]


async def test_metrics_count_requests_by_route_and_status(authed: httpx.AsyncClient) -> None:
    await authed.get(f"{API}/health")
    await authed.get(f"{API}/workflows")  # 401: no key
    text = (await authed.get(f"{API}/metrics")).text
    assert 'pyweft_http_requests_total{method="GET",route="/health",status="200"} 1.0' in text
    assert 'pyweft_http_requests_total{method="GET",route="/workflows",status="401"} 1.0' in text
    assert 'pyweft_http_auth_failures_total{status="401"} 1.0' in text
    assert "pyweft_engine_runs_driven 0.0" in text
