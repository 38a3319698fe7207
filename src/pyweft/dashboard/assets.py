"""Serving the dashboard's files: ``/`` is the page, ``/ui/<name>`` its scripts and styles.

Files are read once from the package (``importlib.resources``, so they work from a
wheel or a zip) and served from memory with a strict Content-Security-Policy: only
this origin's scripts, styles and API, no inline script, nothing from a CDN.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@cache
def _files() -> dict[str, tuple[bytes, str, str]]:
    """``{name: (content, media type, etag)}`` of every file in ``static/``."""
    out: dict[str, tuple[bytes, str, str]] = {}
    for entry in resources.files("pyweft.dashboard").joinpath("static").iterdir():
        suffix = entry.name[entry.name.rfind(".") :]
        if not entry.is_file() or suffix not in _TYPES:
            continue
        content = entry.read_bytes()
        etag = '"' + hashlib.sha256(content).hexdigest()[:20] + '"'
        out[entry.name] = (content, _TYPES[suffix], etag)
    return out


def _serve(name: str, request: Request) -> Response:
    found = _files().get(name)
    if found is None:
        return Response("not found", status_code=404, media_type="text/plain")
    content, media_type, etag = found
    headers = {**_HEADERS, "ETag": etag, "Cache-Control": "no-cache"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(content, media_type=media_type, headers=headers)


async def _index(request: Request) -> Response:
    return _serve("index.html", request)


async def _asset(request: Request) -> Response:
    return _serve(request.path_params["name"], request)


def dashboard_routes() -> list[BaseRoute]:
    return [
        Route("/", _index, methods=["GET", "HEAD"]),
        Route("/ui/{name}", _asset, methods=["GET", "HEAD"]),
    ]
