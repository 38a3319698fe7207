"""The whole storage key layout, in one place.

Identifiers are percent-encoded (every byte outside ``[A-Za-z0-9_.~-]``), so
an id holding ``:`` or ``/`` can never split or collide with another key.
Numbers are zero-padded so that byte order is numeric order. Separators are
``:``. Every prefix the engine owns is listed in ``RESERVED_PREFIXES``.

Layout (``{id}`` is an encoded workflow id):

``meta:schema``                       schema version of the store
``wf:{id}``                           the run's state record
``wf:{id}:j:{step10}``                journal: the committed outcome of one step
``wf:{id}:p:{step10}``                an open step's durable progress (sleep
                                      deadline, activity attempt and backoff)
``ix:s:{status}:{created16}:{id}``    runs by status, oldest first
``ix:st:{status}:{type}:{created16}:{id}``  runs by status and type
``ix:t:{type}:{created16}:{id}``      runs by type
``ix:a:{created16}:{id}``             every run
``idem:{key}``                        idempotency key -> workflow id
"""

from __future__ import annotations

from urllib.parse import quote, unquote

SCHEMA_KEY = "meta:schema"
SCHEMA_VERSION = 1

RESERVED_PREFIXES = ("meta:", "wf:", "ix:", "idem:")


def enc(part: str) -> str:
    """Percent-encode one key component (reversible, order-preserving per byte)."""
    return quote(part, safe="")


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


def journal_prefix(workflow_id: str) -> str:
    return wf(workflow_id) + ":j:"


def journal(workflow_id: str, step: int) -> str:
    return f"{wf(workflow_id)}:j:{step:010d}"


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
