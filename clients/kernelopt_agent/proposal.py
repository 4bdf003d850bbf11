"""The model's answer each iteration: a kernel proposal (source, per-case launch, rationale).

Asked for with a JSON Schema (``response_format``, strict) where the server supports it; parsed
robustly either way: the whole answer as JSON, a fenced ```json block, the outermost {...}
object, or, failing those, a ```cuda block plus a ```json launch block. A proposal that does
not parse is a :class:`ProposalError` whose message goes back to the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kernelopt_mcp.launch import LaunchSpec

_DIMS = {"type": "array", "items": {"type": "string"},
         "description": "1-3 integers or expressions, e.g. \"ceil_div(N, 64)\""}
_CONFIG: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["grid", "block", "shared_bytes"],
    "properties": {
        "grid": _DIMS, "block": _DIMS,
        "shared_bytes": {"type": "string",
                         "description": "dynamic shared memory bytes: an integer or expression, \"0\" if none"},
    },
}
_NAMED_VALUE = {
    "type": "object", "additionalProperties": False, "required": ["name", "value"],
    "properties": {"name": {"type": "string"},
                   "value": {"type": "string", "description": "an integer, float or identifier"}},
}
_TUNABLES = {
    "anyOf": [
        {"type": "null"},
        {
            "type": "object", "additionalProperties": False, "required": ["params", "constraints", "defaults"],
            "description": "optional: macros of `source` for kernelopt to autotune before ranking the proposal",
            "properties": {
                "params": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "required": ["name", "values"],
                    "properties": {
                        "name": {"type": "string", "description": "a macro of the source (guarded by #ifndef)"},
                        "values": {"type": "array", "items": {"type": "string"}, "description": "values to try"},
                    },
                }},
                "constraints": {"type": "array", "items": {"type": "string"},
                                "description": "expressions of the params that must hold"},
                "defaults": {"type": "array", "items": _NAMED_VALUE,
                             "description": "one value per param (the untuned configuration)"},
            },
        },
    ],
}
PROPOSAL_SCHEMA: dict[str, Any] = {
    "name": "kernel_proposal",
    "strict": True,
    "schema": {
        "type": "object", "additionalProperties": False,
        "required": ["rationale", "source", "launch", "compile_options", "tunables"],
        "properties": {
            "rationale": {"type": "string", "description": "what changed and why it should be faster (2-5 sentences)"},
            "source": {"type": "string",
                       "description": "the complete CUDA C++ source: device code only, the exact prototype"},
            "launch": {
                "type": "object", "additionalProperties": False, "required": ["default", "cases"],
                "properties": {
                    "default": _CONFIG,
                    "cases": {
                        "type": "array", "description": "per-case overrides (may be empty)",
                        "items": {
                            "type": "object", "additionalProperties": False,
                            "required": ["case", "grid", "block", "shared_bytes"],
                            "properties": {"case": {"type": "string"}, **_CONFIG["properties"]},
                        },
                    },
                },
            },
            "compile_options": {"type": "array", "items": {"type": "string"}, "description": "NVRTC options from the "
                                "whitelist; usually []. \"-arch=sm_90a\" for Hopper's arch-specific instructions "
                                "(wgmma, setmaxnreg) on an sm_90 GPU"},
            "tunables": _TUNABLES,
        },
    },
}


class ProposalError(ValueError):
    """The answer is not a usable proposal; the message tells the model what to fix."""


@dataclass
class Proposal:
    source: str
    launch: LaunchSpec
    rationale: str = ""
    compile_options: list[str] = field(default_factory=list)
    # {"params": {name: [values]}, "constraints": [...], "defaults": {name: value}}
    tunables: dict[str, Any] | None = None

    def launch_json(self) -> dict[str, Any]:
        return self.launch.model_dump(mode="json", exclude_none=True)


def parse_proposal(text: str, case_names: list[str] | None = None) -> Proposal:
    """A proposal from the model's answer; raises ProposalError saying what is wrong."""
    if not text or not text.strip():
        raise ProposalError("the answer was empty; answer with the JSON proposal object")
    data = extract_json(text)
    if data is None:
        data = _from_blocks(text)
    if data is None:
        raise ProposalError(
            "no JSON object found in the answer; answer with one JSON object with keys rationale, source, launch, "
            "compile_options"
        )
    return proposal_from(data, case_names)


def proposal_from(data: Any, case_names: list[str] | None = None) -> Proposal:
    if not isinstance(data, dict):
        raise ProposalError("the proposal must be a JSON object")
    source = data.get("source") or data.get("kernel") or data.get("code")
    if not isinstance(source, str) or "__global__" not in source:
        raise ProposalError("`source` must be the complete CUDA source with the __global__ kernel")
    if "launch" not in data:
        raise ProposalError('`launch` is missing: {"default": {"grid": [...], "block": [...], "shared_bytes": "0"}, '
                            '"cases": []}')
    launch = parse_launch(data["launch"], case_names)
    options = data.get("compile_options") or []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ProposalError("`compile_options` must be a list of strings")
    rationale = data.get("rationale") or ""
    tunables = parse_tunables(data.get("tunables"))
    return Proposal(strip_fences(source), launch, str(rationale), [o for o in options if o.strip()], tunables)


def parse_tunables(raw: Any) -> dict[str, Any] | None:
    """The schema's list form ({"params": [{"name", "values"}], "defaults": [{"name", "value"}]}) or the
    tunable.json form ({"params": {name: [values]}, "defaults": {name: value}}), as the latter; None if absent."""
    if raw is None or raw == {} or raw == []:
        return None
    if not isinstance(raw, dict):
        raise ProposalError("`tunables` must be null or an object with params, constraints, defaults")
    params, defaults = raw.get("params"), raw.get("defaults")
    try:
        if isinstance(params, list):
            params = {str(p["name"]): [_value(v) for v in p["values"]] for p in params}
        if isinstance(defaults, list):
            defaults = {str(d["name"]): _value(d["value"]) for d in defaults}
    except (KeyError, TypeError) as exc:
        raise ProposalError(f"`tunables` is malformed ({exc}): params [{{name, values}}], "
                            f"defaults [{{name, value}}]") from None
    if not isinstance(params, dict) or not params:
        return None
    if not isinstance(defaults, dict):
        raise ProposalError("`tunables.defaults` must give one value per param (the untuned configuration)")
    constraints = raw.get("constraints") or []
    if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
        raise ProposalError("`tunables.constraints` must be a list of expressions (strings)")
    return {"params": {k: [_value(v) for v in vs] for k, vs in params.items()}, "constraints": constraints,
            "defaults": {k: _value(v) for k, v in defaults.items()}}


def _value(v: Any) -> Any:
    """Numbers from strings ("64" -> 64, "0.5" -> 0.5); identifiers stay strings."""
    if isinstance(v, str):
        text = v.strip()
        for cast in (int, float):
            try:
                return cast(text)
            except ValueError:
                continue
        return text
    return v


def parse_launch(raw: Any, case_names: list[str] | None = None) -> LaunchSpec:
    """The schema's list form (cases as a list) or kernelopt's dict form; numeric strings become ints."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise ProposalError("`launch` must be a JSON object, not a string") from None
    if not isinstance(raw, dict):
        raise ProposalError("`launch` must be an object with `default` and `cases`")
    raw = dict(raw)
    cases = raw.get("cases")
    if isinstance(cases, list):
        as_dict = {}
        for item in cases:
            if not isinstance(item, dict) or not item.get("case"):
                raise ProposalError("each entry of launch.cases needs `case` (a case name), `grid`, `block`, "
                                    "`shared_bytes`")
            item = dict(item)
            as_dict[str(item.pop("case"))] = item
        raw["cases"] = as_dict
    elif cases is None:
        raw.pop("cases", None)
    if raw.get("default") is None:
        raw.pop("default", None)
    raw = _numbers(raw)
    unknown = sorted(set(raw.get("cases", {})) - set(case_names or [])) if case_names is not None else []
    if unknown:
        raise ProposalError(f"launch.cases names unknown cases {unknown}; the cases are {case_names}")
    try:
        spec = LaunchSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)[:5])
        raise ProposalError(f"launch is invalid: {problems}") from None
    if spec.default is None and case_names and set(case_names) - set(spec.cases):
        raise ProposalError("launch needs a `default` configuration (or one for every case)")
    return spec


def _numbers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def extract_json(text: str) -> Any | None:
    """The first JSON object in ``text``: the whole text, a ```json fence, or the outermost {...}."""
    text = text.strip()
    candidates = [text]
    candidates += re.findall(r"```(?:json|JSON)?\s*\n(.*?)```", text, flags=re.S)
    start = text.find("{")
    if start >= 0:
        candidates.append(text[start:text.rfind("}") + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    if start >= 0:  # a JSON object followed by prose: decode just the first value
        try:
            data, _ = json.JSONDecoder().raw_decode(text[start:])
            if isinstance(data, dict):
                return data
        except json.JSONDecodeError:
            pass
    return None


def _from_blocks(text: str) -> dict[str, Any] | None:
    cuda = re.findall(r"```(?:cuda|cpp|c\+\+|cu|c)\s*\n(.*?)```", text, flags=re.S)
    if not cuda:
        return None
    launch = None
    for block in re.findall(r"```(?:json|JSON)\s*\n(.*?)```", text, flags=re.S):
        try:
            launch = json.loads(block)
            break
        except json.JSONDecodeError:
            continue
    if launch is None:
        return None
    return {"source": cuda[0], "launch": launch.get("launch", launch), "rationale": text.split("```", 1)[0].strip()}


def strip_fences(source: str) -> str:
    match = re.fullmatch(r"\s*```[a-zA-Z+]*\s*\n(.*?)```\s*", source, flags=re.S)
    return (match.group(1) if match else source).rstrip() + "\n"
