"""kernelopt's tools in an OpenAI Agents SDK agent (pip install openai-agents; OPENAI_API_KEY set).

    python clients/openai_agents_sdk.py softmax
"""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Runner
from agents.mcp import MCPServerStdio


async def main(workload: str) -> None:
    async with MCPServerStdio(
        name="kernelopt",
        params={"command": "kernelopt-mcp", "args": []},
        # validate and benchmark run for seconds to minutes; the SDK's default is 5 s
        client_session_timeout_seconds=900,
        cache_tools_list=True,
    ) as kernelopt:
        # the server's optimize_kernel prompt: the loop and its rules, as the agent's instructions
        prompt = await kernelopt.get_prompt("optimize_kernel", {"workload": workload})
        agent = Agent(
            name="kernel optimizer",
            instructions=prompt.messages[0].content.text,  # type: ignore[union-attr]
            mcp_servers=[kernelopt],
        )
        result = await Runner.run(agent, f"Optimize the {workload} kernel.", max_turns=60)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "vector_add"))
