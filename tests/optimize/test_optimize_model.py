"""The model side of `kernelopt optimize` (issue 15): the Responses API beside Chat Completions, token and
cost accounting for both, the price table, --price-per-mtok and --max-cost. Against the scripted
OpenAI-compatible server of tests/scripted_model.py over loopback HTTP (both APIs' wire formats);
the end-to-end runs use kernelopt-mcp over stdio with the pretend H200 of tests/fakegpu.py.
"""

from __future__ import annotations

import inspect
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakegpu import kernel
from scripted_model import ScriptedModel
from test_optimize import REPO, env, optimize, proposal, read  # noqa: F401  (env is a fixture)

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.model import SENT_PARAMETERS, ModelClient, ModelError
from kernelopt_agent.options import OptimizeOptions, OptionsError
from kernelopt_agent.pricing import (
    PRICE_SOURCE,
    PRICES_CHECKED,
    Price,
    Pricing,
    price_for,
)
from kernelopt_agent.proposal import PROPOSAL_SCHEMA
from kernelopt_agent.responses_api import RESPONSES_SENT_PARAMETERS
from kernelopt_agent.rundir import RunDir

# The first openai release whose responses.create() takes each keyword ModelClient sends: the Responses API
# arrived in 1.66.0 with all of them (1.65.5 has no client.responses; 1.66.0's create() signature read from its wheel).
RESPONSES_FIRST_RELEASE = dict.fromkeys(("model", "input", "tools", "reasoning", "text", "include", "store"), (1, 66))

TOOL = {"type": "function", "function": {"name": "compile", "description": "compile a kernel",
                                         "parameters": {"type": "object",
                                                        "properties": {"source": {"type": "string"}}}}}
# two answers' usage as the server reports it: cached input is part of input, reasoning part of output
USAGE_1 = {"prompt_tokens": 10_000, "cached_tokens": 4_000, "completion_tokens": 2_000, "reasoning_tokens": 1_500}
USAGE_2 = {"prompt_tokens": 20_000, "cached_tokens": 16_000, "completion_tokens": 3_000, "reasoning_tokens": 2_500}
# gpt-5-mini: 0.25 USD/M input, 0.025 cached input, 2.00 output
COST_1_2 = ((6_000 + 4_000) * 0.25 + (4_000 + 16_000) * 0.025 + (2_000 + 3_000) * 2.00) / 1e6


def options(tmp_path: Path, server: ScriptedModel, **flags: Any) -> OptimizeOptions:
    base = {"description": "c = a + b", "base_url": server.url, "max_retries": 0, "model": "gpt-5-mini"}
    return OptimizeOptions.build({**base, **flags}, environ={"OPENAI_API_KEY": "sk-test"}, cwd=tmp_path)


def converse(opts: OptimizeOptions, run: RunDir, turns: int = 2) -> tuple[ModelClient, list[Any]]:
    """What the loop does: ask with tools and the proposal schema, answer tool calls, ask again."""
    client = ModelClient(opts, run)
    replies: list[Any] = []

    async def main() -> None:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You write CUDA kernels."},
                                          {"role": "user", "content": "Make c = a + b fast. Answer in JSON."}]
        for _ in range(turns):
            reply = await client.chat(messages, purpose="test", tools=[TOOL], schema=PROPOSAL_SCHEMA)
            replies.append(reply)
            if not reply.tool_calls:
                break
            messages.append({"role": "assistant", "content": reply.message.content, "tool_calls": [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in reply.tool_calls]})
            for call in reply.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "compiled: 0 errors"})

    anyio.run(main)
    return client, replies


# --- the Responses API on the wire -------------------------------------------------------------------


def test_responses_round_trip_keeps_reasoning_between_turns(tmp_path: Path) -> None:
    answer = proposal(kernel("FAST"))["content"]
    script = [{"tool_calls": [("compile", {"source": kernel()})], "usage": USAGE_1},
              {"content": answer, "usage": USAGE_2}]
    with ScriptedModel(script) as model:
        opts = options(tmp_path, model, api="responses")
        _, replies = converse(opts, RunDir.create(tmp_path / "results"))
    assert model.paths == ["/v1/responses", "/v1/responses"] and not model.steps
    first, second = model.requests
    for body in model.requests:
        assert set(body) == set(RESPONSES_SENT_PARAMETERS), set(body) ^ set(RESPONSES_SENT_PARAMETERS)
        assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
        assert body["reasoning"] == {"effort": "medium"}
        assert body["text"]["format"]["type"] == "json_schema" and body["text"]["format"]["name"] == "kernel_proposal"
        assert body["text"]["format"]["schema"] == PROPOSAL_SCHEMA["schema"]
        assert body["tools"] == [{"type": "function", "name": "compile", "description": "compile a kernel",
                                  "parameters": TOOL["function"]["parameters"], "strict": False}]
    assert first["input"] == [{"role": "system", "content": "You write CUDA kernels."},
                              {"role": "user", "content": "Make c = a + b fast. Answer in JSON."}]
    # the second request sends the first answer back as it came: its encrypted reasoning, then the call, then the output
    assert second["input"][2:] == [
        {"type": "reasoning", "id": "rs_0001", "summary": [], "encrypted_content": model.issued_reasoning[0]},
        {"type": "function_call", "call_id": "call_1_0", "name": "compile",
         "arguments": json.dumps({"source": kernel()})},
        {"type": "function_call_output", "call_id": "call_1_0", "output": "compiled: 0 errors"},
    ]
    call = replies[0].tool_calls[0]
    assert (call.id, call.function.name, replies[0].finish_reason) == ("call_1_0", "compile", "tool_calls")
    assert replies[1].content == answer and replies[1].finish_reason == "stop" and replies[1].refusal is None
    assert read(tmp_path / "results" / "run-001" / "model" / "0001-request.json")["api"] == "responses"


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_tokens_and_cost_are_what_the_server_reported(tmp_path: Path, api: str) -> None:
    script = [{"tool_calls": [("compile", {"source": kernel()})], "usage": USAGE_1},
              {**proposal(kernel("FAST")), "usage": USAGE_2}]
    with ScriptedModel(script) as model:
        client, _ = converse(options(tmp_path, model, api=api), RunDir.create(tmp_path / "results"))
    assert set(model.paths) == {"/v1/responses" if api == "responses" else "/v1/chat/completions"}
    tokens = client.usage.as_json()
    assert {k: tokens[k] for k in ("calls", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens",
                                   "total_tokens")} == {"calls": 2, "input_tokens": 30_000,
                                                        "cached_input_tokens": 20_000, "output_tokens": 5_000,
                                                        "reasoning_tokens": 4_000,
                                                        "total_tokens": 35_000}
    assert tokens["cost_usd"] == pytest.approx(COST_1_2) and pytest.approx(0.013) == COST_1_2
    assert tokens["prices"] == {"model": "gpt-5-mini", "source": "table", "input_per_mtok": 0.25,
                                "cached_input_per_mtok": 0.025, "output_per_mtok": 2.0, "url": PRICE_SOURCE,
                                "checked": PRICES_CHECKED, "note": tokens["prices"]["note"]}
    assert PRICE_SOURCE in tokens["cost_note"] and "reasoning tokens are billed as output" in tokens["cost_note"]
    assert [c["cached_input_tokens"] for c in client.calls] == [4_000, 16_000]
    assert [c["reasoning_tokens"] for c in client.calls] == [1_500, 2_500]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_refusals_and_cut_off_answers_read_the_same(tmp_path: Path, api: str) -> None:
    script = [{"refusal": "I can't help with that."},
              {"content": '{"rationale": "cut', "incomplete": "max_output_tokens"}]
    with ScriptedModel(script) as model:
        client = ModelClient(options(tmp_path, model, api=api), RunDir.create(tmp_path / "results"))

        async def main() -> list[Any]:
            msgs = [{"role": "user", "content": "JSON please"}]
            return [await client.chat(msgs, purpose="t", schema=PROPOSAL_SCHEMA) for _ in range(2)]

        refused, cut = anyio.run(main)
    assert refused.refusal == "I can't help with that." and not refused.tool_calls
    assert cut.finish_reason == "length" and cut.content == '{"rationale": "cut'


def test_responses_sends_back_only_what_the_server_accepts(tmp_path: Path) -> None:
    """A model without reasoning refuses include and reasoning.effort; a server without json_schema refuses it:
    each is dropped once and said in the notes, as with Chat Completions."""
    script = [
        {"status": 400, "error": "Encrypted content is not supported with this model.", "param": "include"},
        {"status": 400, "error": "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
         "param": "reasoning.effort"},
        {"status": 400, "error": "Invalid parameter: 'text.format' of type 'json_schema' is not supported.",
         "param": "text.format"},
        {"content": "{}"},
        {"content": "{}"},
    ]
    with ScriptedModel(script) as model:
        client = ModelClient(options(tmp_path, model, api="responses", model="gpt-4o"),
                             RunDir.create(tmp_path / "results"))

        async def main() -> None:
            for _ in range(2):
                await client.chat([{"role": "user", "content": "JSON please"}], purpose="t", schema=PROPOSAL_SCHEMA)

        anyio.run(main)
    assert not model.steps and not model.exhausted
    assert "include" in model.requests[0] and "include" not in model.requests[1]
    assert "reasoning" in model.requests[1] and "reasoning" not in model.requests[2]
    assert model.requests[3]["text"] == {"format": {"type": "json_object"}} == model.requests[4]["text"]
    assert len(client.notes) == 3 and "include" in client.notes[0] and "json_object" in client.notes[2]
    run = tmp_path / "results" / "run-001" / "model"
    assert sorted(p.name for p in run.glob("*-error.json")) == ["0001-error.json", "0002-error.json", "0003-error.json"]


@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize(("status", "said"), [(401, "refused the API key (401)"), (500, "answered 500"),
                                              (400, "refused the request (400): no such thing")])
def test_errors_read_the_same_through_both_apis(tmp_path: Path, api: str, status: int, said: str) -> None:
    with ScriptedModel([{"status": status, "error": "no such thing"}]) as model:
        client = ModelClient(options(tmp_path, model, api=api), RunDir.create(tmp_path / "results"))
        with pytest.raises(ModelError, match=re.escape(said)):
            anyio.run(lambda: client.chat([{"role": "user", "content": "hi"}], purpose="t"))
    assert len(model.requests) == 1  # max_retries 0: the SDK did not retry
    assert (tmp_path / "results" / "run-001" / "model" / "0001-error.json").is_file()


def test_the_sdk_retries_server_errors_through_the_responses_api(tmp_path: Path) -> None:
    with ScriptedModel([{"status": 500, "error": "overloaded"}, {"content": "{}"}]) as model:
        client = ModelClient(options(tmp_path, model, api="responses", max_retries=1),
                             RunDir.create(tmp_path / "results"))
        reply = anyio.run(lambda: client.chat([{"role": "user", "content": "hi"}], purpose="t"))
    assert reply.content == "{}" and len(model.requests) == 2 and model.paths == ["/v1/responses"] * 2


# --- options: --api, prices, --max-cost --------------------------------------------------------------


@pytest.mark.parametrize(("base_url", "api", "expected"), [
    (None, None, "responses"), ("https://api.openai.com/v1", None, "responses"),
    ("http://localhost:11434/v1", None, "chat"), ("http://localhost:8000/v1", "responses", "responses"),
    (None, "chat", "chat"),
])
def test_api_defaults_to_responses_on_openai_only(tmp_path: Path, base_url: str | None, api: str | None,
                                                  expected: str) -> None:
    flags = {"description": "x", "base_url": base_url, "api": api}
    opts = OptimizeOptions.build(flags, environ={"OPENAI_API_KEY": "sk-test"}, cwd=tmp_path)
    assert opts.api == expected and opts.as_json()["api"] == expected


def test_environment_base_url_picks_chat(tmp_path: Path) -> None:
    environ = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    assert OptimizeOptions.build({"description": "x"}, environ=environ, cwd=tmp_path).api == "chat"


def test_bad_api_and_prices_are_refused(tmp_path: Path) -> None:
    environ = {"OPENAI_API_KEY": "sk-test"}
    with pytest.raises(OptionsError, match="--api must be responses or chat"):
        OptimizeOptions.build({"description": "x", "api": "completions"}, environ=environ, cwd=tmp_path)
    for bad in ("1", "a,b", "1,2,3,4", "-1,2"):
        with pytest.raises(OptionsError, match="expected IN,OUT or IN,CACHED,OUT"):
            OptimizeOptions.build({"description": "x", "price_per_mtok": bad}, environ=environ, cwd=tmp_path)


def test_max_cost_with_an_unknown_model_needs_prices(tmp_path: Path) -> None:
    environ = {"OPENAI_API_KEY": "sk-test"}
    flags = {"description": "x", "model": "llama-3.1-70b", "base_url": "http://localhost:8000/v1", "max_cost": 1.0}
    with pytest.raises(OptionsError, match=r"--max-cost 1.0 needs the price of model "
                       r"'llama-3.1-70b'.*--price-per-mtok"):
        OptimizeOptions.build(flags, environ=environ, cwd=tmp_path)
    opts = OptimizeOptions.build({**flags, "price_per_mtok": "0.5,1.5"}, environ=environ, cwd=tmp_path)
    pricing = Pricing.resolve(opts.model, opts.price_per_mtok)
    assert pricing.source == "--price-per-mtok" and pricing.price == Price(0.5, 1.5)
    # without --max-cost an unknown model runs; its cost is unknown, not zero
    OptimizeOptions.build({**flags, "max_cost": None}, environ=environ, cwd=tmp_path)


def test_price_table_lookup_and_unknown_cost() -> None:
    assert price_for("gpt-5-mini") == Price(0.25, 2.0, 0.025)
    assert price_for("gpt-5-mini-2025-08-07") == price_for("gpt-5-mini")  # dated snapshots share the price
    assert price_for("gpt-5-mini-fast") is None and price_for("llama3") is None
    assert Price(1.0, 10.0).cost_usd(1_000_000, 500_000, 0) == pytest.approx(1.0)  # no cached price: charged as input
    assert Price(1.0, 10.0, 0.1).cost_usd(1_000_000, 500_000, 100_000) == pytest.approx(0.5 + 0.05 + 1.0)
    from kernelopt_agent.pricing import Usage

    usage = Usage(pricing=Pricing.resolve("llama3"))
    usage.add({"prompt_tokens": 100, "completion_tokens": 10})
    tokens = usage.as_json()
    assert tokens["cost_usd"] is None and "no price known for 'llama3'" in tokens["cost_note"]
    assert tokens["prices"]["source"] == "none" and tokens["total_tokens"] == 110


def test_cli_refuses_max_cost_for_an_unknown_model_before_a_run(env: dict[str, Path],  # noqa: F811
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedModel([]) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--model", "my-local-model", "--max-cost", "0.5")
    assert code == 2 and not model.requests and not env["results"].exists()
    assert "--price-per-mtok" in capsys.readouterr().err


# --- the floor ---------------------------------------------------------------------------------------


def test_the_openai_floor_has_the_responses_api_with_every_keyword_sent() -> None:
    from openai.resources.responses import AsyncResponses

    accepted = set(inspect.signature(AsyncResponses.create).parameters)
    assert set(RESPONSES_SENT_PARAMETERS) <= accepted, set(RESPONSES_SENT_PARAMETERS) - accepted
    assert set(RESPONSES_SENT_PARAMETERS) <= set(RESPONSES_FIRST_RELEASE), "a new keyword: add its first release"
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in deps if re.match(r"openai\b", d)]
    floor = tuple(int(x) for x in re.findall(r"\d+", spec.split(">=", 1)[1])[:2])
    needed = max(RESPONSES_FIRST_RELEASE.values())
    assert floor >= needed, f"pyproject allows openai {spec}, but the Responses API needs >= {needed}"
    assert set(SENT_PARAMETERS).isdisjoint({"input", "include", "store"})  # chat keeps its own keywords


# --- whole runs through each API ---------------------------------------------------------------------


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_whole_run_through_each_api(env: dict[str, Path], api: str) -> None:  # noqa: F811
    script = [
        {"tool_calls": [("compile", {"source": kernel()})], "usage": USAGE_1},   # iteration 1: a tool call ...
        {"content": "Sure, I will vectorize.", "usage": {"prompt_tokens": 1_000, "completion_tokens": 100}},  # no JSON
        {**proposal(kernel("FAST")), "usage": USAGE_2},                           # ... then the proposal
    ]
    with ScriptedModel(script) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", "1", "--api", api)
    assert code == 0 and not model.steps and not model.exhausted
    assert set(model.paths) == {"/v1/responses" if api == "responses" else "/v1/chat/completions"}
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["best"]["label"] == "002-it1"
    tokens = summary["tokens"]
    assert (tokens["calls"], tokens["input_tokens"], tokens["cached_input_tokens"], tokens["output_tokens"],
            tokens["reasoning_tokens"]) == (3, 31_000, 20_000, 5_100, 4_000)
    assert tokens["cost_usd"] == pytest.approx(COST_1_2 + (1_000 * 0.25 + 100 * 2.0) / 1e6)
    assert tokens["prices"]["source"] == "table" and tokens["prices"]["url"] == PRICE_SOURCE
    assert read(run / "config.json")["api"] == api
    if api == "responses":  # the retry after the unusable answer sends the whole turn back, reasoning included
        third = model.requests[2]["input"]
        assert [i.get("type") for i in third if i.get("type") == "reasoning"] == ["reasoning", "reasoning"]
        assert {"role": "assistant", "content": "Sure, I will vectorize."} in third


def test_max_cost_stops_a_responses_run_with_given_prices(env: dict[str, Path]) -> None:  # noqa: F811
    # 1,0.1,10 USD per M: 1M input (0.5M cached) + 0.1M output = 0.5 + 0.05 + 1.0 = 1.55 USD > 1.5
    costly = {**proposal(kernel("FAST")), "usage": {"input_tokens": 1_000_000, "cached_tokens": 500_000,
                                                     "output_tokens": 100_000, "reasoning_tokens": 60_000}}
    with ScriptedModel([costly, proposal(kernel())]) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", "5", "--api", "responses",
                        "--model", "my-local-model", "--price-per-mtok", "1,0.1,10", "--max-cost", "1.5")
    assert code == 0 and len(model.steps) == 1  # the second answer was never asked for
    summary = read(env["results"] / "run-001" / "summary.json")
    assert summary["status"] == "stopped" and summary["stop_reason"].startswith("--max-cost 1.5 USD reached (1.5500")
    assert summary["tokens"]["cost_usd"] == pytest.approx(1.55) and summary["tokens"]["reasoning_tokens"] == 60_000
    assert summary["tokens"]["prices"]["source"] == "--price-per-mtok"
    assert summary["iterations"]["used"] == 2 and summary["best"]["label"] == "002-it1"


def test_an_unknown_model_runs_with_its_cost_unknown_not_zero(env: dict[str, Path],  # noqa: F811
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedModel([{**proposal(kernel("FAST")),
                         "usage": {"prompt_tokens": 1_000, "completion_tokens": 100}}]) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "1", "--model", "my-local-model") == 0
    tokens = read(env["results"] / "run-001" / "summary.json")["tokens"]
    assert tokens["cost_usd"] is None and tokens["total_tokens"] == 1_100
    assert tokens["prices"]["source"] == "none" and "no price known for 'my-local-model'" in tokens["cost_note"]
    capsys.readouterr()
    assert agent_main(["runs", "show", "--results-dir", str(env["results"])]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "1,100 tokens in 1 calls, cost unknown" in shown and "USD" not in shown


def test_the_optimize_pages_price_table_is_pricing_py() -> None:
    from kernelopt_agent.pricing import PRICES

    text = (REPO / "docs" / "optimize.md").read_text()
    table = text.split(
        "<!-- price table: kept equal to pricing.PRICES by tests/optimize/test_optimize_model.py -->", 1)[1]
    rows = {}
    for line in table.strip().splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, inp, cached, out = (c.strip() for c in line.strip("|").split("|"))
        rows[name.split()[0]] = Price(float(inp), float(out), None if cached == "-" else float(cached))
    assert rows == PRICES
    assert PRICES_CHECKED in text and PRICE_SOURCE in text


def test_api_and_prices_from_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "optimize.json"
    config.write_text(json.dumps({"description": "x", "api": "chat", "model": "my-model",
                                  "price-per-mtok": [0.5, 0.05, 1.5], "max-cost": 2.0}))
    opts = OptimizeOptions.build({"config": str(config)}, environ={"OPENAI_API_KEY": "sk-test"}, cwd=tmp_path)
    assert opts.api == "chat" and Pricing.resolve(opts.model, opts.price_per_mtok).price == Price(0.5, 1.5, 0.05)
    assert opts.as_json()["price_per_mtok"] == [0.5, 0.05, 1.5]
