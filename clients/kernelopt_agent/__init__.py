"""kernelopt's bundled orchestrator: ``kernelopt optimize``.

An MCP client of ``kernelopt-mcp`` (all GPU work goes through the server's tools) driving an
OpenAI-compatible model with the official ``openai`` SDK. See ``loop.py`` for the steps and
``rundir.py`` for what a run leaves on disk.
"""

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from .cli import main as _main

    return _main(argv)
