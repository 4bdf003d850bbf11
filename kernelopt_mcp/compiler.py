"""Compiling CUDA C++ with NVRTC (through cuda-python): source -> CUBIN + PTX.

Compiling needs no GPU. The CUBIN is built for a real architecture (``sm_90``), so the
driver loads it without JIT; the PTX is kept for inspection and for checking the entry
point's parameters against the workload's signature before anything is launched.
Results are cached by the hash of (source, options, arch, NVRTC version).

NVRTC runs in a confined worker (:mod:`compile_pool`, :mod:`sandbox`); what it reports back is
filtered too: a compile log quotes only the candidate's own source lines
(:func:`kernelopt_mcp.compile_log.quote_own_lines`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field

from .compile_log import (
    Diagnostic,
    PtxParam,
    Resources,
    host_code_hint,
    mangled_entry_warnings,
    parse_diagnostics,
    parse_ptx_entries,
    parse_resources,
    quote_own_lines,
    truncate_log,
)
from .compile_options import _ARCH_OPTION_RE, CompileLimits, check_options
from .compile_pool import CompileFailure, Toolchain, default_pool
from .cuda_headers import HeaderDirs, find_header_dirs
from .errors import ToolchainNotFound
from .source_policy import MAX_SOURCE_BYTES, include_problem

DEFAULT_CACHE_MB = 1024  # the disk compile cache's total size
DEFAULT_CACHE_ENTRY_MB = 4  # larger entries are stored without their PTX, or not at all
STALE_TEMP_S = 3600.0  # a cache temporary file this old belongs to no live writer



class CompileStatus(StrEnum):
    ok = "ok"
    error = "error"


class CompileResult(BaseModel):
    status: CompileStatus
    arch: str
    source_hash: str
    options: list[str]
    nvrtc_version: str
    duration_ms: float
    cache_hit: bool = False
    confinement: str = Field(
        "", description="how NVRTC was confined: 'landlock abi N', or 'unconfined (accepted)' by the user's choice"
    )
    log: str = Field("", description="compiler log (truncated)")
    log_lines_omitted: int = 0
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    resources: dict[str, Resources] = Field(
        default_factory=dict, description="per kernel (entry) name"
    )
    entries: dict[str, list[PtxParam]] = Field(
        default_factory=dict, description="kernels in the module and their parameter sizes"
    )
    cubin: bytes | None = Field(None, exclude=True)
    ptx: str | None = Field(None, exclude=True)

    @property
    def ok(self) -> bool:
        return self.status is CompileStatus.ok

    def summary(self) -> str:
        if not self.ok:
            errors = [d for d in self.diagnostics if d.severity == "error"]
            first = errors[0] if errors else None
            where = f"line {first.line}: " if first and first.line else ""
            quote = f"\n{first.quote}" if first and first.quote else ""
            return f"compile error: {where}{first.message if first else self.log.strip()[:300]}{quote}"
        parts = []
        for name, r in self.resources.items():
            parts.append(
                f"{name}: {r.registers} registers, {r.shared_bytes} B shared, "
                f"{r.spill_store_bytes} B spill stores, {r.stack_frame_bytes} B stack"
            )
        return "compiled; " + "; ".join(parts) if parts else "compiled"


_ARCH_RE = re.compile(r"sm_(\d{1,2})(\d)([a-z]?)")
_UNSUPPORTED_RE = re.compile(r"(?P<what>Instruction '[^']+'|Feature '[^']+') (?:not supported on|requires) \.target "
                             r"'?(?P<arch>sm_\d+)'?")


def base_arch(arch: str) -> str:
    """``arch`` without its variant letter: sm_90a -> sm_90."""
    m = _ARCH_RE.fullmatch(arch)
    return f"sm_{m[1]}{m[2]}" if m else arch


def _capability(arch: str) -> str:
    m = _ARCH_RE.fullmatch(arch)
    return f"{m[1]}.{m[2]}" if m else arch


def _major(arch: str) -> int:
    m = _ARCH_RE.fullmatch(arch)
    return int(m[1]) if m else 0


def arch_problem(arch: str, device_arch: str) -> str | None:
    """Why code compiled for ``arch`` cannot be loaded on a ``device_arch`` GPU, for an
    arch-specific target (sm_90a runs on compute capability 9.0 only); None where it can."""
    if arch == device_arch or not arch.endswith("a") or base_arch(arch) == base_arch(device_arch):
        return None
    return (
        f"{arch} is an arch-specific target: its code (wgmma, setmaxnreg, ...) runs only on GPUs of compute "
        f"capability {_capability(arch)}, and this GPU is {device_arch}; compile for {device_arch} "
        f"(drop -arch={arch} / --arch {arch})"
    )


def _target(arch: str, options: list[str]) -> tuple[str, list[str], str | None]:
    """(the target NVRTC compiles for, the options it gets besides, why the options' -arch is
    refused): ``-arch=sm_90a`` narrows an sm_90 target to its arch-specific variant."""
    asked = {m[1] for o in options if (m := _ARCH_OPTION_RE.fullmatch(o))}
    rest = [o for o in options if not _ARCH_OPTION_RE.fullmatch(o)]
    if not asked:
        return arch, rest, None
    if len(asked) > 1:
        return arch, rest, f"compile options name {len(asked)} targets ({', '.join(sorted(asked))}): give one -arch"
    (variant,) = asked
    if base_arch(variant) != base_arch(arch):
        own = f", or use -arch={base_arch(arch)}a, its own" if _major(arch) >= 9 else ""
        return arch, rest, (
            f"-arch={variant} selects the arch-specific variant of {base_arch(variant)}, whose code runs only on "
            f"compute capability {_capability(variant)} GPUs; this compile targets {arch}: drop the option{own}"
        )
    return variant, rest, None


def _hints(log: str, target: str, headers: HeaderDirs, source: str) -> list[str]:
    """What to do about a failed compile's log, where the log alone does not say."""
    hints = []
    if (host := host_code_hint(log, source)) is not None:
        hints.append(host)
    m = _UNSUPPORTED_RE.search(log)
    if m and not target.endswith("a") and _major(target) >= 9:  # arch-specific variants: Hopper on
        hints.append(
            f"{m['what']} is not supported on {m['arch']}: it needs the arch-specific target {base_arch(target)}a; "
            f"add the compile option -arch={base_arch(target)}a (that code runs only on compute capability "
            f"{_capability(target)} GPUs)"
        )
    if "cannot open source file" in log and headers.missing:
        hints.append(headers.missing_hint())
    return hints


@dataclass(frozen=True)
class _Nvrtc:
    version: str
    include_dirs: tuple[str, ...]  # the default header directories (wheels, then /usr/local/cuda)
    toolchain: Toolchain  # a worker's, reading include_dirs

    def toolchain_for(self, headers: HeaderDirs) -> Toolchain:
        """A worker's toolchain that may read ``headers`` (and only those besides NVRTC's files)."""
        return dataclasses.replace(self.toolchain, read_dirs=headers.dirs)


_nvrtc_lock = threading.Lock()
_nvrtc: _Nvrtc | None = None


def _load_nvrtc() -> _Nvrtc:
    """What compiling needs in this process: NVRTC's version (the cache key) and where a worker
    finds it. Compiles run in the workers; this process loads the library only to ask its version."""
    global _nvrtc
    with _nvrtc_lock:
        if _nvrtc is not None:
            return _nvrtc
        try:
            import cuda.bindings  # noqa: F401  (the workers compile through its nvrtc module)
        except ImportError as exc:
            raise ToolchainNotFound(
                f"cuda-python is not installed ({exc}); install it with "
                "`pip install 'cuda-bindings>=13,<14' 'nvidia-cuda-nvrtc>=13.0,<13.1'`"
            ) from None
        python_path, lib = _worker_paths()
        try:
            version = _library_version(lib) if lib else _bindings_version()
        except Exception as exc:  # the shared library itself failed to load
            raise ToolchainNotFound(
                f"NVRTC could not be loaded ({exc}); install it with "
                "`pip install 'nvidia-cuda-nvrtc>=13.0,<13.1'` or install the CUDA toolkit"
            ) from None
        # headers are optional: kernels without #include compile without any
        include_dirs = find_header_dirs().dirs
        toolchain = Toolchain(read_dirs=include_dirs, nvrtc_lib=lib, python_path=python_path)
        _nvrtc = _Nvrtc(version, include_dirs, toolchain)
        return _nvrtc


def _worker_paths() -> tuple[tuple[str, ...], str | None]:
    """What a compile worker, started with an empty environment, needs to find NVRTC: the
    directories holding cuda-python, and the library cuda.pathfinder finds (None with an older
    cuda-python: the worker searches the default places itself)."""
    import cuda.bindings

    python_path = [str(Path(cuda.bindings.__file__).resolve().parents[2])]
    lib = None
    try:
        import cuda.pathfinder as pathfinder

        python_path.append(str(Path(pathfinder.__file__).resolve().parents[2]))
        lib = pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path
    except Exception:
        pass
    return tuple(dict.fromkeys(python_path)), lib


def _library_version(lib: str) -> str:
    """``nvrtcVersion`` of the library at ``lib``, called through ctypes: the one call this process
    makes, without importing cuda.bindings.nvrtc (and the driver bindings it loads) at start-up."""
    import ctypes

    major, minor = ctypes.c_int(), ctypes.c_int()
    status = ctypes.CDLL(lib).nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    if status != 0:
        raise RuntimeError(f"nvrtcVersion returned {status}")
    return f"{major.value}.{minor.value}"


def _bindings_version() -> str:
    from cuda.bindings import nvrtc

    _err, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def nvrtc_version() -> str:
    return _load_nvrtc().version


class CompileCache:
    """Compile results by key: an in-memory LRU, optionally backed by a bounded directory.

    On disk an entry is ``<key>.cubin``, an optional ``<key>.ptx`` and ``<key>.json``, written
    last (the entry exists once it does), each with ``inputs.write_atomic``: concurrent writers
    of one entry (threads or processes) each rename a whole file into place. The directory holds
    at most ``max_bytes``: when a put passes that, the least recently used entries (by the mtime
    of their ``.json``, touched on every hit) are removed until it holds three quarters of it.
    An entry above ``max_entry_bytes`` is kept without its PTX (a hit then has ``ptx=None``),
    or not kept at all when its CUBIN alone is too large; the in-memory LRU keeps at most
    ``capacity`` entries and ``max_memory_bytes`` of CUBIN and PTX.
    """

    def __init__(
        self,
        directory: Path | None = None,
        capacity: int = 256,
        *,
        max_bytes: int = DEFAULT_CACHE_MB * 2**20,
        max_entry_bytes: int = DEFAULT_CACHE_ENTRY_MB * 2**20,
        max_memory_bytes: int = 256 * 2**20,
    ) -> None:
        self.directory = directory
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.max_memory_bytes = max_memory_bytes
        self._items: OrderedDict[str, CompileResult] = OrderedDict()
        self._memory_bytes = 0
        self._disk_bytes: int | None = None  # what this process believes the directory holds
        self._lock = threading.Lock()
        self.evicted = 0  # entries removed from disk so far (tests read it)

    def get(self, key: str) -> CompileResult | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
        if found is not None:
            self._touch(key)
            return found
        if self.directory is None:
            return None
        meta, cubin = self.directory / f"{key}.json", self.directory / f"{key}.cubin"
        try:
            result = CompileResult.model_validate_json(meta.read_bytes())
            result.cubin = cubin.read_bytes()
            ptx = self.directory / f"{key}.ptx"
            result.ptx = ptx.read_text() if ptx.exists() else None
        except (OSError, ValueError):  # absent, evicted meanwhile, or half of an old entry
            return None
        self._touch(key)
        self._remember(key, result)
        return result

    def put(self, key: str, result: CompileResult) -> None:
        self._remember(key, result)
        if self.directory is None or not result.ok or result.cubin is None:
            return
        from .files import write_atomic

        meta = result.model_dump_json().encode()
        ptx = result.ptx.encode() if result.ptx is not None else None
        if len(result.cubin) + len(meta) > self.max_entry_bytes:
            return  # too large to keep: compiled again when asked again
        if ptx is not None and len(result.cubin) + len(meta) + len(ptx) > self.max_entry_bytes:
            ptx = None  # keep what the harness loads; the PTX is only for reading
        files = ([(f"{key}.cubin", result.cubin)] + ([(f"{key}.ptx", ptx)] if ptx is not None else [])
                 + [(f"{key}.json", meta)])
        for name, data in files:
            write_atomic(self.directory / name, data, durable=False)
        written = sum(len(data) for _, data in files)
        with self._lock:
            if self._disk_bytes is None:
                self._disk_bytes = self._scan_bytes()
            else:
                self._disk_bytes += written
            over = self._disk_bytes > self.max_bytes
        if over:
            self.evict()

    def evict(self) -> None:
        """Remove least recently used entries until the directory holds 3/4 of ``max_bytes``."""
        if self.directory is None:
            return
        entries: dict[str, list[tuple[Path, int, float]]] = {}
        for path, size, mtime in self._files():
            entries.setdefault(path.name.split(".", 1)[0], []).append((path, size, mtime))
        total = sum(size for files in entries.values() for _, size, _ in files)

        def last_used(key: str) -> float:
            files = entries[key]
            metas = [mtime for p, _, mtime in files if p.suffix == ".json"]
            return max(metas) if metas else min(mtime for _, _, mtime in files)

        target = self.max_bytes * 3 // 4
        for key in sorted(entries, key=last_used):
            if total <= target:
                break
            # the json first: a reader sees the entry gone, not half of it
            for path, size, _ in sorted(entries[key], key=lambda f: f[0].suffix != ".json"):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass  # another process evicted it
                total -= size
            self.evicted += 1
        with self._lock:
            self._disk_bytes = total

    def _files(self) -> list[tuple[Path, int, float]]:
        assert self.directory is not None
        out = []
        try:
            with os.scandir(self.directory) as it:
                for entry in it:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if entry.name.startswith("."):  # inputs.write_atomic's temporary file
                        if time.time() - st.st_mtime > STALE_TEMP_S:  # left by a writer that died
                            with contextlib.suppress(OSError):
                                os.unlink(entry.path)
                        continue  # else a write in flight
                    out.append((Path(entry.path), st.st_size, st.st_mtime))
        except FileNotFoundError:
            pass
        return out

    def _scan_bytes(self) -> int:
        return sum(size for _, size, _ in self._files())

    def _touch(self, key: str) -> None:
        if self.directory is not None:
            try:
                os.utime(self.directory / f"{key}.json")
            except OSError:
                pass  # not on disk (too large, or evicted): nothing to keep fresh

    def _remember(self, key: str, result: CompileResult) -> None:
        size = len(result.cubin or b"") + len(result.ptx or "")
        if size > self.max_entry_bytes:
            result = result.model_copy(update={"ptx": None})
            size = len(result.cubin or b"")
        with self._lock:
            if key in self._items:
                old = self._items.pop(key)
                self._memory_bytes -= len(old.cubin or b"") + len(old.ptx or "")
            self._items[key] = result
            self._memory_bytes += size
            while len(self._items) > self.capacity or (self._memory_bytes > self.max_memory_bytes
                                                       and len(self._items) > 1):
                _, old = self._items.popitem(last=False)
                self._memory_bytes -= len(old.cubin or b"") + len(old.ptx or "")


_default_cache = CompileCache()


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _lookup(
    source: str, arch: str, options: list[str] | None, filename: str, limits: CompileLimits | None,
    headers: HeaderDirs | None,
) -> tuple[list[str], _Nvrtc, CompileLimits, HeaderDirs, str]:
    """A compile's checked options, NVRTC, limits, header directories and cache key."""
    options = check_options(list(options or []))
    if not _ARCH_RE.fullmatch(arch):
        raise ValueError(f"arch {arch!r} is not of the form sm_90 / sm_90a")
    encoded = source.encode()
    if len(encoded) > MAX_SOURCE_BYTES:
        raise ValueError(f"source is {len(encoded)} bytes; the limit is {MAX_SOURCE_BYTES}")
    nv = _load_nvrtc()
    limits = limits or CompileLimits()
    headers = headers if headers is not None else find_header_dirs(limits.cuda_home)
    target, _, _ = _target(arch, options)
    key = hashlib.sha256(
        json.dumps([source, options, target, nv.version, filename, headers.dirs]).encode()
    ).hexdigest()
    return options, nv, limits, headers, key


def cached_compile(
    source: str,
    arch: str = "sm_90",
    options: list[str] | None = None,
    *,
    filename: str = "kernel.cu",
    cache: CompileCache | None = None,
    limits: CompileLimits | None = None,
    headers: HeaderDirs | None = None,
) -> CompileResult | None:
    """What :func:`compile_kernel` would return from the cache, without compiling (None: not
    cached). Cheap: a server answers a repeated compile at once instead of queueing it behind
    running ones. Raises as :func:`compile_kernel` does for bad options, arch or size."""
    *_, key = _lookup(source, arch, options, filename, limits, headers)
    cached = (cache or _default_cache).get(key)
    return cached.model_copy(update={"cache_hit": True}) if cached is not None else None


def compile_kernel(
    source: str,
    arch: str = "sm_90",
    options: list[str] | None = None,
    *,
    filename: str = "kernel.cu",
    cache: CompileCache | None = None,
    limits: CompileLimits | None = None,
    headers: HeaderDirs | None = None,
) -> CompileResult:
    """Compile ``source`` for ``arch`` with NVRTC, in a capped worker process.

    A compile error is a result with ``status=error`` and diagnostics (with line numbers); so
    is a compile that exceeds ``limits`` (default ``CompileLimits()``, or the settings' at the entry points: 60 s,
    8 GiB of address space), with a message saying which limit. Exceptions are only for a
    missing toolchain or a refused option.

    An option ``-arch=sm_90a`` narrows an ``sm_90`` target to its arch-specific variant (the
    result's ``arch`` says sm_90a); naming any other GPU's is a compile error. ``headers`` are the
    CUDA header directories NVRTC may read (default: :func:`cuda_headers.find_header_dirs` for
    ``limits.cuda_home``: the wheels, then that toolkit, then /usr/local/cuda).

    NVRTC runs confined (see :mod:`compile_pool`); ``result.confinement`` says how.

    Raises:
        ToolchainNotFound: NVRTC cannot be loaded, or the worker cannot start or confine itself.
        UnconfinedCompilerRefused: (a ToolchainNotFound) the kernel has no Landlock and ``limits``
            do not accept an unconfined compiler.
        OptionError: an option is not whitelisted.
        ValueError: the source is too large or the arch is malformed.
    """
    options, nv, limits, headers, key = _lookup(source, arch, options, filename, limits, headers)
    target, nvrtc_options, refused_arch = _target(arch, options)
    cache = cache or _default_cache
    cached = cache.get(key)
    if cached is not None:
        return cached.model_copy(update={"cache_hit": True})

    def refused(line: int | None, message: str, duration_ms: float = 0.0) -> CompileResult:
        where = f"{filename}({line}): error: " if line else ""
        return CompileResult(
            status=CompileStatus.error, arch=target, source_hash=source_hash(source), options=options,
            nvrtc_version=nv.version, duration_ms=duration_ms, log=f"{where}{message}",
            diagnostics=[Diagnostic(line=line, severity="error", message=message)],
        )

    # refused before NVRTC reads anything; not cached (cheap to find again)
    if refused_arch is not None:
        return refused(None, refused_arch)
    include = include_problem(source)
    if include is not None:
        return refused(*include)
    full_options = [
        f"--gpu-architecture={target}",
        "-std=c++17",
        "-lineinfo",
        "-Xptxas=-v",
        *(f"-I{d}" for d in headers.dirs),
        *nvrtc_options,
    ]
    # a later -std wins in NVRTC, so a candidate's own -std overrides the default
    try:
        out = default_pool().compile(source, filename, full_options, limits, nv.toolchain_for(headers))
    except CompileFailure as exc:
        # not cached: the same source may compile under a larger limit
        return refused(None, str(exc), round(limits.timeout_s * 1000, 3))
    ok, cubin, ptx, duration_ms = out.ok, out.cubin, out.ptx, out.duration_ms
    log = quote_own_lines(out.log, source, filename, headers.dirs)
    diagnostics = parse_diagnostics(log, filename)
    if not ok:
        for hint in _hints(log, target, headers, source):
            log = f"{hint}\n{log}"
            diagnostics.insert(0, Diagnostic(line=None, severity="error", message=hint))
    if not ok and "out of memory" in out.log:  # the raw log: the filter may withhold where it was said
        oom = (
            f"compile exceeded the {limits.memory_mb} MiB memory limit: a huge unrolled template or "
            "recursion; reduce unrolling"
        )
        log = f"{oom}\n{log}"
        diagnostics.insert(0, Diagnostic(line=None, severity="error", message=oom))
        cache = CompileCache()  # a throwaway: a larger limit may compile it, so it is not remembered
    entries = parse_ptx_entries(ptx) if ptx else {}
    diagnostics += mangled_entry_warnings(entries, source)
    log_text, omitted = truncate_log(log)
    result = CompileResult(
        status=CompileStatus.ok if ok else CompileStatus.error,
        arch=target,
        source_hash=source_hash(source),
        options=options,
        nvrtc_version=nv.version,
        duration_ms=round(duration_ms, 3),
        log=log_text,
        log_lines_omitted=omitted,
        diagnostics=diagnostics,
        resources=parse_resources(log),
        entries=entries,
        cubin=cubin,
        ptx=ptx,
        confinement=out.confinement,
    )
    cache.put(key, result)
    return result
