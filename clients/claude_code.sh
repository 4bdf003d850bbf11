#!/usr/bin/env bash
# Claude Code: register kernelopt-mcp for every project of this user (drop --scope user for
# the current project only). Run `pip install .` in the kernelopt checkout first, so that
# `kernelopt-mcp` is on PATH; then `claude mcp list` shows it and /mcp lists its tools.
set -euo pipefail

claude mcp add --scope user kernelopt -- kernelopt-mcp

# Optional: let `path` arguments read kernels from this project too (the server reads only its
# workspace ~/.kernelopt, the workload directories and --root directories):
#   claude mcp add --scope user kernelopt -- kernelopt-mcp --root "$PWD"
#
# A benchmark can take a minute or more (progress notifications keep the call alive). If your
# Claude Code version times tool calls out sooner, raise the limit (milliseconds) when starting it:
#   MCP_TOOL_TIMEOUT=900000 claude
