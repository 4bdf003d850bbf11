"""What a compile may be given, with no compiler behind it: the options a candidate may pass to
NVRTC (:func:`check_options`) and the caps on compiles (:class:`CompileLimits`).

Data, not machinery: the settings (``config.py``) and tunable specs (``tune/spec.py``) check and
hold these without importing the compiler; :mod:`kernelopt_mcp.compiler` and
:mod:`kernelopt_mcp.compile_pool` apply them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_MB = 8192
DEFAULT_MAX_WORKERS = 8

# Options a candidate may pass to NVRTC. Anything that links, relocates or includes files from
# arbitrary paths is refused; the target may only be narrowed to its arch-specific variant
# (-arch=sm_90a on an sm_90 target: wgmma, setmaxnreg, ...), which compile_kernel checks.
_ARCH_OPTION_RE = re.compile(r"(?:-arch|--gpu-architecture)=(sm_\d{2,3}a)")
_ALLOWED_OPTIONS = [
    _ARCH_OPTION_RE.pattern,
    r"-D[A-Za-z_]\w*(=[\w.+\-]*)?",
    r"--define-macro=[A-Za-z_]\w*(=[\w.+\-]*)?",
    r"-U[A-Za-z_]\w*",
    r"-std=c\+\+(11|14|17|20)",
    r"--std=c\+\+(11|14|17|20)",
    r"-?-use_fast_math",
    r"--ftz=(true|false)",
    r"--prec-div=(true|false)",
    r"--prec-sqrt=(true|false)",
    r"--fmad=(true|false)",
    r"-?-maxrregcount=\d{1,3}",
    r"-lineinfo",
    r"--generate-line-info",
    r"--extra-device-vectorization",
    r"-?-restrict",
    r"-w",
    r"--disable-warnings",
    r"--device-int128",
    r"-default-device",
    r"-Xptxas=-O[0-3]",
    r"-Xptxas=--warn-on-spills",
    r"-Xptxas=-dlcm=(ca|cg)",
    r"-Xptxas=--allow-expensive-optimizations=(true|false)",
]
_ALLOWED_RE = re.compile("|".join(f"(?:{p})" for p in _ALLOWED_OPTIONS))


class OptionError(ValueError):
    """A compile option is not in the whitelist."""


def check_options(options: list[str]) -> list[str]:
    """Return the options if every one is whitelisted.

    Raises:
        OptionError: naming the refused option and what is allowed.
    """
    for opt in options:
        if not isinstance(opt, str) or not _ALLOWED_RE.fullmatch(opt):
            raise OptionError(
                f"compile option {opt!r} is not allowed; allowed: -DNAME[=VALUE], -UNAME, "
                "-std=c++17/20, --use_fast_math, --ftz=, --prec-div=, --prec-sqrt=, --fmad=, "
                "--maxrregcount=N, -lineinfo, --extra-device-vectorization, --restrict, "
                "-Xptxas=-O0..3, -Xptxas=-dlcm=ca|cg, -arch=sm_90a (the GPU's arch-specific variant: "
                "wgmma, setmaxnreg; no other -arch, no -rdc, -I: the target is chosen for you)"
            )
    return options


def physical_memory_mb() -> int:
    """This machine's physical memory in MiB (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError, AttributeError):
        return 0


def default_budget_mb(memory_mb: int) -> int:
    """Pool-wide compile memory: min(physical / 2, 4 workers' caps), never below one worker's cap."""
    per_worker = memory_mb if memory_mb > 0 else DEFAULT_MEMORY_MB
    physical = physical_memory_mb()
    budget = min(physical // 2, 4 * per_worker) if physical else 4 * per_worker
    return max(budget, per_worker)


@dataclass(frozen=True)
class CompileLimits:
    """Caps on compiles.

    Per compile: wall time in seconds, the worker's address space in MiB (0: none). Pool-wide:
    ``total_memory_mb`` (0: :func:`default_budget_mb`) is the sum of the caps of compiles that
    may run at once, ``max_workers`` the number of live workers. Confinement: ``landlock``
    (False acts as if the kernel had none) and ``accept_unconfined`` (compile without
    confinement where there is none, with a warning, instead of refusing). Headers:
    ``cuda_home`` (``Settings.cuda_home``), a CUDA toolkit searched after the wheels for a header
    family they lack (:mod:`kernelopt_mcp.cuda_headers`).
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    total_memory_mb: int = 0
    max_workers: int = DEFAULT_MAX_WORKERS
    landlock: bool = True
    accept_unconfined: bool = False
    cuda_home: Path | None = None

    def budget_mb(self) -> int:
        return self.total_memory_mb if self.total_memory_mb > 0 else default_budget_mb(self.memory_mb)
