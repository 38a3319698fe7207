"""The whole storage key layout, in one place.

Identifiers are percent-encoded (every byte outside ``[A-Za-z0-9_.~-]``), so
an id holding ``:`` or ``/`` can never split or collide with another key.
Every id and name a user hands in passes :func:`check_text` first: no control
characters (they would reach terminals and logs raw) and no lone surrogates
(they cannot be encoded at all).
Numbers are zero-padded so that byte order is numeric order. Separators are
``:``. Every prefix the engine owns is listed in ``RESERVED_PREFIXES``.

Layout (``{id}`` is an encoded workflow id):

``meta:schema``                       schema version of the store
``wf:{id}``                           the run's state record
``wf:{id}:j:{step10}``                journal: the committed outcome of one step
``wf:{id}:p:{step10}``                an open step's durable progress (sleep
                                      deadline, activity attempt and backoff,
                                      heartbeat details, async token, dispatch
                                      marker of a keyed activity)
``wf:{id}:ar:{step10}``               an async activity's outcome, completed by token
``wf:{id}:ah:{step10}``               a heartbeat sent by token to a waiting activity
``ix:s:{status}:{created16}:{id}``    runs by status, oldest first
``ix:st:{status}:{type}:{created16}:{id}``  runs by status and type
``ix:t:{type}:{created16}:{id}``      runs by type
``ix:a:{created16}:{id}``             every run
``ix:p:{parent}:{created16}:{id}``   child runs by parent
``ix:tag:{tag}:{created16}:{id}``     runs by tag
``ix:id:{id}:{created16}``            runs by id (for id-prefix filters)
``ix:u:{updated16}:{id}``             runs by last state change
``ix:end:{status}:{ended16}:{id}``    finished runs by end time (retention)
``ix:at:{name}:{value}:{created16}:{id}``  runs by search attribute value
``idem:{key}``                        idempotency key -> workflow id
``wf:{id}:u:{step10}:{index4}``       an update applied by a handler at a step boundary
                                      (an async handler's own steps are journal and
                                      pending keys numbered from HANDLER_STEP_BASE)
``wf:{id}:v:{change_id}``             a ctx.get_version pin
``wf:{id}:attrs``                     search attributes of the run
``sig:{id}:{name}:{class1}:{seq16}``  a buffered signal (class 0: start signal, 1: others)
``sigseq:{id}``                       the run's last signal sequence number
``sigres:{id}:{name}:{signal_id}``    marker: this signal id was accepted (dedupe)
``upd:{id}:{ts16}:{update_id}``       an update request not yet handled
``upr:{update_id}``                   an update's response
``upk:{id}:{key}``                    update idempotency key -> update id
``upo:{update_id}``                   update id -> workflow id
``upx:{id}:{update_id}``              updates sent to a run (so purge finds upo/upr)
``qry:{id}:{query_id}``               a query asked from a process that does not drive the run
``qrs:{id}:{query_id}``               its answer, until the asker reads it
``review:{review_id}``                a human review request and its decision
``wake:{id}``                         another process wrote something this run must see
``rvix:{status}:{created16}:{review_id}``  reviews by status
``rvw:{id}:{review_id}``              reviews of a run (for purge)
``q:{id}``                            quarantine: a record of this run cannot be decoded
"""

from __future__ import annotations

import re
import uuid
from urllib.parse import quote, unquote

from pyweft.errors import InvalidArgumentError

SCHEMA_KEY = "meta:schema"
SCHEMA_VERSION = 1

MAX_ID_BYTES = 255
"""The longest workflow id, child id or idempotency key, in UTF-8 bytes."""

RESERVED_PREFIXES = (
    "meta:", "wf:", "ix:", "idem:", "sig:", "sigseq:", "sigres:", "upd:", "upr:", "upk:", "upo:",
    "upx:", "qry:", "qrs:", "review:", "rvix:", "rvw:", "wake:", "own:", "q:",
    "wfq:",
)  # fmt: skip


# C0 controls, DEL, C1 controls, and the surrogate range (only ever lone in a str).
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_text(value: object, what: str, max_bytes: int) -> str:
    """``value`` if it is a usable id or name, else :class:`InvalidArgumentError`.

    Usable: a non-empty ``str`` of at most ``max_bytes`` UTF-8 bytes with no
    control character (C0, DEL, C1) and no lone surrogate.
    """
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(
            f"{what} must be a non-empty string of at most {max_bytes} UTF-8 bytes, "
            f"got {_show(value)}"
        )
    bad = _FORBIDDEN.search(value)
    if bad is not None:
        char = bad.group()
        kind = "a lone surrogate" if "\ud800" <= char <= "\udfff" else "a control character"
        raise InvalidArgumentError(
            f"{what} {_show(value)} holds {kind} ({char!r} at index {bad.start()}); ids and "
            "names must be printable text: drop or replace it (for example with '-')"
        )
    size = len(value.encode())
    if size > max_bytes:
        raise InvalidArgumentError(
            f"{what} is {size} UTF-8 bytes; the limit is {max_bytes} (got {_show(value)})"
        )
    return value


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_PLAIN = re.compile(r"[A-Za-z0-9_.~-]*").fullmatch


def enc(part: str) -> str:
    """Percent-encode one key component (reversible, order-preserving per byte)."""
    if _PLAIN(part) is not None:
        return part  # nothing to escape: the common case, on every key the engine builds
    try:
        return quote(part, safe="")
    except UnicodeEncodeError:
        # A lookup by an id that was never checked (describe, signal...): no run
        # can have it, since every stored id passed check_text.
        raise InvalidArgumentError(
            f"{part!r} holds a lone surrogate, which no id or name may contain"
        ) from None


def dec(part: str) -> str:
    return unquote(part)


def ts16(t: float) -> str:
    """Epoch seconds as 16 zero-padded microsecond digits."""
    return f"{round(t * 1_000_000):016d}"


def wf(workflow_id: str) -> str:
    return "wf:" + enc(workflow_id)


def run_range(workflow_id: str) -> tuple[str, str, str]:
    """(prefix, start, end) covering ``wf:{id}`` and every ``wf:{id}:...`` key.

    Neighbouring ids that extend this one with a low character also fall in the
    range; callers filter with :func:`belongs_to_run`.
    """
    base = wf(workflow_id)
    return base, base, base + ";"


def belongs_to_run(key: str, base: str) -> bool:
    return key == base or key.startswith(base + ":")


def state_prefix(workflow_id: str) -> str:
    """Durable shared state owned by a run (``ctx.state``, scope ``"run"``)."""
    return f"st:r:{enc(workflow_id)}:"


def journal_prefix(workflow_id: str) -> str:
    return wf(workflow_id) + ":j:"


def journal(workflow_id: str, step: int) -> str:
    return f"{wf(workflow_id)}:j:{step:010d}"


HANDLER_STEP_BASE = 5_000_000_000
"""Steps of async update handlers are numbered from here: invocation ``k`` of a
generation (counted in application order) takes ``BASE + k * SPAN + 1`` onwards, so
they never meet the workflow's own steps and every per-step key keeps working."""
HANDLER_STEP_SPAN = 100_000
MAX_HANDLER_INVOCATIONS = (10**10 - HANDLER_STEP_BASE) // HANDLER_STEP_SPAN


def handler_step(invocation: int, n: int) -> int:
    """The step number of the ``n``-th step (from 1) of async handler ``invocation``."""
    return HANDLER_STEP_BASE + invocation * HANDLER_STEP_SPAN + n


def handler_invocation(step: int) -> int | None:
    """Which async handler invocation took ``step``; ``None`` for a workflow step."""
    if step < HANDLER_STEP_BASE:
        return None
    return (step - HANDLER_STEP_BASE) // HANDLER_STEP_SPAN


def pending_prefix(workflow_id: str) -> str:
    return wf(workflow_id) + ":p:"


def pending(workflow_id: str, step: int) -> str:
    return f"{wf(workflow_id)}:p:{step:010d}"


def index_keys(workflow_id: str, workflow_type: str, status: str, created_at: float) -> list[str]:
    """Every visibility index key of a run in ``status``."""
    i, t, c = enc(workflow_id), enc(workflow_type), ts16(created_at)
    return [
        f"ix:s:{status}:{c}:{i}",
        f"ix:st:{status}:{t}:{c}:{i}",
        f"ix:t:{t}:{c}:{i}",
        f"ix:a:{c}:{i}",
    ]


def status_index_keys(
    workflow_id: str, workflow_type: str, status: str, created_at: float
) -> list[str]:
    """The index keys that change when a run's status changes."""
    return index_keys(workflow_id, workflow_type, status, created_at)[:2]


def list_prefix(status: str | None, workflow_type: str | None) -> str:
    if status and workflow_type:
        return f"ix:st:{status}:{enc(workflow_type)}:"
    if status:
        return f"ix:s:{status}:"
    if workflow_type:
        return f"ix:t:{enc(workflow_type)}:"
    return "ix:a:"


def id_from_index_key(key: str) -> str:
    return dec(key.rsplit(":", 1)[1])


def idempotency(key: str) -> str:
    return "idem:" + enc(key)


def applied_update_prefix(workflow_id: str) -> str:
    return wf(workflow_id) + ":u:"


def applied_update(workflow_id: str, boundary: int, index: int) -> str:
    return f"{wf(workflow_id)}:u:{boundary:010d}:{index:04d}"


def signal_prefix(workflow_id: str, name: str | None = None) -> str:
    base = f"sig:{enc(workflow_id)}:"
    return base if name is None else f"{base}{enc(name)}:"


def signal(workflow_id: str, name: str, seq: int, *, start: bool = False) -> str:
    return f"{signal_prefix(workflow_id, name)}{0 if start else 1}:{seq:016d}"


def signal_seq(workflow_id: str) -> str:
    return "sigseq:" + enc(workflow_id)


def signal_accepted(workflow_id: str, name: str, signal_id: str) -> str:
    return f"sigres:{enc(workflow_id)}:{enc(name)}:{enc(signal_id)}"


def update_prefix(workflow_id: str) -> str:
    return f"upd:{enc(workflow_id)}:"


def update_request(workflow_id: str, created_at: float, update_id: str) -> str:
    return f"{update_prefix(workflow_id)}{ts16(created_at)}:{enc(update_id)}"


def update_response(update_id: str) -> str:
    return "upr:" + enc(update_id)


def update_idempotency(workflow_id: str, key: str) -> str:
    return f"upk:{enc(workflow_id)}:{enc(key)}"


def review(review_id: str) -> str:
    return "review:" + enc(review_id)


def review_index(status: str, created_at: float, review_id: str) -> str:
    return f"rvix:{status}:{ts16(created_at)}:{enc(review_id)}"


def update_owner(update_id: str) -> str:
    return "upo:" + enc(update_id)


def run_update(workflow_id: str, update_id: str) -> str:
    return f"{run_updates_prefix(workflow_id)}{enc(update_id)}"


def run_updates_prefix(workflow_id: str) -> str:
    return f"upx:{enc(workflow_id)}:"


def version_pin(workflow_id: str, change_id: str) -> str:
    return f"{wf(workflow_id)}:v:{enc(change_id)}"


def attributes(workflow_id: str) -> str:
    return f"{wf(workflow_id)}:attrs"


def extra_index_keys(
    workflow_id: str,
    created_at: float,
    parent_id: str | None,
    tags: list[str],
    schedule_id: str | None = None,
) -> list[str]:
    """Index keys written once at creation (parent, tags, id, schedule) and removed on
    purge."""
    i, c = enc(workflow_id), ts16(created_at)
    out = [f"ix:id:{i}:{c}"]
    if parent_id is not None:
        out.append(f"ix:p:{enc(parent_id)}:{c}:{i}")
    if schedule_id is not None:
        out.append(f"ix:sch:{enc(schedule_id)}:{c}:{i}")
    out += [f"ix:tag:{enc(tag)}:{c}:{i}" for tag in sorted(set(tags))]
    return out


def updated_index(workflow_id: str, updated_at: float) -> str:
    return f"ix:u:{ts16(updated_at)}:{enc(workflow_id)}"


def end_index(status: str, ended_at: float, workflow_id: str) -> str:
    return f"ix:end:{status}:{ts16(ended_at)}:{enc(workflow_id)}"


def end_index_prefix(status: str) -> str:
    return f"ix:end:{status}:"


def after(key: str) -> str:
    """An inclusive scan start that skips ``key`` itself: every stored key that extends
    ``key`` continues with a character above the space (encoded ids, digits, ``:``)."""
    return key + " "


def query_prefix(workflow_id: str) -> str:
    return f"qry:{enc(workflow_id)}:"


def query_request(workflow_id: str, query_id: str) -> str:
    return query_prefix(workflow_id) + enc(query_id)


def query_responses_prefix(workflow_id: str) -> str:
    return f"qrs:{enc(workflow_id)}:"


def query_response(workflow_id: str, query_id: str) -> str:
    return query_responses_prefix(workflow_id) + enc(query_id)


def wake(workflow_id: str) -> str:
    return "wake:" + enc(workflow_id)


def wake_value() -> bytes:
    """A fresh marker value, so deleting a handled marker never swallows a newer one."""
    return uuid.uuid4().bytes


def review_of_run(workflow_id: str, review_id: str) -> str:
    return f"rvw:{enc(workflow_id)}:{enc(review_id)}"


QUARANTINE_PREFIX = "q:"


def quarantine(workflow_id: str) -> str:
    return QUARANTINE_PREFIX + enc(workflow_id)
