"""Every CUDA header a kernel author uses compiles in a fresh `pip install .` (issue 16), with the
toolkit hidden and with it; and the arch-specific target sm_90a is reachable wherever sm_90 is.

"Toolkit hidden": the headers are searched in the wheels only (no CUDA_HOME, no /usr/local/cuda)
and the confined compile worker may read nothing else, so a header that only a toolkit has
cannot be found by accident.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, kernel, write_harness, write_tiny_workload
from header_kernels import GPU_CANDIDATES, HEADER_KERNELS, SETMAXNREG_KERNEL, SM90A_COPY, WORKLOADS, write_workload

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
from kernelopt_mcp.cli import main
from kernelopt_mcp.compile_options import OptionError, check_options
from kernelopt_mcp.compiler import CompileCache, arch_problem, compile_kernel
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.cuda_headers import FAMILIES, HeaderDirs, find_header_dirs, search_header_dirs
from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.evaluation.candidate import EvaluateOptions
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import evaluate
from kernelopt_mcp.sandbox import landlock_abi
from kernelopt_mcp.tune.spec import parse_tunable

TOOLKITS = ("/usr/local/cuda", "/opt/nvidia")
WHEELS_ONLY = find_header_dirs(None, system=False)
TOOLKIT_ONLY = find_header_dirs(Path("/usr/local/cuda"), wheels=False)
WGMMA_FENCE = SM90A_COPY
# the pretend GPU's vector_add with an instruction only sm_90a has
HOPPER_ADD = kernel().replace("int i =", 'asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");\n    int i =', 1)


def _compiles(source: str, headers: HeaderDirs | None, arch: str = "sm_90", options: list[str] | None = None) -> None:
    result = compile_kernel(source, arch, options, headers=headers, cache=CompileCache())
    assert result.ok, result.log
    assert result.entries and result.cubin
    if landlock_abi() >= 1:  # confined: NVRTC could read only ``headers`` (and its own files)
        assert result.confinement.startswith("landlock abi"), result.confinement


def test_a_fresh_install_has_every_header_family_in_the_wheels() -> None:
    """pyproject's dependencies bring cudart, crt (mma.h's crt/mma.h) and cccl: nothing from a toolkit."""
    assert WHEELS_ONLY.missing == (), WHEELS_ONLY.missing_hint()
    assert {f for f, _ in WHEELS_ONLY.found} == {f for f, *_ in FAMILIES}
    for directory in WHEELS_ONLY.dirs:
        assert "/nvidia/cu13/include" in directory and not directory.startswith(TOOLKITS), directory


@pytest.mark.parametrize("header", sorted(HEADER_KERNELS))
def test_each_header_compiles_with_the_toolkit_hidden(header: str) -> None:
    _compiles(HEADER_KERNELS[header], WHEELS_ONLY)


@pytest.mark.parametrize("header", sorted(HEADER_KERNELS))
def test_each_header_compiles_with_the_toolkit(header: str) -> None:
    if TOOLKIT_ONLY.missing:
        pytest.skip(f"no complete CUDA toolkit at /usr/local/cuda ({TOOLKIT_ONLY.missing_hint()})")
    _compiles(HEADER_KERNELS[header], TOOLKIT_ONLY)


def test_the_default_search_compiles_them_too() -> None:
    """What the CLI and the server use: the wheels, then CUDA_HOME, then /usr/local/cuda."""
    _compiles(HEADER_KERNELS["mma.h"] + HEADER_KERNELS["cuda/barrier"].replace("void k(", "void k2("), None)


@pytest.mark.parametrize("family", sorted(GPU_CANDIDATES))
def test_the_kernels_the_gpu_test_runs_compile(family: str) -> None:
    _, source, _, options = GPU_CANDIDATES[family]
    _compiles(source, WHEELS_ONLY, options=options)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_gpu_tests_workloads_load_and_their_references_compile(name: str, tmp_path: Path) -> None:
    wl = find_workload(write_workload(tmp_path, name), Settings())
    _compiles(wl.reference_cu, WHEELS_ONLY)
    assert {c.kind for c in wl.spec.cases} == {"correctness", "performance"}


def test_the_runtime_wheel_alone_fails_on_mma_h_and_says_what_to_install(tmp_path: Path) -> None:
    """What a fresh install did before nvidia-cuda-crt was a dependency: mma.h without crt/."""
    cudart = dict(WHEELS_ONLY.found)["cudart"]
    shutil.copy(Path(cudart) / "mma.h", tmp_path / "mma.h")
    runtime_only = search_header_dirs((tmp_path,))
    assert runtime_only.missing == ("cudart", "crt", "cccl")  # no cuda_runtime.h here: only mma.h
    headers = HeaderDirs((str(tmp_path),), (("cudart", str(tmp_path)),), ("crt", "cccl"))
    result = compile_kernel(HEADER_KERNELS["mma.h"], headers=headers, cache=CompileCache())
    assert not result.ok
    assert 'cannot open source file "crt/mma.h"' in result.log
    assert "nvidia-cuda-crt" in result.summary() and "nvidia-cuda-cccl" in result.summary()


def test_each_family_comes_from_the_first_root_that_has_it(tmp_path: Path) -> None:
    """The wheels first; a toolkit fills in only a family the wheels lack (here crt), and CCCL is
    found in include/cccl (CUDA 13) or include itself (CUDA 12)."""
    wheel, toolkit, old = tmp_path / "wheel", tmp_path / "toolkit", tmp_path / "cuda12"
    for root, files in (
        (wheel, ["cuda_runtime.h", "cccl/cuda/std/version"]),
        (toolkit, ["cuda_runtime.h", "crt/mma.h", "cccl/cuda/std/version"]),
        (old, ["cuda_runtime.h", "crt/mma.h", "cuda/std/version"]),
    ):
        for f in files:
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            (root / f).write_text("")
    found = search_header_dirs((wheel, toolkit))
    assert dict(found.found) == {"cudart": str(wheel), "crt": str(toolkit), "cccl": str(wheel / "cccl")}
    assert found.dirs == (str(wheel), str(toolkit), str(wheel / "cccl")) and found.missing == ()
    assert search_header_dirs((old,)).dirs == (str(old),)
    assert search_header_dirs((tmp_path / "none",)).missing == ("cudart", "crt", "cccl")


def test_settings_cuda_home_reaches_the_header_search(tmp_path: Path) -> None:
    settings = Settings.from_env({"CUDA_HOME": str(tmp_path / "cuda")})
    assert settings.compile_limits().cuda_home == tmp_path / "cuda"
    (tmp_path / "cuda" / "include" / "crt").mkdir(parents=True)
    (tmp_path / "cuda" / "include" / "crt" / "mma.h").write_text("")
    only_home = find_header_dirs(tmp_path / "cuda", wheels=False, system=False)
    assert dict(only_home.found) == {"crt": str((tmp_path / "cuda" / "include").resolve())}


# --- sm_90a -------------------------------------------------------------------------------------


def test_setmaxnreg_compiles_for_sm_90a_and_is_refused_for_sm_90_with_the_ptxas_error() -> None:
    for arch, options in (("sm_90a", []), ("sm_90", ["-arch=sm_90a"]), ("sm_90", ["--gpu-architecture=sm_90a"])):
        result = compile_kernel(SETMAXNREG_KERNEL, arch, options, cache=CompileCache())
        assert result.ok and result.arch == "sm_90a", result.log
        assert result.ptx and ".target sm_90a" in result.ptx
        assert result.options == options  # as asked: replays compile the same way
    refused = compile_kernel(SETMAXNREG_KERNEL, "sm_90", cache=CompileCache())
    assert not refused.ok and refused.arch == "sm_90"
    assert "Instruction 'setmaxnreg.inc' not supported on .target 'sm_90'" in refused.log  # ptxas's own words
    assert "-arch=sm_90a" in refused.summary()


def test_wgmma_compiles_only_for_sm_90a() -> None:
    assert compile_kernel(WGMMA_FENCE, "sm_90", ["-arch=sm_90a"], cache=CompileCache()).ok
    refused = compile_kernel(WGMMA_FENCE, "sm_90", cache=CompileCache())
    assert "Instruction 'wgmma.fence' not supported on .target 'sm_90'" in refused.log


def test_only_the_targets_own_arch_specific_variant_is_accepted() -> None:
    assert check_options(["-arch=sm_90a", "--gpu-architecture=sm_100a"])
    for bad in ("-arch=sm_80", "-arch=compute_90a", "--gpu-architecture=sm_90", "-arch sm_90a", "-arch=sm_90a,sm_80"):
        with pytest.raises(OptionError, match="not allowed"):
            check_options([bad])
    other = compile_kernel(kernel(), "sm_80", ["-arch=sm_90a"], cache=CompileCache())
    assert not other.ok and "runs only on compute capability 9.0 GPUs" in other.summary()
    two = compile_kernel(kernel(), "sm_90", ["-arch=sm_90a", "-arch=sm_100a"], cache=CompileCache())
    assert not two.ok and "give one -arch" in two.summary()


def test_an_arch_specific_target_runs_only_on_its_own_gpu() -> None:
    assert arch_problem("sm_90a", "sm_90") is None and arch_problem("sm_90", "sm_80") is None
    problem = arch_problem("sm_90a", "sm_80")
    assert problem and "compute capability 9.0" in problem and "this GPU is sm_80" in problem


def test_the_cli_compiles_for_sm_90a(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.cu"
    src.write_text(SETMAXNREG_KERNEL)
    assert main(["compile", str(src), "--arch", "sm_90a", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["arch"] == "sm_90a"
    assert main(["compile", str(src), "--arch", "sm_90", "--option=-arch=sm_90a", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arch"] == "sm_90a"
    assert main(["compile", str(src), "--arch", "sm_90"]) == 1
    assert "setmaxnreg" in capsys.readouterr().out


def _session(tmp_path: Path, mode: str) -> tuple[Path, Path]:
    return write_harness(tmp_path, mode), write_tiny_workload(tmp_path / "extra") / "tiny_add"


def test_evaluate_runs_an_sm_90a_candidate_on_the_pretend_h200(tmp_path: Path) -> None:
    harness, directory = _session(tmp_path, "fake")
    wl = find_workload(directory, Settings())
    source = HOPPER_ADD
    opts = EvaluateOptions(warmup=1, iterations=3)
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w",
                                                     options=opts) as ev:
        refused = evaluate(ev, Candidate(source, LaunchSpec.model_validate(ADD_LAUNCH), [], "plain"))
        result = evaluate(ev, Candidate(source, LaunchSpec.model_validate(ADD_LAUNCH), ["-arch=sm_90a"], "hopper"))
    assert refused.status.value == "compile_error" and "-arch=sm_90a" in refused.message
    assert result.ok, result.message
    assert result.compile is not None and result.compile.arch == "sm_90a"
    # the session as a whole may target sm_90a too (kernelopt evaluate --arch sm_90a)
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w2",
                                                       options=opts, arch="sm_90a") as ev:
        whole = evaluate(ev, Candidate(source, LaunchSpec.model_validate(ADD_LAUNCH), [], "hopper"))
    assert whole.ok and whole.compile is not None and whole.compile.arch == "sm_90a", whole.message


def test_sm_90a_is_refused_on_another_gpu_with_a_clear_message(tmp_path: Path) -> None:
    harness, directory = _session(tmp_path, "sparse")  # a pretend sm_80 GPU
    wl = find_workload(directory, Settings())
    device = device_info(harness, 0)
    assert device.arch == "sm_80"
    with HarnessProcess(harness, 0) as proc:
        with pytest.raises(KerneloptError, match=r"runs only on GPUs of compute capability 9\.0"):
            Session(wl, proc, device, workdir=tmp_path / "w", arch="sm_90a")
        with Session(wl, proc, device, workdir=tmp_path / "w2", options=EvaluateOptions(warmup=1, iterations=3)) as ev:
            result = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH),
                                            ["-arch=sm_90a"], "hopper"))
    assert result.status.value == "compile_error"
    assert "runs only on compute capability 9.0 GPUs" in result.message and "sm_80" in result.message


def test_a_tunable_may_ask_for_sm_90a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """tunable.json's compile_options carry the arch-specific target through `kernelopt tune`."""
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    harness, directory = _session(tmp_path, "fake")
    spec = {"params": {"BLOCK": [64, 128]}, "defaults": {"BLOCK": 64}, "source": "add.cu",
            "launch": {"default": {"grid": ["ceil_div(n, BLOCK)"], "block": ["BLOCK"]}},
            "compile_options": ["-arch=sm_90a"]}
    source = HOPPER_ADD
    tunable = parse_tunable(spec, source)
    text, _, options = tunable.materialize({"BLOCK": 128})
    assert compile_kernel(text, "sm_90", options, cache=CompileCache()).arch == "sm_90a"
    (tmp_path / "add.json").write_text(json.dumps(spec))
    (tmp_path / "add.cu").write_text(source)
    run = tmp_path / "run"
    assert main(["tune", str(directory), str(tmp_path / "add.json"), "--harness", str(harness), "--iterations", "3",
                 "--warmup", "0", "-o", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best_params"] in ({"BLOCK": 64}, {"BLOCK": 128}) and out["counts"]["measured"] == 2, out
    assert json.loads((run / "best.compile_options.json").read_text()) == ["-arch=sm_90a"]


@pytest.mark.anyio
async def test_the_mcp_tools_take_sm_90a(tmp_path: Path) -> None:
    """compile with arch sm_90a, and validate / benchmark with the compile option -arch=sm_90a."""
    from fakegpu import in_memory_server, tool_text

    from kernelopt_mcp.config import bundled_workloads_dir
    from kernelopt_mcp.server_config import ServerConfig

    tiny = write_tiny_workload(tmp_path / "extra")
    settings = Settings(harness=write_harness(tmp_path, "fake"),
                        workload_dirs=(bundled_workloads_dir(), tiny), timeout_s=20)
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        r = await client.call_tool("compile", {"source": SETMAXNREG_KERNEL, "arch": "sm_90a"})
        assert r.structured_content["status"] == "ok" and r.structured_content["arch"] == "sm_90a", tool_text(r)
        r = await client.call_tool("compile", {"source": SETMAXNREG_KERNEL, "arch": "sm_90"})
        assert r.structured_content["status"] == "error" and "-arch=sm_90a" in tool_text(r)
        args = {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": HOPPER_ADD}
        r = await client.call_tool("validate", args)
        assert r.structured_content["status"] == "compile_error", tool_text(r)
        r = await client.call_tool("validate", {**args, "compile_options": ["-arch=sm_90a"]})
        assert r.structured_content["status"] == "ok", tool_text(r)
        r = await client.call_tool("benchmark", {**args, "compile_options": ["-arch=sm_90a"], "warmup": 1,
                                                 "iterations": 3})
        assert r.structured_content["status"] == "ok", tool_text(r)
