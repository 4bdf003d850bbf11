"""A kernel cannot make NVRTC read (and its log quote) files outside the CUDA headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.source_policy import include_problem

KERNEL = 'extern "C" __global__ void k(float* a) { a[0] = 1.0f; }\n'


@pytest.mark.parametrize("directive", [
    '#include "/etc/passwd"',
    "#include </etc/passwd>",
    '#include "../../../../etc/passwd"',
    "#include <cuda/../../../../../etc/passwd>",
    '#define P "/etc/passwd"\n#include P',
    '# /* hidden */ include "/etc/passwd"',
    '/* a comment first */ #include "/etc/passwd"',
    '#\\\ninclude "/etc/passwd"',
    '%:include "/etc/passwd"',
    '??=include "/etc/passwd"',
    "\f#\vinclude </etc/shadow>",
    "#include_next <cuda_fp16.h>",
    '#import "x.h"',
    '#embed "/etc/passwd"',
    'const char* s = R"x( " /* )x";\n#include "/etc/passwd"\n// */',
    # issue 13: a carriage return before '#', and a digit separator taken for a character literal
    '\r#include "/etc/passwd"',
    'int x;\r#include "/etc/passwd"',
    "__device__ int a = 1'2; __device__ const char* b = \"'/*\";\n#include \"/some/file\"\n// */",
    "__device__ long a = 0x1'ff'00; const char* b = \"'/*\";\n#include \"/some/file\"\n// */",
    '\ufeff#include "/etc/passwd"',
    '#include "/etc/passwd" \\ \r\nint y;',
    'u8R"d(x)d";\n#include "/etc/passwd"',
    '??/\n#include "/etc/passwd"',
])
def test_refused(directive: str) -> None:
    found = include_problem(directive + "\n" + KERNEL)
    assert found is not None, directive
    line, message = found
    assert line >= 1 and "is not allowed" in message


@pytest.mark.parametrize("source", [
    "#include <cuda_fp16.h>\n#include <mma.h>\n#include <cooperative_groups/reduce.h>\n",
    '#include "cuda_bf16.h"\n',
    '// #include "/etc/passwd" in a comment is not a directive\n',
    '/*\n#include "/etc/passwd"\n*/\n',
    'const char* s = "#include \\"/etc/passwd\\"";\n',
    "const char c = '\\''; // #include \"/etc/passwd\"\n",
    "const int n = 1'000'000; // '#include \"/etc/passwd\"\n",
    "",
])

def test_allowed(source: str) -> None:
    assert include_problem(source + KERNEL) is None


def test_the_compiler_refuses_before_nvrtc_reads_the_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.h"
    secret.write_text("THE-SECRET-VALUE\n")
    result = compile_kernel(f'#include "{secret}"\n' + KERNEL, cache=CompileCache())
    assert not result.ok
    assert "THE-SECRET-VALUE" not in result.log and "THE-SECRET-VALUE" not in result.summary()
    assert result.diagnostics[0].line == 1 and "absolute paths" in result.diagnostics[0].message


def test_a_relative_include_finds_nothing_outside_the_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker compiles in an empty directory, so a quoted name never reaches the server's cwd."""
    (tmp_path / "near.h").write_text("THE-SECRET-VALUE\n")
    monkeypatch.chdir(tmp_path)
    result = compile_kernel('#include "near.h"\n' + KERNEL, cache=CompileCache())
    assert not result.ok and "THE-SECRET-VALUE" not in result.log
    assert "cannot open source file" in result.log or "not found" in result.log.lower(), result.log


def test_line_numbers_of_many_directives() -> None:
    """43,600 allowed includes and a refused one after them: the line is counted once through."""
    n = 43_600
    found = include_problem("#include<a>\n" * n + '#include "/etc/passwd"\n')
    assert found is not None and found[0] == n + 1
    assert include_problem("#include<a>\n" * n) is None


def test_the_size_cap_comes_before_any_scan() -> None:
    with pytest.raises(ValueError, match="limit is 524288"):
        include_problem("/*" * (300 * 1024))
    with pytest.raises(ValueError, match="bytes"):
        include_problem("\u00e9" * (300 * 1024))  # 2 bytes each in UTF-8
