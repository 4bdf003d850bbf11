"""What a kernel's source may ask the preprocessor to read: a first, friendly check.

This is NOT the defense: the compile worker is confined by the operating system (Landlock, see
:mod:`sandbox`), so NVRTC cannot open a file outside the CUDA headers whatever the source says,
and compile logs quote only the candidate's own lines. This check only turns the obvious
attempts into a clear compile error before NVRTC runs.

Every include-like directive is checked: the argument must be a quoted or bracketed relative
name (letters, digits, ``_ . / + -``; no leading ``/``, no ``..`` component), never a macro.
Comments, line splices, digraphs (``%:``), trigraphs (``??=``, ``??/``), a byte-order mark and
carriage returns are normalised first, so they cannot hide a directive; digit separators
(``1'000``) are not taken for character literals, raw strings are skipped whole.

The scan is linear in the source's size, and refuses sources over :data:`MAX_SOURCE_BYTES`
before reading them.
"""

from __future__ import annotations

import re

MAX_SOURCE_BYTES = 512 * 1024

# horizontal whitespace as the preprocessor sees it; a carriage return also starts a line
_WS = r"[ \t\f\v\r\ufeff]"
_DIRECTIVE_RE = re.compile(rf"(?:^|\r){_WS}*#{_WS}*(include_next|include|import|embed)\b([^\n]*)", re.MULTILINE)
_ARG_RE = re.compile(r'^\s*(?:<(?P<a>[A-Za-z0-9_./+\-]+)>|"(?P<q>[A-Za-z0-9_./+\-]+)")\s*$')
# one token of the comment-stripping scan; raw strings are finished by hand (their end is data)
_TOKEN_RE = re.compile(
    r"""(?P<line>//[^\n]*)"""
    r"""|(?P<block>/\*(?:[^*]|\*(?!/))*(?:\*/|\Z))"""
    r"""|(?P<raw>(?:u8|[uUL])?R"(?P<delim>[^()\\ \t\n]{0,16})\()"""
    r"""|(?P<str>(?:u8|[uUL])?"(?:\\.|[^"\\\n])*"?)"""
    r"""|(?P<num>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.]|'(?=[0-9A-Za-z_]))*)"""
    r"""|(?P<chr>(?:u8|[uUL])?'(?:\\.|[^'\\\n])*'?)"""
    r"""|(?P<other>[A-Za-z_][A-Za-z0-9_]*|[^/"'0-9.A-Za-z_]+|.)""",
    re.DOTALL,
)


def _without_comments(text: str) -> str:
    """Comments replaced by a space (newlines kept), literals and everything else left alone."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        m = _TOKEN_RE.match(text, i)
        assert m is not None  # the last alternative matches any character
        kind = m.lastgroup if m.lastgroup != "delim" else "raw"
        if kind == "line":
            out.append(" ")
        elif kind == "block":
            out.append(" " + "\n" * m.group().count("\n"))
        elif kind == "raw":
            end = text.find(")" + m["delim"] + '"', m.end())
            stop = n if end < 0 else end + len(m["delim"]) + 2
            out.append(text[i:stop])
            i = stop
            continue
        else:
            out.append(m.group())
        i = m.end()
    return "".join(out)


def _normalise(source: str) -> str:
    text = source.replace("??=", "#").replace("%:", "#").replace("??/", "\\")
    # line splices (also with spaces before the line end) join a directive split over lines
    return re.sub(r"\\[ \t]*(?:\r\n|\r|\n)", "", text)


def include_problem(source: str) -> tuple[int, str] | None:
    """``(line, message)`` for the first include directive that is not allowed, else None.

    Raises:
        ValueError: the source is larger than :data:`MAX_SOURCE_BYTES` (checked before any scan).
    """
    size = len(source) if source.isascii() else len(source.encode())
    if size > MAX_SOURCE_BYTES:
        raise ValueError(f"source is {size} bytes; the limit is {MAX_SOURCE_BYTES}")
    text = _without_comments(_normalise(source))
    line, counted_to = 1, 0
    for m in _DIRECTIVE_RE.finditer(text):
        line += text.count("\n", counted_to, m.start())  # each stretch counted once: linear
        counted_to = m.start()
        arg = _ARG_RE.match(m.group(2))
        name = (arg["a"] or arg["q"]) if arg else None
        if name is None or name.startswith("/") or ".." in name.split("/") or m.group(1) != "include":
            directive = f"#{m.group(1)}{m.group(2)}".strip()
            return line, (
                f"`{directive[:120]}` is not allowed: include CUDA headers by name only (e.g. "
                "#include <cuda_fp16.h>, <mma.h>, <cooperative_groups.h>); absolute paths, '..', macros "
                "as include names, #include_next, #import and #embed are refused"
            )
    return None
