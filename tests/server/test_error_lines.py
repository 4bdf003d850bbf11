"""Errors in one line that name the file (or the tool) and the field: a launch file with a trailing
comma or a misspelled key, and MCP tool arguments that fail their schema; never a pydantic dump
(``1 validation error for ...``) or a link to errors.pydantic.dev."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import in_memory_server, kernel, write_tiny_workload
from fakegpu import tool_text as text
from test_server import make_config

from kernelopt_mcp.cli import main

REPO = Path(__file__).resolve().parents[2]
INITIAL = str(REPO / "workloads/vector_add/initial.cu")


def _no_dump(message: str) -> None:
    assert ("validation error for" not in message and "pydantic.dev" not in message
            and "input_value" not in message), message


@pytest.mark.parametrize(("content", "expected"), [
    ('{"default": {"grid": [1], "blok": [32]}}',
     'default.block: required field is missing; got "blok": did you mean "block"?'),
    ('{"default": {"grid": [1], "block": [32]},}', "line 1 column 42: invalid JSON"),
    ('{"cases": {"tiny": {"grid": [1], "block": [32], "shared": 4}}}', "cases.tiny.shared: unknown field"),
])
def test_a_bad_launch_file_is_named_with_its_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, content: str, expected: str,
) -> None:
    monkeypatch.setenv("KERNELOPT_HARNESS", str(tmp_path / "no-harness"))
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["evaluate", "vector_add", INITIAL, "--launch", str(bad), "--json"]) != 0
    out = json.loads(capsys.readouterr().out)
    assert out["message"].startswith(f"{bad}: ") and expected in out["message"], out
    assert len(out["message"].splitlines()) == 1
    _no_dump(out["message"])


@pytest.mark.anyio
async def test_mcp_argument_errors_name_the_tool_and_the_field(tmp_path: Path) -> None:
    config = make_config(tmp_path, write_tiny_workload(tmp_path / "extra"), "nogpu")
    async with in_memory_server(config) as (client, _):
        r = await client.call_tool("validate", {"workload": "tiny_add", "source": kernel(),
                                                "launch": {"default": {"grid": [1], "blok": [32]}}})
        assert r.is_error
        assert (text(r) == 'validate arguments: launch.default.block: required field is missing; got "blok": did you '
                'mean "block"?')
        r = await client.call_tool("benchmark", {"workload": "tiny_add", "source": kernel(),
                                                 "launch": {"grid": [1], "block": [32]}, "iterations": 0})
        assert r.is_error and text(r).startswith("benchmark arguments: iterations: "), text(r)
        _no_dump(text(r))
