"""What a failed or surprising compile says beyond NVRTC's own words: host code in a kernel file,
a kernel that lost its plain name to C++ mangling, and the source line and caret under an error."""

from __future__ import annotations

from kernelopt_mcp.compile_report import compile_output
from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.config import Settings, find_workload
from kernelopt_mcp.evaluation.build import check_entry

HOST_PROGRAM = """#include <cstdio>
extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }
int main() { printf("hi\\n"); return 0; }
"""

STD_CONTAINER = """extern "C" __global__ void k(float* x) { x[0] = 1.0f; }
void host() { std::vector<float> v(4); }
"""

MANGLED = """// a kernel without extern "C"
__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }
"""

UNDEFINED = 'extern "C" __global__ void k(float* x) {\n  x[0] = y;\n}\n'


def test_host_code_gets_a_device_code_only_hint_beside_nvrtcs_error() -> None:
    r = compile_kernel(HOST_PROGRAM)
    assert not r.ok
    messages = [d.message for d in r.diagnostics]
    assert any('cannot open source file "cstdio"' in m for m in messages), messages
    hint = next(m for m in messages if "device code only" in m)
    assert "#include <cstdio>" in hint and "main()" in hint
    assert "device code only" in r.summary() and "device code only" in r.log


def test_std_containers_get_the_hint_too() -> None:
    r = compile_kernel(STD_CONTAINER)
    assert not r.ok
    hint = next(d.message for d in r.diagnostics if "device code only" in d.message)
    assert "std::vector" in hint


def test_a_device_only_error_gets_no_host_code_hint() -> None:
    r = compile_kernel(UNDEFINED)
    assert not r.ok and not any("device code only" in d.message for d in r.diagnostics)


def test_a_kernel_without_extern_c_is_warned_of_its_mangled_name() -> None:
    r = compile_kernel(MANGLED)
    assert r.ok and "_Z1kPf" in r.entries
    (warning,) = [d for d in r.diagnostics if d.severity == "warning"]
    assert warning.line == 2 and "_Z1kPf" in warning.message and 'extern "C"' in warning.message
    assert "_Z1kPf" in compile_output(r, "argument").text()
    plain = compile_kernel(MANGLED.replace("__global__", 'extern "C" __global__'))
    assert plain.ok and not plain.diagnostics


def test_a_missing_entry_that_is_only_mangled_says_extern_c() -> None:
    settings = Settings.from_env()
    workload = find_workload("vector_add", settings)
    source = 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {}\n'
    compiled = compile_kernel(source.replace('extern "C" ', ""))
    message = check_entry(workload, compiled)
    assert message is not None and "mangled" in message and 'extern "C"' in message, message
    other = compile_kernel(source.replace("vector_add", "other"))
    assert "no kernel named 'vector_add'" in (check_entry(workload, other) or "")


def test_compile_errors_keep_the_source_line_and_caret() -> None:
    r = compile_kernel(UNDEFINED)
    (error,) = [d for d in r.diagnostics if d.severity == "error"]
    assert error.line == 2 and error.quote.splitlines()[0] == "    x[0] = y;"
    assert error.quote.splitlines()[1].strip() == "^"
    text = compile_output(r, "argument").text()
    assert "x[0] = y;" in text and "^" in text
    assert r.summary().splitlines()[1:] == error.quote.splitlines()
