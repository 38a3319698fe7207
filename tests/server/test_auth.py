"""Authentication and authorisation: the matrix over every route, audit, CORS, limits."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pyweft import ConfigurationError, Engine
from pyweft.server import AuditRecord, CorsConfig, RateLimit, ServerAuth, create_app
from pyweft.server.app import API_PREFIX, ENDPOINTS
from pyweft.server.calls import Endpoint
from pyweft.server.keys import ApiKeyStore

OTHER_SCOPE = "budget:read"  # no route needs it


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


def url_of(ep: Endpoint) -> str:
    path = re.sub(r"{\w+}", "x", ep.path)
    if "sse" in path:
        path += "?cursor=bad"  # answered 400 once authorised, so the stream never opens
    return API_PREFIX + path


async def call(client: httpx.AsyncClient, ep: Endpoint, headers: dict[str, str]) -> int:
    kwargs: dict[str, Any] = {"headers": headers}
    if ep.body is not None:
        kwargs["json"] = {}
    resp = await client.request(ep.method, url_of(ep), **kwargs)
    if resp.status_code >= 400:
        assert set(resp.json()["error"]) == {"code", "message", "details"}
    return resp.status_code


@pytest.fixture
async def setup(
    engine: Engine, make_client: Callable[..., Any]
) -> tuple[httpx.AsyncClient, Clock, ApiKeyStore]:
    clock = Clock()
    client = await make_client(auth=ServerAuth(clock=clock))
    return client, clock, ApiKeyStore(engine.storage)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("ep", ENDPOINTS, ids=lambda ep: f"{ep.method} {ep.path}")
async def test_auth_matrix(
    ep: Endpoint, setup: tuple[httpx.AsyncClient, Clock, ApiKeyStore]
) -> None:
    client, clock, keys = setup
    import time

    _, right = await keys.create(
        subject="right", scopes=list(ep.scopes) or [OTHER_SCOPE], expires_at=None
    )
    _, other = await keys.create(subject="other", scopes=[OTHER_SCOPE])
    _, expiring = await keys.create(
        subject="expiring", scopes=list(ep.scopes) or [OTHER_SCOPE], expires_at=time.time() + 60
    )
    clock.now = time.time() + 3600  # the expiring key is now past its expiry
    cases = {
        "none": {},
        "wrong": bearer(right[:-4] + "AAAA"),
        "garbage": bearer("not-a-key"),
        "expired": bearer(expiring),
        "missing-scope": bearer(other),
        "right": bearer(right),
        "x-api-key": {"X-API-Key": right},
    }
    got = {name: await call(client, ep, headers) for name, headers in cases.items()}
    if ep.public:
        assert all(status not in (401, 403) for status in got.values()), got
        return
    assert got["none"] == 401
    assert got["wrong"] == 401
    assert got["garbage"] == 401
    assert got["expired"] == 401
    assert got["missing-scope"] == 403
    assert got["right"] not in (401, 403), got
    assert got["x-api-key"] not in (401, 403), got


async def test_revoked_key_is_refused_at_once(
    setup: tuple[httpx.AsyncClient, Clock, ApiKeyStore],
) -> None:
    client, clock, keys = setup
    import time

    clock.now = time.time()
    info, token = await keys.create(subject="ops", scopes=["workflows:read"])
    assert (await client.get(f"{API_PREFIX}/workflows", headers=bearer(token))).status_code == 200
    await keys.revoke(info.key_id)
    resp = await client.get(f"{API_PREFIX}/workflows", headers=bearer(token))
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "AuthenticationError"


async def test_admin_scope_does_not_imply_read(
    setup: tuple[httpx.AsyncClient, Clock, ApiKeyStore],
) -> None:
    client, clock, keys = setup
    import time

    clock.now = time.time()
    _, token = await keys.create(subject="admin", scopes=["workflows:admin"])
    resp = await client.get(f"{API_PREFIX}/workflows", headers=bearer(token))
    assert resp.status_code == 403
    assert resp.json()["error"]["details"] == {"required": ["workflows:read"]}


async def test_audit_records_decisions_without_the_credential(
    engine: Engine, make_client: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    records: list[AuditRecord] = []
    client = await make_client(auth=ServerAuth(audit_sink=records.append))
    _, token = await ApiKeyStore(engine.storage).create(subject="ci", scopes=["workflows:read"])
    with caplog.at_level(logging.INFO, logger="pyweft.server.audit"):
        await client.get(f"{API_PREFIX}/workflows", headers=bearer(token))
        await client.get(f"{API_PREFIX}/workflows", headers=bearer(token + "x"))
        await client.post(f"{API_PREFIX}/workflows", json={}, headers=bearer(token))
        await client.get(f"{API_PREFIX}/health", headers=bearer(token))
    assert [(r.outcome, r.subject) for r in records] == [
        ("allowed", "ci"),
        ("unauthenticated", None),
        ("forbidden", "ci"),
    ]
    assert records[1].credential_fingerprint is not None
    secret = token.split("_", 2)[2]
    text = caplog.text + repr(records)
    assert secret not in text and token not in text


async def test_rate_limit_answers_429_with_retry_after(make_client: Callable[..., Any]) -> None:
    clock = Clock()
    client = await make_client(rate_limit=RateLimit(max_requests=2, window_s=10), clock=clock)
    assert (await client.get(f"{API_PREFIX}/workflows")).status_code == 200
    assert (await client.get(f"{API_PREFIX}/workflows")).status_code == 200
    resp = await client.get(f"{API_PREFIX}/workflows")
    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "10"
    assert resp.json()["error"]["code"] == "RateLimitedError"
    assert (await client.get(f"{API_PREFIX}/health")).status_code == 200  # public: exempt
    clock.now += 10
    assert (await client.get(f"{API_PREFIX}/workflows")).status_code == 200


async def test_cors_is_off_by_default(http: httpx.AsyncClient) -> None:
    resp = await http.get(f"{API_PREFIX}/health", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in resp.headers


async def test_cors_echoes_only_the_configured_origin(make_client: Callable[..., Any]) -> None:
    client = await make_client(
        cors=CorsConfig(allowed_origins=["https://app.example"], allow_credentials=True)
    )
    ok = await client.get(f"{API_PREFIX}/health", headers={"Origin": "https://app.example"})
    assert ok.headers["access-control-allow-origin"] == "https://app.example"
    assert "Origin" in ok.headers.get("vary", "")
    bad = await client.get(f"{API_PREFIX}/health", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in bad.headers
    null = await client.get(f"{API_PREFIX}/health", headers={"Origin": "null"})
    assert "access-control-allow-origin" not in null.headers


@pytest.mark.parametrize(
    "cors",
    [
        CorsConfig(allowed_origins=["*"], allow_credentials=True, allowed_headers=()),
        CorsConfig(allowed_origins=["*"]),  # Authorization is in the default headers
        CorsConfig(allowed_origins=["null"]),
        CorsConfig(allowed_origins=[]),
    ],
)
def test_unsafe_cors_fails_at_boot(engine: Engine, cors: CorsConfig) -> None:
    with pytest.raises(ConfigurationError):
        create_app(engine, cors=cors)


def test_serving_off_loopback_without_auth_is_refused() -> None:
    from pyweft.server.serve import check_exposure

    with pytest.raises(ConfigurationError, match="without authentication"):
        check_exposure("0.0.0.0", None, allow_unauthenticated=False)
    check_exposure("0.0.0.0", None, allow_unauthenticated=True)
    check_exposure("127.0.0.1", None, allow_unauthenticated=False)
    check_exposure("::1", None, allow_unauthenticated=False)
    check_exposure("0.0.0.0", ServerAuth(), allow_unauthenticated=False)


async def test_jwt_bearer_tokens_carry_subject_and_scopes(
    make_client: Callable[..., Any],
) -> None:
    import time

    import jwt

    from pyweft.server import JwtConfig

    secret = "s" * 32
    client = await make_client(
        auth=ServerAuth(api_keys=False, jwt=JwtConfig(key=secret, audience="pyweft"))
    )

    def token(**claims: Any) -> str:
        base = {"sub": "svc", "aud": "pyweft", "exp": time.time() + 60, "scope": "workflows:read"}
        return jwt.encode({**base, **claims}, secret, algorithm="HS256")

    assert (await client.get(f"{API_PREFIX}/workflows", headers=bearer(token()))).status_code == 200
    who = (await client.get(f"{API_PREFIX}/principal", headers=bearer(token()))).json()
    assert who == {"subject": "svc", "method": "jwt", "scopes": ["workflows:read"]}
    for bad in (token(aud="other"), token(exp=time.time() - 10), token()[:-3] + "abc"):
        resp = await client.get(f"{API_PREFIX}/workflows", headers=bearer(bad))
        assert resp.status_code == 401
    resp = await client.post(f"{API_PREFIX}/workflows", json={}, headers=bearer(token()))
    assert resp.status_code == 403


async def test_cross_site_writes_are_refused_even_on_an_open_server(
    http: httpx.AsyncClient, engine: Engine
) -> None:
    evil = {"Origin": "https://evil.example"}
    await engine.start("waits_for_go", id="w")
    resp = await http.post(f"{API_PREFIX}/workflows/w/cancel", headers=evil)
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "PermissionDeniedError"
    assert (await engine.describe("w")).cancel_requested is False
    text_body = await http.post(
        f"{API_PREFIX}/workflows",
        content=b'{"type": "waits_for_go"}',
        headers={"Content-Type": "text/plain"},
    )
    assert text_body.status_code == 400  # a browser's no-preflight form of a JSON body
    same_site = await http.post(
        f"{API_PREFIX}/workflows/w/cancel", headers={"Origin": "http://testserver"}
    )
    assert same_site.status_code == 200
    assert (await http.get(f"{API_PREFIX}/workflows/w", headers=evil)).status_code == 200


async def test_configured_origin_may_write(make_client: Callable[..., Any], engine: Engine) -> None:
    client = await make_client(cors=CorsConfig(allowed_origins=["https://app.example"]))
    await engine.start("waits_for_go", id="w")
    resp = await client.post(
        f"{API_PREFIX}/workflows/w/cancel", headers={"Origin": "https://app.example"}
    )
    assert resp.status_code == 200
    assert resp.headers["access-control-allow-origin"] == "https://app.example"
