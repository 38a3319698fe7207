"""The server and CLI work without the MCP extra, and say how to get it when asked for MCP."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyweft.cli.main import app

# Runs with `mcp` made unimportable, as when pyweft[mcp] is not installed.
SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    sys.modules["mcp"] = None
    import httpx
    from pyweft import Engine, MemoryStorage
    from pyweft.server import create_app

    async def main():
        async with Engine(MemoryStorage()) as engine:
            app = create_app(engine)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                health = await http.get("/api/v1/health")
                mcp = await http.post("/api/mcp", json={})
        print(health.status_code, mcp.status_code, mcp.json()["error"]["code"])
        print(mcp.json()["error"]["message"])
        print("mcp" in sys.modules and sys.modules["mcp"] is not None)

    asyncio.run(main())
    """
)


def test_server_without_the_mcp_extra_serves_rest_and_answers_mcp_with_a_hint() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    status, message, imported = done.stdout.splitlines()
    assert status == "200 501 ConfigurationError"
    assert "pip install 'pyweft[mcp]'" in message
    assert imported == "False"


def test_pyweft_mcp_without_the_extra_is_a_usage_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` now fails
    done = _runner().invoke(app, ["mcp", "--db", str(tmp_path / "x.db"), "--client"])
    assert done.exit_code == 2
    assert "pyweft[mcp]" in done.stderr
    assert not (tmp_path / "x.db").exists()


def test_pyweft_mcp_without_app_or_client_is_a_usage_error(tmp_path: Path) -> None:
    done = _runner().invoke(app, ["mcp", "--db", str(tmp_path / "x.db")])
    assert done.exit_code == 2
    assert "--app MODULE" in done.stderr
    assert not (tmp_path / "x.db").exists()


def _runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1", "PYWEFT_DATABASE_URL": None})
