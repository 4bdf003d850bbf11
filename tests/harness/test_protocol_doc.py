"""protocol.py against native_harness/PROTOCOL.md: the typed requests and answers, and the
contract they mirror, name the same fields, both ways.

- The document's side: every key of every JSON example in PROTOCOL.md is a field of the model
  at that place (the request's, a case's, a buffer's, the answer's timing, ...), and every field
  a bullet list of request or answer fields documents resolves to a field of the models.
- The models' side: every field of every request and answer model is named in PROTOCOL.md
  (as `field`, `a.field`, or a JSON key "field").

So a field added to one side only fails here; the last test shows that each check does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from inspect import isclass
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from kernelopt_mcp.evaluation import protocol
from kernelopt_mcp.evaluation.protocol import (
    BaselineAnswer,
    BaselineRequest,
    BufferArg,
    CaseAnswer,
    CaseRequest,
    CheckedExpected,
    HarnessAnswer,
    RunRequest,
    TimingAnswer,
)

DOC = Path(__file__).resolve().parents[2] / "native_harness" / "PROTOCOL.md"
TEXT = DOC.read_text()

_MODELS = [getattr(protocol, name) for name in protocol.__all__]
REQUEST_MODELS = [m for m in _MODELS if isclass(m) and issubclass(m, protocol._Request)]
ANSWER_MODELS = [m for m in _MODELS if isclass(m) and issubclass(m, protocol._Answer)]

# The sections whose bullet lists document request fields, and the one documenting answer fields
# (their headings, without the leading #s). Other sections' bullets are values or steps.
REQUEST_SECTIONS = ("Request", "Protocol 2 data path", "Fresh inputs and checked launches",
                    "Inputs drawn on the device", "Tensor maps", "Checked launches against expected values")
ANSWER_SECTIONS = ("Protocol 2 answer fields",)
# "Top-level fields:", "Buffer fields:", "Case field:" ... say whose fields the bullets below are.
LABELS = {"Top-level": RunRequest, "Buffer": BufferArg, "Case": CaseRequest, "Entry": CheckedExpected}


# --- the models ----------------------------------------------------------------------------


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field can hold, through ``X | None``, ``list[X]``, ``dict[str, X]``, Annotated."""
    if isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in models_in(arg)]


def resolve(model: type[BaseModel], path: str) -> bool:
    """Whether the dotted ``path`` (``timing.check_launch_ms``) is a field of ``model``."""
    head, _, rest = path.partition(".")
    if head not in model.model_fields:
        return False
    return not rest or any(resolve(m, rest) for m in models_in(model.model_fields[head].annotation))


def unknown_keys(candidates: list[type[BaseModel]], value: Any, where: str = "") -> list[str]:
    """The keys of ``value`` (a JSON example, or part of one) that no field of its model has.
    Of several candidate models (a case's args), a value is the one whose ``kind`` it has."""
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in unknown_keys(candidates, item, f"{where}[{i}]")]
    if not isinstance(value, dict) or not candidates:
        return []
    if len(candidates) > 1:
        kinds = [m for m in candidates
                 if "kind" in m.model_fields and m.model_fields["kind"].default == value.get("kind")]
        if len(kinds) != 1:
            return [f"{where or 'example'}: kind {value.get('kind')!r} is none of {[m.__name__ for m in candidates]}"]
        candidates = kinds
    [model] = candidates
    out = []
    for key, item in value.items():
        here = f"{where}.{key}" if where else key
        if key not in model.model_fields:
            out.append(f"{here} (no such field in {model.__name__})")
        else:
            out += unknown_keys(models_in(model.model_fields[key].annotation), item, here)
    return out


def undocumented(models: Iterable[type[BaseModel]], text: str = TEXT) -> list[str]:
    """``Model.field`` for every field of ``models`` that ``text`` never names."""
    named = {part for ref in re.findall(r"`([a-z_][a-z_0-9.]*)`", text) for part in ref.split(".")}
    named |= set(re.findall(r'"([a-z_][a-z_0-9]*)"', text))
    return [f"{m.__name__}.{f}" for m in models for f in m.model_fields if f not in named]


# --- the document ---------------------------------------------------------------------------


def json_examples(text: str = TEXT) -> Iterator[Any]:
    """Every ```json block, with its elisions (``{...}``, ``"...": "..."``) taken out; a block of
    fields (``"tensor_maps": [...]``, part of an object) is read as the object holding them."""
    for block in re.findall(r"```json\n(.*?)```", text, re.S):
        block = block.replace("{...}", "{}")
        block = re.sub(r',\s*"\.\.\.":\s*"\.\.\."', "", block)
        block = re.sub(r'"\.\.\.":\s*"\.\.\.",\s*', "", block)
        yield json.loads("{" + block + "}" if block.lstrip().startswith('"') else block)


def example_model(example: dict[str, Any]) -> type[BaseModel]:
    """What an example shows: a buffer argument, fields of a case (every key one of a case's and
    no ``args``: a part of one), an answer (it has a status) or a request."""
    if example.get("kind") == "buffer":
        return BufferArg
    if example and "args" not in example and set(example) <= set(CaseRequest.model_fields):
        return CaseRequest
    baseline = example.get("op") == "baseline"
    if "status" in example or any("status" in c for c in example.get("cases", [])):
        return BaselineAnswer if baseline else HarnessAnswer
    return BaselineRequest if baseline else RunRequest


def field_bullets(text: str = TEXT) -> Iterator[tuple[str, str, type[BaseModel] | None, str]]:
    """(side, section, label's model or None, field) for every bullet that starts with field
    names (``- `name`:``, ``- `a`, `b` (...)``) in a section of request or answer fields."""
    section, side, label = "", None, None
    for line in text.splitlines():
        if heading := re.match(r"#+ (.*)", line):
            section, label = heading[1], None
            side = ("request" if section.startswith(REQUEST_SECTIONS)
                    else "answer" if section.startswith(ANSWER_SECTIONS) else None)
        elif side and (m := re.match(r"(Top-level|Buffer|Case|Entry) fields?\b", line)):
            label = LABELS[m[1]]
        elif side and (bullet := re.match(r"\s*- ((?:`[a-z_][a-z_0-9.]*`(?:, )?)+)", line)):
            for name in re.findall(r"`([^`]+)`", bullet[1]):
                yield side, section, label, name


# --- the checks -----------------------------------------------------------------------------


def test_every_key_of_every_json_example_is_a_field_of_its_model() -> None:
    examples = list(json_examples())
    shown = {example_model(e) for e in examples}
    # every kind of example is found (a change in the document's layout fails here, not silently)
    assert {RunRequest, BaselineRequest, BufferArg, CaseRequest, HarnessAnswer, BaselineAnswer} <= shown, shown
    problems = [f"{example_model(e).__name__} example: {p}" for e in examples
                for p in unknown_keys([example_model(e)], e)]
    assert not problems, "PROTOCOL.md's examples have fields protocol.py lacks:\n" + "\n".join(problems)


def test_every_field_a_bullet_documents_is_a_field_of_the_models() -> None:
    bullets = list(field_bullets())
    assert len([b for b in bullets if b[0] == "request"]) >= 40 and len([b for b in bullets if b[0] == "answer"]) >= 4
    problems = []
    for side, section, label, name in bullets:
        if side == "answer":
            ok = resolve(HarnessAnswer, name) or resolve(CaseAnswer, name)
        elif label is not None:
            ok = resolve(label, name)
        else:
            ok = any(resolve(m, name) for m in REQUEST_MODELS)
        if not ok:
            problems.append(f"{section!r}: `{name}` ({label.__name__ if label else side} field)")
    assert not problems, "PROTOCOL.md documents fields protocol.py lacks:\n" + "\n".join(problems)


def test_every_field_of_every_model_is_documented() -> None:
    assert len(REQUEST_MODELS) >= 10 and len(ANSWER_MODELS) >= 15  # the classification found them
    missing = undocumented([*REQUEST_MODELS, *ANSWER_MODELS])
    assert not missing, "protocol.py has fields PROTOCOL.md does not name:\n" + "\n".join(missing)


def test_the_checks_catch_a_field_on_one_side_only() -> None:
    # a field added to a model only
    class Extended(TimingAnswer):
        brand_new_ms: float | None = None

    assert undocumented([Extended]) == ["Extended.brand_new_ms"]
    # a field added to an example only, deep in an answer
    response = next(e for e in json_examples() if example_model(e) is HarnessAnswer and "function" in e)
    response["cases"][0]["timing"]["brand_new_ms"] = 1.0
    assert unknown_keys([HarnessAnswer], response) == [
        "cases[0].timing.brand_new_ms (no such field in TimingAnswer)"]
    request = next(e for e in json_examples() if example_model(e) is RunRequest)
    request["cases"][0]["args"][0]["brand_new"] = True
    assert unknown_keys([RunRequest], request) == ["cases[0].args[0].brand_new (no such field in BufferArg)"]
    # a field added to a bullet list only
    doc = "### Protocol 2 data path\n\nBuffer fields:\n- `dtype`: the type\n- `brand_new` (default false): new\n"
    bullets = list(field_bullets(doc))
    assert [(b[2], b[3]) for b in bullets] == [(BufferArg, "dtype"), (BufferArg, "brand_new")]
    assert resolve(BufferArg, "dtype") and not resolve(BufferArg, "brand_new")


@pytest.mark.parametrize("path", ["timing.check_launch_ms", "compares", "timed_checks"])
def test_answer_paths_resolve_through_nested_models(path: str) -> None:
    assert resolve(CaseAnswer, path)
    assert not resolve(CaseAnswer, path + "_typo")
