#!/usr/bin/env bash
# Claude Code: register kernelopt-mcp for every project of this user (drop --scope user for
# the current project only). Run `pip install .` in the kernelopt checkout first, so that
# `kernelopt-mcp` is on PATH; then `claude mcp list` shows it and /mcp lists its tools.
# Installed in a virtual environment? Register the absolute path instead (Claude Code started
# from another shell, or the desktop app, does not see the environment's PATH):
#   claude mcp add --scope user kernelopt -- "$(command -v kernelopt-mcp)"
set -euo pipefail

claude mcp add --scope user kernelopt -- kernelopt-mcp

# Optional: let `path` arguments read kernels from this project too (the server reads its
# workspace ~/.kernelopt, the workload directories, --root directories and the roots the client
# shares, if it shares any):
#   claude mcp add --scope user kernelopt -- kernelopt-mcp --root "$PWD"
#
# A benchmark can take a minute or more (progress notifications keep the call alive). If your
# Claude Code version times tool calls out sooner, raise the limit (milliseconds) when starting it:
#   MCP_TOOL_TIMEOUT=900000 claude
