"""``pyweft keys create|list|revoke``: API keys for ``pyweft serve --auth keys``.

Keys live in the store the server's engine uses (``--db``), hashed; the full key is
printed once, by ``create``. Rotation: create the new key, move callers to it,
then revoke the old one (both work in between).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Annotated

import typer

from pyweft import parse_duration
from pyweft.cli import DATABASE_ENV, bad_parameter, render, run
from pyweft.storage import open_storage

app = typer.Typer(help="API keys for the HTTP server (stored hashed in the store).")

DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar=DATABASE_ENV, help="Store URL (default ./pyweft.db)."),
]


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


@app.command("create")
def create(
    subject: Annotated[str, typer.Option(help="Who the key is for (shown in audit logs).")],
    scope: Annotated[
        list[str],
        typer.Option("--scope", help="A scope to grant (repeatable)."),
    ],
    expires_in: Annotated[
        str | None, typer.Option(help="Expire after this long, e.g. 90d or 12h.")
    ] = None,
    db: DbOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Create a key and print it once."""
    from pyweft.cli.remote import require_server_extra

    require_server_extra("pyweft keys")
    from pyweft.server.keys import ApiKeyStore

    expires_at = None
    if expires_in is not None:
        try:
            expires_at = time.time() + parse_duration(expires_in, field="--expires-in")
        except Exception as exc:
            bad_parameter(str(exc))

    async def go() -> None:
        storage = open_storage(db, sqlite_create=False)
        try:
            info, token = await ApiKeyStore(storage).create(
                subject=subject, scopes=scope, expires_at=expires_at
            )
        finally:
            await storage.close()
        if as_json:
            print(json.dumps({"key_id": info.key_id, "key": token, "scopes": list(info.scopes)}))
            return
        out = render.console()
        out.print(f"key id  {info.key_id}  subject {info.subject}  expires {_when(expires_at)}")
        out.print("key (shown once; store it now):")
        print(token)

    run(go())


@app.command("list")
def list_keys(
    db: DbOpt = None, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
) -> None:
    """List keys (never their secrets)."""
    from pyweft.cli.remote import require_server_extra

    require_server_extra("pyweft keys")
    from pyweft.server.keys import ApiKeyStore

    async def go() -> None:
        storage = open_storage(db, sqlite_create=False, read_only=True)
        try:
            keys = await ApiKeyStore(storage).list()
        finally:
            await storage.close()
        now = time.time()
        if as_json:
            for k in keys:
                print(
                    json.dumps(
                        {
                            "key_id": k.key_id,
                            "subject": k.subject,
                            "scopes": list(k.scopes),
                            "state": k.state(now),
                            "expires_at": k.expires_at,
                        }
                    )
                )
            return
        out = render.console()
        for k in keys:
            out.print(
                f"{k.key_id}  {k.state(now):8}  {k.subject}  expires {_when(k.expires_at)}  "
                f"{' '.join(k.scopes)}"
            )

    run(go())


@app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (from `pyweft keys list`).")],
    db: DbOpt = None,
) -> None:
    """Revoke a key; the server refuses it from the next request on."""
    from pyweft.cli.remote import require_server_extra

    require_server_extra("pyweft keys")
    from pyweft.server.keys import ApiKeyStore

    async def go() -> None:
        storage = open_storage(db, sqlite_create=False)
        try:
            info = await ApiKeyStore(storage).revoke(key_id)
        finally:
            await storage.close()
        render.console().print(f"revoked {info.key_id} ({info.subject})")

    run(go())
