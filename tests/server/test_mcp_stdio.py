"""``pyweft mcp`` over stdio: the SDK's client launches the command as a subprocess."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters

APP = textwrap.dedent(
    '''
    from pyweft import WorkflowContext, activity, workflow


    @activity
    async def shout(text: str) -> str:
        return text.upper()


    @workflow
    async def greet(ctx: WorkflowContext, name: str, punctuation: str = "!") -> str:
        """Greet someone loudly."""
        return await ctx.run(shout, f"hello {name}") + punctuation
    '''
)


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYWEFT_DATABASE_URL", None)
    return env


async def test_stdio_session_starts_a_workflow_and_reads_its_result(tmp_path: Path) -> None:
    (tmp_path / "greeter.py").write_text(APP)
    db = f"sqlite:///{tmp_path / 'app.db'}"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pyweft.cli.main", "mcp", "--db", db, "--app", "greeter"],
        env=_env(tmp_path),
        cwd=str(tmp_path),
    )
    async with Client(params, read_timeout_seconds=30) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["start_greet"].input_schema
        assert schema["required"] == ["name"]
        assert tools["start_greet"].description.startswith("Greet someone loudly.")
        started = await client.call_tool("start_greet", {"name": "ada", "workflow_id": "g-1"})
        assert started.structured_content == {"id": "g-1"}
        result = await client.call_tool("workflow_result", {"workflow_id": "g-1"})
        assert result.structured_content["result"] == "HELLO ADA!"
        again = await client.call_tool("start_greet", {"name": "ada", "workflow_id": "g-1"})
        assert again.is_error
        assert "WorkflowAlreadyExistsError" in again.content[0].text
