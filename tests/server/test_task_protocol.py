"""The remote worker protocol's published JSON Schema: shipped, served, and the same
thing the server's decoder accepts."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest

from pyweft.server.routes_tasks_ws import shipped_schema_text
from pyweft.worker import protocol as p

VALID_WORKER_FRAMES: list[dict[str, Any]] = [
    {"type": "register", "protocolVersion": 1, "activities": ["a"]},
    {
        "type": "register",
        "protocolVersion": 1,
        "activities": ["a", "b.c"],
        "concurrency": 1000,
        "workerId": "w-1.x:y@z",
        "sessionId": "A" * 32,
        "queues": ["q_2"],
        "inFlight": [{"operationId": "op", "attemptToken": "t"}],
        "sdk": "x/1",
    },
    {"type": "heartbeat"},
    {"type": "heartbeat", "workerId": "w"},
    {"type": "taskResult", "operationId": "o", "attemptToken": "t", "status": "completed"},
    {
        "type": "taskResult",
        "operationId": "o",
        "attemptToken": "t",
        "status": "completed",
        "value": {"x": [1, None]},
    },
    {
        "type": "taskResult",
        "operationId": "o",
        "attemptToken": "t",
        "status": "failed",
        "error": "boom",
    },
    {
        "type": "taskResult",
        "operationId": "o",
        "attemptToken": "t",
        "status": "failed",
        "error": {"message": "m", "type": "T", "nonRetryable": True, "timeoutKind": "heartbeat"},
    },
    {"type": "taskResult", "operationId": "o", "attemptToken": "t", "status": "cancelled"},
    {
        "type": "taskResult",
        "operationId": "o",
        "attemptToken": "t",
        "status": "rejected",
        "error": "no such activity",
    },
    {"type": "drain"},
]

INVALID_WORKER_FRAMES: list[tuple[Any, str]] = [
    ({"type": "register", "activities": ["a"]}, "invalid_message"),  # no protocolVersion
    ({"type": "register", "protocolVersion": 1, "activities": []}, "invalid_message"),
    (
        {"type": "register", "protocolVersion": 1, "activities": ["a"], "concurrency": 0},
        "invalid_message",
    ),
    (
        {"type": "register", "protocolVersion": 1, "activities": ["a"], "concurrency": 1001},
        "invalid_message",
    ),
    (
        {"type": "register", "protocolVersion": 1, "activities": ["a"], "workerId": "a b"},
        "invalid_message",
    ),
    (
        {"type": "register", "protocolVersion": 1, "activities": ["a"], "queues": ["bad queue"]},
        "invalid_message",
    ),
    (
        {"type": "register", "protocolVersion": 1, "activities": ["a"], "extra": 1},
        "invalid_message",
    ),
    ({"type": "heartbeat", "beat": 1}, "invalid_message"),
    (
        {"type": "taskResult", "operationId": "o", "attemptToken": "t", "status": "done"},
        "invalid_message",
    ),
    (
        {"type": "taskResult", "operationId": "", "attemptToken": "t", "status": "completed"},
        "invalid_message",
    ),
    ({"type": "taskResult", "attemptToken": "t", "status": "completed"}, "invalid_message"),
    (
        {
            "type": "taskResult",
            "operationId": "o",
            "attemptToken": "t",
            "status": "failed",
            "error": {"type": "T"},
        },
        "invalid_message",
    ),
    ({"type": "task"}, "unknown_message_type"),  # a server frame, not a worker's
    ({"type": "subscribe"}, "unknown_message_type"),
    ({"kind": "register"}, "invalid_message"),
    ([1, 2], "invalid_message"),
    ("register", "invalid_message"),
]


def worker_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(shipped_schema_text())
    wrapped = {**schema, "oneOf": [{"$ref": "#/$defs/WorkerFrame"}]}
    return jsonschema.Draft202012Validator(wrapped)


def test_the_shipped_schema_is_the_one_the_frame_structs_define() -> None:
    assert shipped_schema_text() == p.render_schema(), (
        "src/pyweft/server/schemas/task-protocol.json is stale: regenerate it with "
        "python -c 'from pyweft.worker import protocol as p; print(p.render_schema(), end=\"\")'"
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(shipped_schema_text()))


@pytest.mark.parametrize("frame", VALID_WORKER_FRAMES, ids=lambda f: str(f.get("type")))
def test_a_frame_the_schema_allows_is_accepted_by_the_server(frame: dict[str, Any]) -> None:
    worker_validator().validate(frame)
    decoded = p.decode_worker_frame(json.dumps(frame))
    assert type(decoded).__struct_config__.tag == frame["type"]


@pytest.mark.parametrize(("frame", "code"), INVALID_WORKER_FRAMES, ids=str)
def test_a_frame_the_schema_refuses_is_refused_by_the_server(frame: Any, code: str) -> None:
    assert not worker_validator().is_valid(frame)
    with pytest.raises(p.FrameError) as err:
        p.decode_worker_frame(json.dumps(frame))
    assert err.value.code == code


def test_text_that_is_not_json_is_invalid_json() -> None:
    with pytest.raises(p.FrameError) as err:
        p.decode_worker_frame('{"type": "heartbeat"')
    assert err.value.code == "invalid_json"


def test_every_server_frame_the_server_sends_fits_the_schema() -> None:
    schema = json.loads(shipped_schema_text())
    validator = jsonschema.Draft202012Validator(
        {**schema, "oneOf": [{"$ref": "#/$defs/ServerFrame"}]}
    )
    frames = [
        p.RegisterAck(
            protocol_version=1,
            worker_id="w",
            session_id="s" * 32,
            queues=["q"],
            activities=["a"],
            concurrency=2,
            heartbeat_interval_ms=5000,
            reconnect_grace_ms=2000,
            resumed=["op"],
        ),
        p.RegisterError(code="duplicate_worker_id", message="m", supported_protocol_versions=[1]),
        p.Task(
            operation_id="op",
            attempt_token="t",
            activity_name="a",
            input=[1, "x"],
            attempt=1,
            queue="q",
            workflow_id="wf",
            workflow_type="T",
            step=0,
            generation=1,
            execution_token="e",
            scheduled_at_ms=1.5,
            visibility_timeout_ms=30000,
        ),
        p.Cancel(operation_id="op", attempt_token="t", reason="r"),
        p.ResultAck(operation_id="op", attempt_token="t"),
        p.ResultRejected(operation_id="op", attempt_token="t", code="stale", message="m"),
        p.Shutdown(reason="r", drain_timeout_ms=1000),
        p.ProtocolError(code="invalid_json", message="m"),
    ]
    for frame in frames:
        text = p.encode(frame)
        validator.validate(json.loads(text))
        assert p.decode_server_frame(text) == frame


async def test_the_schema_is_served_without_a_credential(authed: httpx.AsyncClient) -> None:
    response = await authed.get("/api/v1/tasks/protocol")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/schema+json")
    assert response.json() == p.protocol_schema()
