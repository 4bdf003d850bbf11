"""What a kernel's source may ask the preprocessor to read: headers by plain relative names only.

NVRTC reads any file an ``#include`` names, and its error log quotes the lines it could not
parse, so ``#include "/etc/passwd"`` in a model-written kernel would print that file into a
compile result. Before compiling, every include-like directive is checked: the argument must
be a quoted or bracketed relative name (letters, digits, ``_ . / + -``; no leading ``/``, no
``..`` component), never a macro. The compile worker runs in an empty directory, so such names
resolve only in the CUDA header directories. Comments, line splices, digraphs (``%:``) and
trigraphs (``??=``) are normalised first, so they cannot hide a directive.
"""

from __future__ import annotations

import re

_DIRECTIVE_RE = re.compile(r"^[ \t\f\v]*#[ \t\f\v]*(include_next|include|import|embed)\b(.*)$", re.MULTILINE)
_RAW_OPEN_RE = re.compile(r'"([^()\\ \t\n]{0,16})\(')
_ARG_RE = re.compile(r'^\s*(?:<(?P<a>[A-Za-z0-9_./+\-]+)>|"(?P<q>[A-Za-z0-9_./+\-]+)")\s*$')


def _without_comments(text: str) -> str:
    """Comments replaced by a space (newlines kept), string and character literals left alone."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            body = text[i : (n if end < 0 else end + 2)]
            out.append(" " + "\n" * body.count("\n"))
            i = n if end < 0 else end + 2
        elif c == '"' and i > 0 and text[i - 1] == "R" and (m := _RAW_OPEN_RE.match(text, i)):
            end = text.find(")" + m.group(1) + '"', m.end())  # a raw string: R"delim( ... )delim"
            stop = n if end < 0 else end + len(m.group(1)) + 2
            out.append(text[i:stop])
            i = stop
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def include_problem(source: str) -> tuple[int, str] | None:
    """``(line, message)`` for the first include directive that is not allowed, else None."""
    text = source.replace("??=", "#").replace("%:", "#")
    text = re.sub(r"\\\r?\n", "", text)  # line splices join a directive split over lines
    text = _without_comments(text)
    for m in _DIRECTIVE_RE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
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
