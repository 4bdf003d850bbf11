"""NVRTC's log and PTX, read: diagnostics with line numbers (and the kernel's own line and caret),
per-kernel resources, entry parameters, the log quoted safely (only the kernel's own lines and CUDA
headers), and what the log alone does not say: host code in a kernel file, a mangled entry name."""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, Field

MAX_LOG_LINES = 60


class Diagnostic(BaseModel):
    line: int | None = Field(None, description="1-based source line")
    severity: str = Field(description="error | warning | remark")
    message: str
    quote: str = Field("", description="that source line and a caret under the spot (the kernel's own file only)")

    def text(self) -> str:
        """``line N: error: message``, then the quoted line and caret where NVRTC gave them."""
        head = f"{'line ' + str(self.line) if self.line else '-'}: {self.severity}: {self.message}"
        return f"{head}\n{self.quote}" if self.quote else head


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
_LOCATED_RE = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<sev>[a-z "
                         r"]*(?:error|warning|remark|note))\b(?P<rest>.*)$")
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
    """Compiler errors and warnings with their line numbers, from an NVRTC log (already
    filtered by :func:`quote_own_lines`, so a quote under a diagnostic is the kernel's own line)."""
    out = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        m = _DIAG_RE.match(line.strip())
        if m:
            sev = "error" if "error" in m["sev"] else m["sev"]
            line_no = int(m["line"]) if m["file"] == filename else None
            msg = m["msg"] if line_no is not None else f"{m['file']}({m['line']}): {m['msg']}"
            quote = ""
            if line_no is not None and i + 2 < len(lines) and _CARET_RE.match(lines[i + 2]):
                quote = f"{lines[i + 1]}\n{lines[i + 2]}"
            out.append(Diagnostic(line=line_no, severity=sev, message=msg, quote=quote))
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


_MANGLED_RE = re.compile(r"_Z(\d+)")
_MISSING_HEADER_RE = re.compile(r'cannot open source file "(?P<header>[^"]+)"')
_HOST_CODE_RE = re.compile(r"^\s*int\s+main\s*\(|\bstd::(?:vector|string|map|unordered_map|cout|cerr|unique_ptr|thread)"
                           r"\b", re.M)
# the C and C++ library headers of a host compiler; NVRTC has none of their host parts
_HOST_HEADERS = frozenset({
    "cstdio", "stdio.h", "cstdlib", "stdlib.h", "iostream", "fstream", "sstream", "iomanip", "string", "vector",
    "map", "unordered_map", "set", "memory", "algorithm", "chrono", "thread", "mutex", "functional", "cstring",
    "string.h", "cassert", "assert.h", "random",
})
HOST_CODE_HINT = (
    "kernels are device code only: NVRTC compiles __global__ and __device__ functions without the host's C++ "
    "library, and the harness allocates, fills, launches and checks; remove the host code ({what}) and keep the "
    "kernel (printf needs no #include in device code)"
)


def host_code_hint(log: str, source: str) -> str | None:
    """What to remove when a failed compile's source holds host code (a host header, ``main``,
    ``std::`` containers), which NVRTC cannot compile; None when nothing points to host code."""
    what = []
    headers = sorted({m["header"] for m in _MISSING_HEADER_RE.finditer(log)} & _HOST_HEADERS)
    what += [f"#include <{h}>" for h in headers]
    found = {m.group(0).strip() for m in _HOST_CODE_RE.finditer(source)}
    if any(f.startswith("int") for f in found):
        what.append("main()")
    what += sorted(f for f in found if f.startswith("std::"))
    return HOST_CODE_HINT.format(what=", ".join(what)) if what else None


def plain_name(entry: str) -> str | None:
    """The function name inside a C++ mangled kernel name (``_Z1kPf`` -> ``k``); None for an
    ``extern "C"`` (unmangled) name."""
    m = _MANGLED_RE.match(entry)
    if m is None:
        return None
    n = int(m[1])
    name = entry[m.end():m.end() + n]
    return name if len(name) == n and name.isidentifier() else None


def mangled_entry_warnings(entries: dict[str, list[PtxParam]], source: str) -> list[Diagnostic]:
    """A warning per kernel compiled under its C++ mangled name: an entry is looked up by its plain
    name, which only ``extern "C"`` gives it, so such a kernel would never be found."""
    out = []
    for entry in entries:
        name = plain_name(entry)
        if name is None:
            continue
        where = re.search(rf"__global__[^;{{}}]*\b{re.escape(name)}\s*\(", source)
        out.append(Diagnostic(
            line=source.count("\n", 0, where.start()) + 1 if where else None, severity="warning",
            message=(
                f"kernel {name!r} compiles to the C++ mangled name {entry!r}, so it will not be found by its name "
                f"{name!r}; declare it extern \"C\" __global__ void {name}(...)"
            ),
        ))
    return out
