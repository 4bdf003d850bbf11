"""Settings from the environment: every KERNELOPT_* variable reaches its field, typed."""

from __future__ import annotations

from pathlib import Path

from kernelopt_mcp.config import Settings, bundled_workloads_dir


def test_each_variable_sets_its_field() -> None:
    s = Settings.from_env({
        "KERNELOPT_HARNESS": "/opt/h", "KERNELOPT_DEVICE": "3", "KERNELOPT_ARCH": "sm_80",
        "KERNELOPT_CACHE": "/c", "KERNELOPT_TIMEOUT": "12.5", "KERNELOPT_COMPILE_TIMEOUT": "7",
        "KERNELOPT_COMPILE_MEMORY_MB": "2048", "KERNELOPT_SANITIZER": "/s", "KERNELOPT_NCU": "/n",
        "KERNELOPT_PROFILE_TIMEOUT": "30", "KERNELOPT_DOCS_URL": "http://127.0.0.1:9/", "KERNELOPT_DOCS_TTL": "60",
        "KERNELOPT_DOCS_OFFLINE": "yes", "KERNELOPT_WORKLOADS": "/w1:/w2",
    })
    assert (s.harness, s.device, s.arch, s.cache_dir) == (Path("/opt/h"), 3, "sm_80", Path("/c"))
    assert (s.timeout_s, s.compile_timeout_s, s.compile_memory_mb) == (12.5, 7.0, 2048)
    assert (s.sanitizer, s.ncu, s.profile_timeout_s) == (Path("/s"), Path("/n"), 30.0)
    assert (s.docs_url, s.docs_ttl_s, s.docs_offline) == ("http://127.0.0.1:9/", 60.0, True)
    assert s.workload_dirs == (Path("/w1"), Path("/w2"), bundled_workloads_dir())


def test_empty_variables_and_none_overrides_keep_the_defaults_and_flags_win() -> None:
    default = Settings()
    s = Settings.from_env({"KERNELOPT_DEVICE": "", "KERNELOPT_TIMEOUT": "5"}, device=None, timeout_s=9.0)
    assert s.device == default.device and s.timeout_s == 9.0
    assert Settings.from_env({"KERNELOPT_DOCS_OFFLINE": "0"}).docs_offline is False
