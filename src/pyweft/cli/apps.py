"""``--app MODULE`` and ``--codec MODULE:NAME``: the user's code, imported for the CLI.

The CLI registers no workflow types of its own. Commands that need them
(``workflows fork``, ``versions check``) import the module named by ``--app``
and take every top-level name (defined there or imported) that ``@workflow``
decorated.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, cast

import typer

from pyweft import Engine, MemoryStorage, PayloadCodec, PyweftError
from pyweft.cli import bad_parameter, render

# What @workflow attaches to the function it decorates.
WORKFLOW_MARKER = "__pyweft_workflow__"

AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        metavar="MODULE",
        help="Import this module (a dotted path, e.g. myapp.workflows; the current directory "
        "is searched first) and register its top-level @workflow functions.",
    ),
]


def _cwd_importable() -> None:
    # The `pyweft` script puts its own directory first on sys.path, not the
    # working directory, so `--app myapp` would not find ./myapp.py without this.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def load_workflows(module_name: str) -> list[Callable[..., Any]]:
    """The ``@workflow`` functions among the top-level names of ``module_name``.

    A module that cannot be imported, or defines none, is a bad parameter (exit 2).
    """
    _cwd_importable()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        bad_parameter(f"--app {module_name!r} cannot be imported: {exc}")
    except Exception as exc:
        bad_parameter(
            f"--app {module_name!r} raised {type(exc).__name__} while being imported: {exc}"
        )
    found: dict[int, Callable[..., Any]] = {}
    for value in vars(module).values():
        if callable(value) and getattr(value, WORKFLOW_MARKER, None) is not None:
            found.setdefault(id(value), value)
    if not found:
        bad_parameter(f"--app {module_name!r} defines no @workflow functions at its top level")
    return list(found.values())


def load_codec(spec: str) -> PayloadCodec:
    """The ``PayloadCodec`` named ``module:name`` (an instance, or a no-argument factory)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        bad_parameter(f"--codec {spec!r} must be MODULE:NAME, e.g. myapp.codecs:codec")
    _cwd_importable()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        bad_parameter(f"--codec {spec!r}: module {module_name!r} cannot be imported: {exc}")
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            bad_parameter(f"--codec {spec!r}: {module_name} has no attribute {attr!r}")
        target = getattr(target, part)
    if not _is_codec(target) and callable(target):
        try:
            target = target()
        except Exception as exc:
            bad_parameter(f"--codec {spec!r}: calling it raised {type(exc).__name__}: {exc}")
    if not _is_codec(target):
        bad_parameter(
            f"--codec {spec!r} is a {type(target).__name__}, not a PayloadCodec (an object "
            "with encode(value) and decode(data, into) methods)"
        )
    return cast(PayloadCodec, target)


def _is_codec(value: object) -> bool:
    return not isinstance(value, type) and all(
        callable(getattr(value, m, None)) for m in ("encode", "decode")
    )


def workflow_versions(module_name: str) -> dict[str, str]:
    """``{workflow type: version}`` of every workflow ``module_name`` defines."""
    workflows = load_workflows(module_name)
    # An engine that is never opened: registering only reads the definitions.
    scratch = Engine(MemoryStorage(), recover=False)
    try:
        for fn in workflows:
            scratch.register_workflow(fn)
    except PyweftError as exc:  # e.g. two workflows registered under one name
        render.error(exc.code, f"--app {module_name}: {exc}")
        raise typer.Exit(1) from None
    return scratch.registered_versions()


__all__ = ["AppOption", "load_codec", "load_workflows", "workflow_versions"]
