"""REST endpoints for queues and workers: workflow queues (depth, in flight, oldest
waiting, recent starts, limits), worker processes with their heartbeats, drain and
resume, and activity task queues as the live workers serve them. Thin over
``engine.queues()``, ``engine.queue_info()``, ``engine.workers()``,
``engine.drain_worker()``, ``engine.resume_worker()`` and
``engine.activity_queue_limits()``."""

from __future__ import annotations

from starlette.responses import Response

from pyweft import InvalidArgumentError
from pyweft.server.calls import JSON, Call, Endpoint

READ_SCOPES = ("system:read", "workflows:read")


def _bool_param(call: Call, name: str) -> bool:
    text = call.query.get(name)
    if text not in (None, "true", "false"):
        raise InvalidArgumentError(f"{name} must be 'true' or 'false', got {text!r}")
    return bool(text == "true")


def _refuse_params(call: Call, accepted: tuple[str, ...]) -> None:
    unknown = set(call.query) - set(accepted)
    if unknown:
        names = ", ".join(accepted) or "none"
        raise InvalidArgumentError(
            f"unknown query parameter(s) {', '.join(sorted(unknown))}; accepted: {names}"
        )


async def list_queues(call: Call) -> Response:
    _refuse_params(call, ())
    return JSON({"items": [q.to_dict() for q in await call.engine.queues()]})


async def describe_queue(call: Call) -> Response:
    info = await call.engine.queue_info(call.params["name"])
    return JSON(info.to_dict())


async def list_workers(call: Call) -> Response:
    _refuse_params(call, ("include_gone",))
    found = await call.engine.workers(include_gone=_bool_param(call, "include_gone"))
    return JSON({"items": sorted(found, key=lambda w: w.id)})


async def _set_drain(call: Call, drain: bool) -> Response:
    # An id with no worker record is the engine's InvalidArgumentError (400), as from
    # Python, so the HTTP client raises what the engine raises.
    wid = call.params["worker_id"]
    engine = call.engine
    info = await (engine.drain_worker(wid) if drain else engine.resume_worker(wid))
    return JSON({"worker": info, "drain_requested": drain})


async def drain_worker(call: Call) -> Response:
    return await _set_drain(call, True)


async def resume_worker(call: Call) -> Response:
    return await _set_drain(call, False)


async def activity_queues(call: Call) -> Response:
    """Each activity queue with outstanding tasks or live workers
    (``engine.activity_queues``): tasks waiting and in flight, the oldest wait, its live
    workers and their slots, and its limits."""
    _refuse_params(call, ())
    items = []
    for q in await call.engine.activity_queues():
        lim = q.limits
        items.append(
            {
                "queue": q.name,
                "waiting": q.waiting,
                "oldest_waiting_s": q.oldest_waiting_s,
                "workers": q.workers + q.draining_workers,
                "draining": q.draining_workers,
                "slots": q.slots,
                "in_flight": q.in_flight,
                "concurrency_limit": None if lim is None else lim.concurrency,
                "rate_limit": None
                if lim is None or lim.rate_count is None
                else [lim.rate_count, lim.rate_window_s],
            }
        )
    return JSON({"items": items})


ENDPOINTS = (
    Endpoint(
        method="GET",
        path="/queues",
        handler=list_queues,
        scopes=READ_SCOPES,
        summary="Workflow queues: depth, in flight, oldest waiting, recent starts, limits",
        tag="queues",
    ),
    Endpoint(
        method="GET",
        path="/queues/{name}",
        handler=describe_queue,
        scopes=READ_SCOPES,
        summary="One workflow queue",
        responses={200: "OK", 404: "No such queue"},
        tag="queues",
    ),
    Endpoint(
        method="GET",
        path="/workers",
        handler=list_workers,
        scopes=READ_SCOPES,
        summary="Worker processes with their last heartbeat, queues and attempts in flight",
        query=(("include_gone", "boolean", "Also workers whose heartbeat is overdue"),),
        tag="queues",
    ),
    Endpoint(
        method="POST",
        path="/workers/{worker_id}/drain",
        handler=drain_worker,
        scopes=("workers:write",),
        summary="Ask a worker to stop claiming tasks; what it runs finishes",
        responses={200: "OK", 400: "No such worker"},
        tag="queues",
    ),
    Endpoint(
        method="POST",
        path="/workers/{worker_id}/resume",
        handler=resume_worker,
        scopes=("workers:write",),
        summary="Let a drained worker claim tasks again",
        responses={200: "OK", 400: "No such worker"},
        tag="queues",
    ),
    Endpoint(
        method="GET",
        path="/activity-queues",
        handler=activity_queues,
        scopes=READ_SCOPES,
        summary="Activity queues with tasks or live workers: waiting, in flight, workers, limits",
        tag="queues",
    ),
)
