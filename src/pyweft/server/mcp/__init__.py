"""MCP (Model Context Protocol) for an engine: its tools (:mod:`.tools`, no SDK needed),
the SDK server built from them (:mod:`.runtime`), and the ``/api/mcp`` Streamable HTTP
mount behind the server's auth (:mod:`.http`). ``pyweft mcp`` serves the same tools over
stdio. Needs the ``pyweft[mcp]`` extra at the moment it is used, not before."""

from __future__ import annotations

MCP_EXTRA_HINT = "install the MCP extra: pip install 'pyweft[mcp]'"


def mcp_available() -> bool:
    """Whether the official MCP SDK (the ``mcp`` package) can be imported."""
    try:
        import mcp  # noqa: F401
        import mcp_types  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = ["MCP_EXTRA_HINT", "mcp_available"]
