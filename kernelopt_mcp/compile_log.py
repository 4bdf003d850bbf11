"""NVRTC's log and PTX, read: diagnostics with line numbers, per-kernel resources, entry
parameters, and the log quoted safely (only the kernel's own lines and CUDA headers)."""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, Field

MAX_LOG_LINES = 60


class Diagnostic(BaseModel):
    line: int | None = Field(None, description="1-based source line")
    severity: str = Field(description="error | warning | remark")
    message: str


class Resources(BaseModel):
    """What ptxas reports for the entry function."""

    registers: int | None = None
    shared_bytes: int | None = Field(None, description="static shared memory per block")
    constant_bytes: int | None = None
    stack_frame_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    barriers: int | None = None


class PtxParam(BaseModel):
    name: str
    size_bytes: int


_CARET_RE = re.compile(r"^[ \t]*\^[ \t]*$")
# a diagnostic's location, with any file name (spaces and parentheses included)
_LOCATED_RE = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<sev>[a-z ]*(?:error|warning|remark|note))\b(?P<rest>.*)$")
WITHHELD = "(message withheld: the location is not the kernel's source nor a CUDA header)"


NVRTC_BUILTIN_HEADER = "__nv_nvrtc_builtin_header.h"


def quote_own_lines(log: str, source: str, filename: str, header_dirs: tuple[str, ...] = ()) -> str:
    """The NVRTC log with every quoted source line taken from ``source`` itself.

    NVRTC follows each diagnostic ``file(line): error: message`` with the text of that line and
    a caret. For a location in the candidate's file (``filename``) the quoted text is replaced
    by line ``line`` of ``source``, as sent; for any other location the quote and caret are
    dropped, and the message too unless the file lies in ``header_dirs`` (the CUDA headers).
    So whatever file NVRTC managed to read, its lines never reach a client through the log.
    """
    own = source.splitlines()
    dirs = tuple(os.path.join(os.path.realpath(d), "") for d in header_dirs)
    lines = log.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _LOCATED_RE.match(line.strip())
        out_line = line
        quote = i + 1 < len(lines) and lines[i + 1].startswith("  ") and not _LOCATED_RE.match(lines[i + 1].strip())
        caret = quote and i + 2 < len(lines) and bool(_CARET_RE.match(lines[i + 2]))
        if m is None:
            out.append(line)
            i += 1
            continue
        mine = m["file"] == filename
        nvrtcs_own = m["file"] == NVRTC_BUILTIN_HEADER  # in NVRTC's memory, never read from a file
        if not mine and not nvrtcs_own and not os.path.realpath(m["file"]).startswith(dirs or ("\0",)):
            out_line = f"{m['file']}({m['line']}): {m['sev']}: {WITHHELD}"
        out.append(out_line)
        i += 1
        if not quote:
            continue
        if mine:
            n = int(m["line"])
            if 1 <= n <= len(own):
                out.append("  " + own[n - 1])
                if caret:
                    out.append(lines[i + 1])
        i += 2 if caret else 1
    return "\n".join(out)


def truncate_log(log: str) -> tuple[str, int]:
    lines = [ln for ln in log.splitlines() if ln.strip()]
    if len(lines) <= MAX_LOG_LINES:
        return "\n".join(lines), 0
    return "\n".join(lines[:MAX_LOG_LINES]), len(lines) - MAX_LOG_LINES


_DIAG_RE = re.compile(
    r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<sev>error|warning|remark|catastrophic error)"
    r"(?: #\w+-?\w*)?: (?P<msg>.*)$"
)


def parse_diagnostics(log: str, filename: str = "kernel.cu") -> list[Diagnostic]:
    """Compiler errors and warnings with their line numbers, from an NVRTC log."""
    out = []
    for line in log.splitlines():
        m = _DIAG_RE.match(line.strip())
        if m:
            sev = "error" if "error" in m["sev"] else m["sev"]
            line_no = int(m["line"]) if m["file"] == filename else None
            msg = m["msg"] if line_no is not None else f"{m['file']}({m['line']}): {m['msg']}"
            out.append(Diagnostic(line=line_no, severity=sev, message=msg))
        elif line.startswith("ptxas") and "error" in line:
            out.append(Diagnostic(line=None, severity="error", message=line.strip()))
    return out


_FUNC_RE = re.compile(r"ptxas info\s*: (?:Function properties for|Compiling entry function) '?(\w+)'?")
_STACK_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED_RE = re.compile(r"Used (\d+) registers")


def parse_resources(log: str) -> dict[str, Resources]:
    """Registers, shared memory, spills and stack per function, from ptxas -v output."""
    out: dict[str, Resources] = {}
    current: str | None = None
    for line in log.splitlines():
        m = _FUNC_RE.search(line)
        if m:
            current = m.group(1)
            out.setdefault(current, Resources())
            continue
        if current is None:
            continue
        r = out[current]
        if s := _STACK_RE.search(line):
            r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes = map(int, s.groups())
        if u := _USED_RE.search(line):
            r.registers = int(u.group(1))
            r.barriers = _int_after(line, r"used (\d+) barriers") or 0
            r.shared_bytes = _int_after(line, r"(\d+) bytes smem") or 0
            r.constant_bytes = _int_after(line, r"(\d+) bytes cmem\[0\]")
    return out


def _int_after(line: str, pattern: str) -> int | None:
    m = re.search(pattern, line)
    return int(m.group(1)) if m else None


_ENTRY_RE = re.compile(r"\.(?:visible|weak)?\s*\.entry\s+(\w+)\s*\((.*?)\)", re.S)
_PARAM_RE = re.compile(
    r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)(?:\s+\.ptr(?:\s+\.\w+)*(?:\s+\.align\s+\d+)?)?\s+(\w+)(?:\[(\d+)\])?"
)
_PTX_TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8}


def parse_ptx_entries(ptx: str) -> dict[str, list[PtxParam]]:
    """Kernel names and their parameter sizes in bytes, from PTX."""
    out: dict[str, list[PtxParam]] = {}
    for m in _ENTRY_RE.finditer(ptx):
        params = []
        for p in _PARAM_RE.finditer(m.group(2)):
            ptx_type, name, count = p.groups()
            size = _PTX_TYPE_BYTES.get(ptx_type[1:], 0)
            params.append(PtxParam(name=name, size_bytes=size * int(count) if count else size))
        out[m.group(1)] = params
    return out
