"""MCP over Streamable HTTP at /api/mcp: the SDK's own client against a real uvicorn
server, behind the REST API's API-key auth and scopes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pyweft import Engine
from pyweft.server import ServerAuth
from pyweft.server.keys import ApiKeyStore

from .live import live_server


@asynccontextmanager
async def mcp_client(base: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(base + "/api/mcp", http_client=http)
        async with Client(transport) as client:
            yield client


@pytest.fixture
async def served(engine: Engine) -> AsyncIterator[tuple[str, ApiKeyStore]]:
    async with live_server(engine, auth=ServerAuth()) as base:
        yield base, ApiKeyStore(engine.storage)


def _structured(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


async def test_agent_lists_tools_starts_a_workflow_and_reads_its_result(
    served: tuple[str, ApiKeyStore],
) -> None:
    base, keys = served
    _, token = await keys.create(subject="agent", scopes=["workflows:write", "workflows:read"])
    async with mcp_client(base, token) as client:
        listed = await client.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert {
            "start_workflow",
            "list_workflows",
            "describe_workflow",
            "workflow_result",
            "signal_workflow",
            "query_workflow",
            "update_workflow",
            "cancel_workflow",
            "start_add_three",
        } <= set(tools)
        typed = tools["start_add_three"].input_schema
        assert typed["properties"]["x"] == {"type": "integer"}
        assert typed["required"] == ["x"]

        started = _structured(await client.call_tool("start_add_three", {"x": 4}))
        result = _structured(
            await client.call_tool("workflow_result", {"workflow_id": started["id"]})
        )
        assert result == {"id": started["id"], "status": "completed", "result": 7}

        described = _structured(
            await client.call_tool("describe_workflow", {"workflow_id": started["id"]})
        )
        assert described["status"] == "completed"
        generic = _structured(
            await client.call_tool("start_workflow", {"type": "add_three", "args": [1]})
        )
        page = _structured(await client.call_tool("list_workflows", {"type": "add_three"}))
        assert {started["id"], generic["id"]} <= {item["id"] for item in page["items"]}


async def test_tool_without_its_scope_is_refused_and_changes_nothing(
    served: tuple[str, ApiKeyStore], engine: Engine
) -> None:
    base, keys = served
    _, token = await keys.create(subject="reader", scopes=["workflows:read"])
    async with mcp_client(base, token) as client:
        refused = await client.call_tool("start_add_three", {"x": 1})
        assert refused.is_error
        assert refused.structured_content["error"]["code"] == "PermissionDeniedError"
        assert "workflows:write" in refused.structured_content["error"]["message"]
        page = _structured(await client.call_tool("list_workflows", {}))
        assert page["items"] == []
    assert (await engine.list()).items == []


async def test_request_without_credential_is_401_with_the_error_shape(
    served: tuple[str, ApiKeyStore],
) -> None:
    base, _ = served
    async with httpx.AsyncClient() as http:
        response = await http.post(
            base + "/api/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"Accept": "application/json, text/event-stream"},
        )
        wrong = await http.post(
            base + "/api/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"Authorization": "Bearer pwk_0000000000000000_" + "x" * 40},
        )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "AuthenticationError"
    assert wrong.status_code == 401
    with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the 401 its own way
        async with mcp_client(base, None) as client:
            await client.list_tools()


async def test_bad_tool_input_is_a_tool_error_naming_the_problem(
    served: tuple[str, ApiKeyStore],
) -> None:
    base, keys = served
    _, token = await keys.create(
        subject="agent", scopes=["workflows:write", "workflows:read", "signals:write"]
    )
    async with mcp_client(base, token) as client:
        calls: list[tuple[str, dict[str, Any], str]] = [
            ("start_add_three", {}, "x"),
            ("start_add_three", {"x": 1, "colour": "red"}, "colour"),
            ("describe_workflow", {"workflow_id": 5}, "workflow_id"),
            ("workflow_result", {"workflow_id": "r", "wait_s": 500}, "wait_s"),
            ("signal_workflow", {"workflow_id": "no-such-run", "name": "go"}, "no-such-run"),
            ("no_such_tool", {}, "no_such_tool"),
        ]
        for name, args, mentioned in calls:
            result = await client.call_tool(name, args)
            assert result.is_error, (name, args)
            text = result.content[0].text
            assert mentioned in text, (name, text)
