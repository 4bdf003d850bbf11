"""A candidate made ready for the harness in one step (:func:`build`): compiled for the target
arch, its entry point checked against the workload's signature, its module written, and its
launch resolved for each case on the device (:class:`Built`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..compile_log import plain_name
from ..compile_options import CompileLimits
from ..compiler import CompileCache, CompileResult, arch_problem, compile_kernel
from ..errors import LaunchConfigError
from ..files import write_atomic
from ..launch import DeviceLimits, ResolvedLaunch, resolve
from ..workload import BufferParam, Case, Workload
from .candidate import Candidate
from .tensor_maps import FEATURE as TENSOR_MAPS
from .tensor_maps import TENSOR_MAP_BYTES, check_tensor_maps

__all__ = ["Built", "build", "check_entry", "resolve_launch"]


@dataclass(frozen=True)
class Built:
    """A candidate built for a session.

    Attributes:
        compiled: the compile result (its log, resources and hash, whether or not it runs).
        module: the CUBIN the harness loads (None: the candidate cannot run; ``problem`` says why).
        problem: why it cannot run: the compiler's summary, a wrong arch or an entry point that
            does not match the signature.
        launches: the launch of every case asked for whose launch is valid on the device.
        invalid: the others: case -> why its launch is invalid (shape, limits, shared memory).
    """

    compiled: CompileResult
    module: Path | None
    problem: str | None = None
    launches: Mapping[str, ResolvedLaunch] = field(default_factory=dict)
    invalid: Mapping[str, str] = field(default_factory=dict)


def build(
    candidate: Candidate, cases: Sequence[Case], workload: Workload, *, arch: str, device_arch: str | None,
    limits: DeviceLimits, modules: Path, encodes_maps: bool, cache: CompileCache | None = None,
    compile_limits: CompileLimits | None = None,
) -> Built:
    """Compile ``candidate`` for ``arch``, check its entry point, write its module under
    ``modules`` (named by the source hash, options and arch, so a rebuild finds it) and resolve
    its launch for each of ``cases`` on a device of ``device_arch`` (None: none to check against)
    with ``limits``. ``encodes_maps``: whether the harness can encode tensor maps."""
    compiled = compile_kernel(candidate.source, arch, candidate.all_compile_options, cache=cache, limits=compile_limits)
    if not compiled.ok:
        return Built(compiled, None, compiled.summary())
    configs = [c for c in (candidate.launch.default, *candidate.launch.cases.values()) if c is not None]
    maps = frozenset(len(c.tensor_maps) for c in configs) or frozenset({0})
    problem = ((arch_problem(compiled.arch, device_arch) if device_arch is not None else None)
               or check_entry(workload, compiled, maps))
    if problem:
        return Built(compiled, None, problem)
    key = hashlib.sha256(json.dumps([compiled.source_hash, compiled.options, compiled.arch]).encode())
    module = modules / f"{key.hexdigest()[:24]}.cubin"
    if not module.exists():
        write_atomic(module, compiled.cubin or b"", durable=False)
    launches: dict[str, ResolvedLaunch] = {}
    invalid: dict[str, str] = {}
    for case in cases:
        try:
            launches[case.name] = resolve_launch(candidate, compiled, case, workload, limits, encodes_maps=encodes_maps)
        except LaunchConfigError as exc:
            invalid[case.name] = str(exc)
    return Built(compiled, module, None, launches, invalid)


def check_entry(workload: Workload, compiled: CompileResult, maps: frozenset[int] = frozenset({0})) -> str | None:
    """Why the module's entry point does not match the workload's signature followed by one
    CUtensorMap per tensor map of the launch (``maps``: how many the launch's configurations
    pass) (None: it does)."""
    sig = workload.signature
    if sig.entry not in compiled.entries:
        mangled = [e for e in compiled.entries if plain_name(e) == sig.entry]
        if mangled:
            return (
                f"kernel {sig.entry!r} is in the module only under its C++ mangled name {mangled[0]!r}, so "
                f"it is not found by its name; declare it as {sig.c_prototype()}"
            )
        found = ", ".join(compiled.entries) or "none"
        return (
            f"no kernel named {sig.entry!r} in the module (kernels found: {found}); declare it "
            f"as {sig.c_prototype()}"
        )
    params = compiled.entries[sig.entry]
    if len(params) - len(sig.params) not in maps:
        passed = " or ".join(str(n) for n in sorted(maps))
        return (
            f"kernel {sig.entry!r} takes {len(params)} parameters but the signature has "
            f"{len(sig.params)}: {sig.c_prototype()}" + (
                f", then the launch passes {passed} tensor map(s), each a `const __grid_constant__ "
                "CUtensorMap` parameter" if maps != {0} else ""
            )
        )
    for ptx, p in zip(params, sig.params, strict=False):
        want = 8 if isinstance(p, BufferParam) else p.dtype.itemsize
        if ptx.size_bytes and ptx.size_bytes != want:
            return (
                f"parameter {p.name!r} is {ptx.size_bytes} bytes in the kernel but {want} in the "
                f"signature: {sig.c_prototype()}"
            )
    for j, ptx in enumerate(params[len(sig.params):]):
        if ptx.size_bytes and ptx.size_bytes != TENSOR_MAP_BYTES:
            return (
                f"parameter {len(sig.params) + j} (tensor map {j}) is {ptx.size_bytes} bytes in the kernel; "
                f"a tensor map is a {TENSOR_MAP_BYTES}-byte `const __grid_constant__ CUtensorMap` passed by value"
            )
    return None


def resolve_launch(
    candidate: Candidate, compiled: CompileResult, case: Case, workload: Workload, limits: DeviceLimits, *,
    encodes_maps: bool = True,
) -> ResolvedLaunch:
    """The candidate's launch for ``case`` on a device with ``limits``: the case's scalars and
    the candidate's numeric parameters substituted into its launch expressions.

    Raises:
        LaunchConfigError: the launch is invalid (shape, limits, shared memory, tensor maps).
    """
    scalars = {**case.scalars, **{k: v for k, v in candidate.params.items() if not isinstance(v, str)}}
    launch = resolve(candidate.launch.for_case(case.name), scalars, limits, case.name)
    if launch.tensor_maps:
        _check_maps(launch, compiled, case, workload, encodes_maps)
    static_shared = sum((r.shared_bytes or 0) for r in compiled.resources.values())
    if launch.shared_bytes + static_shared > limits.max_shared_bytes_per_block_optin:
        raise LaunchConfigError(
            f"case {case.name!r}: {launch.shared_bytes} B dynamic + {static_shared} B "
            f"static shared memory exceeds the device's "
            f"{limits.max_shared_bytes_per_block_optin} B per block"
        )
    return launch


def _check_maps(launch: ResolvedLaunch, compiled: CompileResult, case: Case, workload: Workload, encodes: bool) -> None:
    """The launch's tensor maps: a harness that encodes them, one kernel parameter each, and
    each within its buffer (:func:`~.tensor_maps.check_tensor_maps`)."""
    if not encodes:
        raise LaunchConfigError(
            f"case {case.name!r}: the launch has tensor maps, but this kernelopt-harness is too old to "
            f"encode them (its features lack {TENSOR_MAPS!r}): rebuild it with `pip install .`"
        )
    params = compiled.entries.get(workload.signature.entry)
    want = len(workload.signature.params) + len(launch.tensor_maps)
    if params is not None and len(params) != want:
        raise LaunchConfigError(
            f"case {case.name!r}: the launch passes {len(launch.tensor_maps)} tensor map(s), so the kernel "
            f"takes {want} parameters, but it has {len(params)}: one `const __grid_constant__ CUtensorMap` "
            "per map after the signature's parameters"
        )
    check_tensor_maps(launch, workload, case)
