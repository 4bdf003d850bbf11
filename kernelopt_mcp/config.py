"""Settings: built once at the entry point (flags > environment > defaults), passed down.

Library code never reads ``os.environ``; the CLI and the server call :meth:`Settings.from_env`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .compile_options import CompileLimits
from .errors import WorkloadError, did_you_mean

if TYPE_CHECKING:  # loading a workload needs pydantic and numpy; `kernelopt compile` needs neither
    from .workload import Workload


@dataclass(frozen=True)
class LaunchCounts:
    """How many times each performance case is launched: ``warmup`` untimed, then ``iterations`` timed."""

    warmup: int
    iterations: int


#: The launch counts wherever none are asked for (evaluating, benchmarking, baselines, the server's
#: settings, the command line's help): the one place they are written.
LAUNCH_DEFAULTS = LaunchCounts(warmup=10, iterations=100)

PACKAGE_DIR = Path(__file__).resolve().parent


def bundled_workloads_dir() -> Path:
    """The bundled workloads: inside the installed package, or the checkout's workloads/."""
    for candidate in (PACKAGE_DIR / "_workloads", PACKAGE_DIR.parent / "workloads"):
        if candidate.is_dir():
            return candidate
    return PACKAGE_DIR / "_workloads"


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def parse_devices(text: str) -> tuple[int, ...]:
    """``"0,1,3"`` -> (0, 1, 3): CUDA device ordinals, each once.

    Raises:
        ValueError: not a comma-separated list of distinct ordinals >= 0 (the message says so).
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"devices {text!r}: give CUDA device ordinals separated by commas, e.g. 0,1")
    ordinals = tuple(int(p) for p in parts)
    if len(set(ordinals)) != len(ordinals):
        raise ValueError(f"devices {text!r}: an ordinal is named twice")
    return ordinals


# KERNELOPT_* variables that set one field each, with the field's type
_ENV_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "KERNELOPT_HARNESS": ("harness", Path),
    "KERNELOPT_DEVICE": ("device", int),
    "KERNELOPT_DEVICES": ("devices", parse_devices),
    "KERNELOPT_ARCH": ("arch", str),
    "KERNELOPT_CACHE": ("cache_dir", Path),
    "KERNELOPT_TIMEOUT": ("timeout_s", float),
    "KERNELOPT_COMPILE_TIMEOUT": ("compile_timeout_s", float),
    "KERNELOPT_COMPILE_MEMORY_MB": ("compile_memory_mb", int),
    "KERNELOPT_COMPILE_TOTAL_MEMORY_MB": ("compile_total_memory_mb", int),
    "KERNELOPT_COMPILE_WORKERS": ("compile_max_workers", int),
    "KERNELOPT_COMPILE_LANDLOCK": ("compile_landlock", _flag),
    "KERNELOPT_UNCONFINED_COMPILER": ("unconfined_compiler", _flag),
    "KERNELOPT_COMPILE_CACHE_MB": ("compile_cache_mb", int),
    "KERNELOPT_TUNE_CACHE_MB": ("tune_cache_mb", int),
    "KERNELOPT_SANITIZER": ("sanitizer", Path),
    "KERNELOPT_NCU": ("ncu", Path),
    "KERNELOPT_PROFILE_TIMEOUT": ("profile_timeout_s", float),
    "KERNELOPT_DOCS_URL": ("docs_url", str),
    "KERNELOPT_DOCS_TTL": ("docs_ttl_s", float),
    "KERNELOPT_ALLOW_TORCH_PROBLEMS": ("allow_torch_problems", _flag),
    "KERNELOPT_FRESH_LAUNCHES": ("fresh_launches", int),
    "KERNELOPT_POISON_SUBSET": ("poison_subset", _flag),
    "KERNELOPT_DEVICE_INPUTS": ("device_inputs", _flag),
    "KERNELOPT_DEVICE_EXPECTED": ("device_expected", _flag),
}


@dataclass(frozen=True)
class Settings:
    harness: Path | None = None
    device: int = 0
    # the devices a server or a tuning run spreads its GPU jobs over (one harness each); None: every
    # visible device for those, ``device`` alone for single evaluations
    devices: tuple[int, ...] | None = None
    arch: str | None = None
    workload_dirs: tuple[Path, ...] = field(default_factory=lambda: (bundled_workloads_dir(),))
    cache_dir: Path | None = None
    timeout_s: float = 60.0
    warmup: int = LAUNCH_DEFAULTS.warmup
    iterations: int = LAUNCH_DEFAULTS.iterations
    flush_l2: bool = True
    # NVRTC runs in a worker process under these caps (a compile bomb becomes a compile error)
    compile_timeout_s: float = 60.0
    compile_memory_mb: int = 8192
    # ... and all compiles at once: the sum of their caps (0: min(physical memory / 2, 4 caps))
    # and the number of live workers
    compile_total_memory_mb: int = 0
    compile_max_workers: int = 8
    # NVRTC is confined with Landlock; where the kernel has none (or compile_landlock is False,
    # which acts as if it had none) compiles are refused unless unconfined_compiler accepts the risk
    compile_landlock: bool = True
    unconfined_compiler: bool = False
    # the caches' location (compile/, tune/, docs/, calibration/ below it; None: see cache_root)
    # and bounds: past compile_cache_mb the least recently used compiles are evicted, past
    # tune_cache_mb the oldest measured configurations
    compile_cache_mb: int = 1024
    tune_cache_mb: int = 256
    # compute-sanitizer for the sanitizer tier (else PATH, then CUDA_HOME/bin, /usr/local/cuda/bin)
    sanitizer: Path | None = None
    # the CUDA toolkit's root (CUDA_HOME, else CUDA_PATH): where the cuBLAS baseline looks for libcublas,
    # and NVRTC for a header family the wheels lack (cuda_headers.py)
    cuda_home: Path | None = None
    # Nsight Compute: the ncu binary (else PATH and the usual install directories) and its deadline
    ncu: Path | None = None
    profile_timeout_s: float = 600.0
    # documentation search: where the live NVIDIA docs are (tests point this at a local server),
    # how long a cached page is fresh, and whether to stay off the network entirely
    docs_url: str = "https://docs.nvidia.com/cuda/"
    docs_ttl_s: float = 7 * 24 * 3600.0
    docs_offline: bool = False
    # create_workload's torch_problem runs the client's Python (in a child process): trusted clients only
    allow_torch_problems: bool = False
    # redraw inputs before a hidden subset of this many measured launches (EvaluateOptions.fresh_launches)
    # instead of before every launch; KERNELOPT_FRESH_LAUNCHES=0: before every launch
    fresh_launches: int | None = 16
    # with fresh_launches, outputs poisoned before the redrawn and the checked launches only
    # (EvaluateOptions.poison_subset); KERNELOPT_POISON_SUBSET=0: before every launch
    poison_subset: bool = True
    # performance cases' inputs drawn on the device when the CUDA reference gives their expected
    # outputs (EvaluateOptions.device_inputs); KERNELOPT_DEVICE_INPUTS=0 makes every input on the host
    device_inputs: bool = True
    # ... and their expected outputs kept on the device (EvaluateOptions.device_expected);
    # KERNELOPT_DEVICE_EXPECTED=0 writes them to files (five mismatching elements in reports, not one)
    device_expected: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``KERNELOPT_*`` variables, then explicit overrides (non-None)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        # one cache location for the CLI and the server: KERNELOPT_CACHE, else the XDG cache directory
        xdg = env.get("XDG_CACHE_HOME", "")
        values["cache_dir"] = (Path(xdg) if Path(xdg).is_absolute() else Path.home() / ".cache") / "kernelopt"
        for var, (name, convert) in _ENV_FIELDS.items():
            if env.get(var):
                values[name] = convert(env[var])
        cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
        if cuda_home:
            values["cuda_home"] = Path(cuda_home)
        if env.get("KERNELOPT_WORKLOADS"):
            extra = tuple(Path(p) for p in env["KERNELOPT_WORKLOADS"].split(os.pathsep) if p)
            values["workload_dirs"] = (*extra, bundled_workloads_dir())
        if env.get("KERNELOPT_DOCS_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
            values["docs_offline"] = True
        values.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls(), **values)

    def compile_limits(self) -> CompileLimits:
        """The caps on NVRTC compiles (per compile and pool-wide) and how they are confined."""
        return CompileLimits(
            timeout_s=self.compile_timeout_s, memory_mb=self.compile_memory_mb,
            total_memory_mb=self.compile_total_memory_mb, max_workers=self.compile_max_workers,
            landlock=self.compile_landlock, accept_unconfined=self.unconfined_compiler, cuda_home=self.cuda_home,
        )

    def compile_cache_bytes(self) -> int:
        """The disk compile cache's bound in bytes (``compile_cache_mb``)."""
        return self.compile_cache_mb * 2**20

    def tune_cache_bytes(self) -> int:
        """The tuning cache's bound in bytes (``tune_cache_mb``)."""
        return self.tune_cache_mb * 2**20

    def cache_root(self) -> Path:
        """Where caches live: ``cache_dir`` (:meth:`from_env` sets it from KERNELOPT_CACHE, else
        ``$XDG_CACHE_HOME/kernelopt``, else ``~/.cache/kernelopt``), else ``~/.cache/kernelopt``."""
        return self.cache_dir if self.cache_dir is not None else Path.home() / ".cache" / "kernelopt"

    def as_json(self) -> dict[str, Any]:
        return {
            k: (str(v) if isinstance(v, Path) else [str(p) for p in v] if isinstance(v, tuple) else v)
            for k, v in self.__dict__.items()
        }


def list_workloads(settings: Settings) -> dict[str, Path]:
    """Workload name -> directory, over the configured directories (earlier ones win)."""
    found: dict[str, Path] = {}
    for root in settings.workload_dirs:
        if not root.is_dir():
            continue
        for spec in sorted(root.glob("*/workload.json")):
            found.setdefault(spec.parent.name, spec.parent)
    return found


def find_workload(name_or_path: str | Path, settings: Settings) -> Workload:
    """Load a workload by bundled/configured name, or from a directory or workload.json path.

    Raises:
        WorkloadError: unknown name (lists the known ones) or a malformed workload.
    """
    from .workload import load_workload

    path = Path(name_or_path)
    if path.exists():
        return load_workload(path)
    known = list_workloads(settings)
    if str(name_or_path) in known:
        return load_workload(known[str(name_or_path)])
    raise WorkloadError(
        f"no workload {str(name_or_path)!r}{did_you_mean(str(name_or_path), known)} (not a directory, not a known "
        f"name; known: {', '.join(sorted(known)) or 'none'}); see `kernelopt workloads`"
    )
