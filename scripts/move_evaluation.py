"""Issue 18: move the modules that validate and time a candidate into kernelopt_mcp/evaluation/
and rewrite every import that names them (re-runnable: a second run changes nothing, and it
fixes files written later against the old paths).

    python3 scripts/move_evaluation.py [--imports-only PATH ...]

Relative imports are resolved against the file's old place and re-expressed from its new one;
absolute ``kernelopt_mcp.<module>`` names become ``kernelopt_mcp.evaluation.<module>``;
``write_atomic`` (a file utility, not evaluation) moves from inputs.py to files.py. In files
listed with --imports-only (other engineers' files) only import lines are rewritten.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "kernelopt_mcp"
NEW = "evaluation"
MOVED = {
    "evaluate", "harness_case", "harness", "outcomes", "compare", "fresh_inputs", "inputs", "oracle",
    "support_module", "stats", "calibrate", "roofline", "clocks",
}
# names that moved out of a moved module into a module outside evaluation/
RELOCATED = {("inputs", "write_atomic"): "files"}
ROOTS = ["kernelopt_mcp", "clients", "tests", "bench", "scripts"]
# other engineers' files: only their import lines are rewritten
OTHERS = ["kernelopt_mcp/server.py", "kernelopt_mcp/server", "kernelopt_mcp/docs", "clients"]
ALT = "|".join(sorted(MOVED, key=len, reverse=True))

REL = re.compile(r"^(\s*from\s+)(\.+)([\w.]*)(\s+import\s+)(.*)$")
ABS_IMPORT = re.compile(rf"^(\s*(?:from|import)\s+){PKG}\.({ALT})\b(?!\.py)")
FROM_PKG = re.compile(rf"^(\s*from\s+){PKG}(\s+import\s+)({ALT})(\s*(?:as\s+\w+)?\s*(?:#.*)?)$")
ANY_NAME = re.compile(rf"\b{PKG}\.({ALT})\b(?!\w)")
ANY_PATH = re.compile(rf"\b{PKG}/({ALT})\.py\b")


def module_of(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT / PKG).with_suffix("").parts)
    return [PKG, *parts]


def new_place(path: Path) -> Path:
    rel = path.relative_to(ROOT)
    if rel.parent == Path(PKG) and rel.stem in MOVED:
        return ROOT / PKG / NEW / rel.name
    return path


def map_module(parts: list[str]) -> list[str]:
    if len(parts) >= 2 and parts[0] == PKG and parts[1] in MOVED:
        return [PKG, NEW, *parts[1:]]
    return parts


def split_names(names: str) -> list[str]:
    return [n.strip() for n in names.split(",") if n.strip()]


def relocate(target: list[str], names: str) -> list[tuple[list[str], str]]:
    """[(module, names)]: names that left a moved module for another one get their own line."""
    if len(target) < 2 or target[0] != PKG or names.strip().startswith("(") or "#" in names:
        return [(target, names)]
    stem = target[-1]
    keep, out = [], []
    moved: dict[str, list[str]] = {}
    for n in split_names(names):
        dest = RELOCATED.get((stem, n.split()[0]))
        if dest is None:
            keep.append(n)
        else:
            moved.setdefault(dest, []).append(n)
    if not moved:
        return [(target, names)]
    if keep:
        out.append((target, ", ".join(keep)))
    for dest, ns in moved.items():
        out.append(([PKG, dest], ", ".join(ns)))
    return out


def relative(from_pkg: list[str], target: list[str]) -> str:
    common = 0
    while common < min(len(from_pkg), len(target)) and from_pkg[common] == target[common]:
        common += 1
    level = len(from_pkg) - common + 1
    return "." * level + ".".join(target[common:])


def rewrite_relative(line: str, old_pkg: list[str], new_pkg: list[str]) -> str:
    m = REL.match(line)
    if not m:
        return line
    head, dots, name, imp, names = m.groups()
    base = old_pkg[: len(old_pkg) - (len(dots) - 1)]
    target = base + (name.split(".") if name else [])
    if not name:
        # ``from . import x``: x may be a moved module
        mods = split_names(names)
        if any(n.split()[0] in MOVED for n in mods) and base == [PKG]:
            if all(n.split()[0] in MOVED for n in mods):
                target = [PKG, NEW]
            else:
                return line  # mixed; fix by hand
        elif old_pkg == new_pkg:
            return line
    pieces = []
    for t, ns in relocate(map_module(target), names):
        pieces.append(f"{head}{relative(new_pkg, t)}{imp}{ns}")
    return "\n".join(pieces)


def rewrite_absolute(line: str) -> str:
    m = FROM_PKG.match(line)
    if m:
        return f"{m.group(1)}{PKG}.{NEW}{m.group(2)}{m.group(3)}{m.group(4)}"
    if not ABS_IMPORT.match(line):
        return line
    line = ABS_IMPORT.sub(lambda m: f"{m.group(1)}{PKG}.{NEW}.{m.group(2)}", line)
    m = re.match(rf"^(\s*from\s+)({PKG}\.{NEW}\.\w+)(\s+import\s+)(.*)$", line)
    if m:
        head, mod, imp, names = m.groups()
        parts = mod.split(".")
        pieces = [f"{head}{'.'.join(t)}{imp}{ns}" for t, ns in relocate([PKG, parts[-1]], names)]
        fixed = []
        for p in pieces:
            fixed.append(re.sub(rf"^(\s*from\s+){PKG}\.(?!{NEW}\b)({ALT})\b", rf"\1{PKG}.{NEW}.\2", p))
        line = "\n".join(fixed)
    return line


def is_import(line: str) -> bool:
    return bool(re.match(r"^\s*(from\s+\S+\s+import|import\s)", line))


def rewrite_text(text: str, path: Path, imports_only: bool) -> str:
    in_pkg = path.is_relative_to(ROOT / PKG) and path.suffix == ".py"
    old_pkg = module_of(path)[:-1] if in_pkg else []
    if in_pkg and path.name == "__init__.py":
        old_pkg = module_of(path)[:-1]
    new_pkg = module_of(new_place(path))[:-1] if in_pkg else []
    out = []
    for line in text.split("\n"):
        if in_pkg and REL.match(line):
            line = rewrite_relative(line, old_pkg, new_pkg)
        elif is_import(line):
            line = rewrite_absolute(line)
        elif not imports_only:
            line = ANY_NAME.sub(lambda m: f"{PKG}.{NEW}.{m.group(1)}", line)
            line = ANY_PATH.sub(lambda m: f"{PKG}/{NEW}/{m.group(1)}.py", line)
        out.append(line)
    return "\n".join(out)


def main(argv: list[str]) -> int:
    imports_only = ({(ROOT / p).resolve() for p in argv[argv.index("--imports-only") + 1 :]}
                    if "--imports-only" in argv else set())
    files = [p for r in ROOTS for p in (ROOT / r).rglob("*")
             if p.suffix in {".py", ".sh", ".toml", ".md", ".cu"} and "__pycache__" not in p.parts]
    files.append(ROOT / "pyproject.toml")
    changed = []
    for path in sorted(set(files)):
        if path == Path(__file__).resolve():
            continue
        text = path.read_text()
        others = path.resolve() in imports_only or path.suffix == ".md" or any(
            path.is_relative_to(ROOT / o) for o in OTHERS
        )
        new = rewrite_text(text, path, others)
        if new != text:
            path.write_text(new)
            changed.append(path.relative_to(ROOT))
    (ROOT / PKG / NEW).mkdir(exist_ok=True)
    for stem in sorted(MOVED):
        old = ROOT / PKG / f"{stem}.py"
        if old.exists():
            subprocess.run(["git", "mv", str(old), str(ROOT / PKG / NEW / old.name)], cwd=ROOT, check=True)
    for p in changed:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
