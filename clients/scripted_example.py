"""A scripted MCP session: validate and benchmark a kernel on a bundled workload over stdio.

    python clients/scripted_example.py                          # vector_add's starting kernel
    python clients/scripted_example.py --workload softmax --kernel my_softmax.cu
    python clients/scripted_example.py -- --harness /path/to/kernelopt-harness   # server flags after --

Uses only the official MCP Python SDK's client; the server is `kernelopt-mcp` when installed,
else `python -m kernelopt_mcp.server`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def progress(done: float, total: float | None, message: str | None) -> None:
    print(f"  ... {message}", file=sys.stderr)


async def run(args: argparse.Namespace) -> int:
    script = shutil.which("kernelopt-mcp")
    command = [script] if script else [sys.executable, "-m", "kernelopt_mcp.server"]
    # the SDK passes only a few variables (HOME, PATH ...) to a server; pass KERNELOPT_* settings on
    env = {k: v for k, v in os.environ.items() if k.startswith("KERNELOPT_") or k == "PYTHONPATH"}
    server = StdioServerParameters(command=command[0], args=[*command[1:], *args.server_args], env=env)
    async with Client(server, read_timeout_seconds=900) as client:
        described = await client.call_tool("describe_workload", {"name": args.workload})
        if described.is_error:
            print(described.content[0].text, file=sys.stderr)
            return 2
        workload = described.structured_content
        source = Path(args.kernel).read_text() if args.kernel else workload["initial_cu"]
        launch = json.loads(Path(args.launch).read_text()) if args.launch else workload["initial_launch"]
        call = {"workload": args.workload, "source": source, "launch": launch}

        validated = await client.call_tool("validate", call, progress_callback=progress)
        print(validated.content[0].text)
        if validated.is_error or validated.structured_content["status"] != "ok":
            return 1
        counts = {k: v for k, v in (("warmup", args.warmup), ("iterations", args.iterations)) if v is not None}
        timed = await client.call_tool("benchmark", {**call, **counts}, progress_callback=progress)
        print(timed.content[0].text)
        return 0 if not timed.is_error and timed.structured_content["status"] == "ok" else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="vector_add")
    p.add_argument("--kernel", help="a .cu file (default: the workload's starting kernel)")
    p.add_argument("--launch", help="a launch spec JSON file (default: the starting kernel's)")
    p.add_argument("--warmup", type=int, help="untimed launches per performance case (default: the tool's)")
    p.add_argument("--iterations", type=int, help="timed launches per performance case (default: the tool's)")
    p.add_argument("server_args", nargs="*", help="flags for kernelopt-mcp, after --")
    return anyio.run(run, p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
