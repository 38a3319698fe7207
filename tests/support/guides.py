"""Load a guide's Python example as a module, for tests that run it on the test kit.

A guide's example defines its activities and workflows, then drives them with a real
``Engine`` (``async def main`` and ``asyncio.run(main())``, or ``async with Engine``).
:func:`load` keeps the definitions and drops the driving part, so a test can run the
very same workflows on :class:`pyweft.testing.TestEnv`. :func:`fragment` wraps a
snippet that uses ``engine`` into an ``async def`` the test can call.
"""

from __future__ import annotations

import re
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

GUIDES = Path(__file__).resolve().parents[2] / "docs" / "guides"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Where the part of an example that drives the engine begins.
DRIVER = re.compile(
    r"^(async def main\(|asyncio\.run\(|async with Engine\(|with pyweft\.sync|engine = |await )",
    re.M,
)

_loaded = 0


def block(guide: str, number: int = 1) -> str:
    """The ``number``-th (1-based) ```python block of ``docs/guides/<guide>.md``."""
    blocks = BLOCK.findall((GUIDES / f"{guide}.md").read_text())
    assert len(blocks) >= number, f"{guide}.md has {len(blocks)} python block(s)"
    return str(blocks[number - 1])


def load(guide: str, number: int = 1, **prelude: Any) -> types.ModuleType:
    """The definitions of a guide's example as a fresh module (``prelude`` names are
    defined first: the outside world a snippet assumes, such as a payment gateway)."""
    global _loaded
    code = block(guide, number)
    cut = DRIVER.search(code)
    if cut is not None:
        code = code[: cut.start()]
    _loaded += 1
    name = f"guide_{guide.replace('-', '_')}_{number}_{_loaded}"
    module = types.ModuleType(name)
    module.__dict__.update(prelude)
    sys.modules[name] = module  # dataclasses and typing look modules up by name
    exec(compile(code, f"docs/guides/{guide}.md#block{number}", "exec"), module.__dict__)
    return module


def fragment(guide: str, number: int, **names: Any) -> Any:
    """A snippet of a guide that uses ``engine`` (and ``names``), as ``async def (engine)``."""
    body = textwrap.indent(block(guide, number), "    ")
    namespace: dict[str, Any] = dict(names)
    exec(compile(f"async def example(engine):\n{body}\n", f"docs/guides/{guide}.md", "exec"),
         namespace)  # fmt: skip
    return namespace["example"]
