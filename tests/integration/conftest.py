from __future__ import annotations

from pathlib import Path

import pytest

from support.backends import Backend


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend(name=request.param, path=tmp_path)
