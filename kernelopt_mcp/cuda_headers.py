"""Where the CUDA headers a kernel ``#include``\\ s come from: the NVIDIA wheels first, a toolkit after.

NVRTC gets ``-I`` for every directory found here, and the confined compile worker may read only
these directories (:func:`kernelopt_mcp.sandbox.restrict`). The headers come in three families,
each a directory holding a marker file:

======  ===============  ===================================================================
family  marker           what it brings, and the wheel it ships in (CUDA 13)
======  ===============  ===================================================================
cudart  cuda_runtime.h   cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, mma.h, cuda_pipeline.h,
                         cooperative_groups.h and cooperative_groups/*: nvidia-cuda-runtime
crt     crt/mma.h        crt/*, which mma.h and others include: nvidia-cuda-crt (not in the
                         runtime wheel since CUDA 13)
cccl    cuda/std/version cuda/std/*, cuda/pipeline, cuda/barrier, cuda/ptx, nv/target (which
                         cooperative_groups includes): nvidia-cuda-cccl
======  ===============  ===================================================================

Each family is taken from the first root that has it: the wheels (``nvidia/cu13/include`` of
every directory the ``nvidia`` namespace package spans), then the toolkit at ``cuda_home``
(``Settings.cuda_home``: CUDA_HOME, else CUDA_PATH, read at the entry point), then
``/usr/local/cuda``. The wheels come first: they are the versions ``pyproject.toml`` installs with
NVRTC; a toolkit only fills in a family they lack.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

SYSTEM_TOOLKITS = (Path("/usr/local/cuda"),)
WHEEL_INCLUDE = ("cu13", "include")  # under the nvidia namespace package

# (family, marker file, directories below an include root that may hold it, the wheel it ships in)
FAMILIES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("cudart", "cuda_runtime.h", ("",), "nvidia-cuda-runtime"),
    ("crt", "crt/mma.h", ("",), "nvidia-cuda-crt"),
    ("cccl", "cuda/std/version", ("cccl", ""), "nvidia-cuda-cccl"),
)


@dataclass(frozen=True)
class HeaderDirs:
    """The header directories found: ``dirs`` in ``-I`` order, ``found`` each family's
    directory, ``missing`` the families none of the roots has."""

    dirs: tuple[str, ...] = ()
    found: tuple[tuple[str, str], ...] = ()
    missing: tuple[str, ...] = ()

    def missing_hint(self) -> str:
        """What to install for the missing families ('' when none is missing)."""
        wheels = [f"'{wheel}>=13.0,<14'" for family, _, _, wheel in FAMILIES if family in self.missing]
        if not wheels:
            return ""
        return (
            f"the CUDA headers of {', '.join(self.missing)} were not found: install them with "
            f"`pip install {' '.join(wheels)}` (dependencies of kernelopt), or set CUDA_HOME to a CUDA 13 toolkit"
        )


def search_header_dirs(include_roots: tuple[Path, ...]) -> HeaderDirs:
    """Each family's directory: the first of ``include_roots`` (``.../include`` directories, in
    order of preference) that holds its marker."""
    found: list[tuple[str, str]] = []
    missing: list[str] = []
    for family, marker, subdirs, _ in FAMILIES:
        hit = next(
            (root / sub for root in include_roots for sub in subdirs if (root / sub / marker).is_file()), None
        )
        if hit is None:
            missing.append(family)
        else:
            found.append((family, str(hit.resolve())))
    return HeaderDirs(tuple(dict.fromkeys(d for _, d in found)), tuple(found), tuple(missing))


def wheel_include_roots() -> tuple[Path, ...]:
    """``nvidia/cu13/include`` of every directory the installed ``nvidia`` namespace package spans."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return ()
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return tuple(Path(loc).joinpath(*WHEEL_INCLUDE) for loc in locations if Path(loc).joinpath(*WHEEL_INCLUDE).is_dir())


@functools.cache
def find_header_dirs(cuda_home: Path | None = None, *, wheels: bool = True, system: bool = True) -> HeaderDirs:
    """The header directories for NVRTC: the wheels' (``wheels``), then ``cuda_home``'s, then
    ``/usr/local/cuda``'s (``system``). Looked up once per argument set."""
    roots: list[Path] = list(wheel_include_roots()) if wheels else []
    toolkits = ([cuda_home] if cuda_home is not None else []) + (list(SYSTEM_TOOLKITS) if system else [])
    roots += [home / "include" for home in toolkits]
    return search_header_dirs(tuple(dict.fromkeys(roots)))
