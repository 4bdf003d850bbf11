"""The harness's own device code: comparison, blocking and timing kernels.

Every ``support/*.cu`` file is concatenated in file-name order and compiled once per arch with
NVRTC (the same compile path as candidates); the harness loads the CUBIN when a request names
it as ``support_module`` and looks its ``extern "C"`` kernels up by name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
from pathlib import Path

from ..compile_options import CompileLimits
from ..compiler import CompileCache, compile_kernel
from ..errors import KerneloptError
from ..files import write_atomic

# kernelopt_mcp/support/*.cu (native_harness and PROTOCOL.md name them there)
SUPPORT_DIR = Path(__file__).resolve().parents[1] / "support"


def support_source() -> str:
    """The concatenated source of every support kernel file."""
    parts = [f'// ---- {p.name}\n{p.read_text()}' for p in sorted(SUPPORT_DIR.glob("*.cu"))]
    if not parts:
        raise KerneloptError(f"no support kernels found in {SUPPORT_DIR}; the installation is incomplete")
    return "\n".join(parts)


def support_module(
    arch: str, cache_dir: Path | None = None, *, limits: CompileLimits | None = None, cache: CompileCache | None = None
) -> Path:
    """Compile the support kernels for ``arch`` (cached by source hash) and return the CUBIN path.

    ``limits`` (default: :class:`CompileLimits`' defaults) says how NVRTC is confined; the
    memory cap is lifted and the deadline raised to at least 300 s, as the tool's own source.
    ``cache`` (the settings' disk compile cache, keyed by source, options, arch and NVRTC
    version) keeps the CUBIN across sessions and processes: a new session's ``cache_dir`` (its
    own temporary directory) is then filled from it instead of by a cold compile of seconds.

    Raises:
        KerneloptError: the support kernels do not compile (a bug in kernelopt: report it).
        ToolchainNotFound: NVRTC cannot be loaded.
    """
    source = support_source()
    digest = hashlib.sha256(f"{arch}\n{source}".encode()).hexdigest()[:20]
    directory = cache_dir or Path(tempfile.gettempdir()) / "kernelopt-support"
    path = directory / f"support-{arch}-{digest}.cubin"
    if path.is_file():
        return path
    # The tool's own source, not a candidate's: no memory cap, and a longer deadline for its ~40
    # kernels on a loaded machine.
    base = limits or CompileLimits()
    own = dataclasses.replace(base, memory_mb=0, timeout_s=max(base.timeout_s, 300.0))
    result = compile_kernel(source, arch, ["-std=c++17"], filename="kernelopt_support.cu", cache=cache, limits=own)
    if not result.ok or not result.cubin:
        raise KerneloptError(f"the harness's support kernels do not compile for {arch}: {result.summary()}")
    write_atomic(path, result.cubin, durable=False)
    return path
