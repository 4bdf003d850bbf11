"""`.env` for `kernelopt optimize` (clients/kernelopt_agent/options.py): read by python-dotenv from
the working directory or --env-file PATH, never overriding a variable already set, its KERNELOPT_*
settings passed on to the server a run starts, its values never printed or recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernelopt_agent.cli import cmd_optimize, optimize_parser
from kernelopt_agent.options import OptimizeOptions, OptionsError, dotenv_environment, export_dotenv, read_dotenv

SECRET = "sk-dotenv-secret-0123456789"


def write_env(path: Path) -> Path:
    path.write_text(
        "# the model\n"
        f"export OPENAI_API_KEY='{SECRET}'\n"
        'OPENAI_BASE_URL="http://localhost:11434/v1"  # a local server\n'
        "KERNELOPT_ARCH=sm_90a\n"
        "KERNELOPT_HOME_WORKLOADS=${HOME}/wl\n"
        "BARE_KEY\n"
    )
    return path


def test_python_dotenv_parses_what_people_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    values = read_dotenv(write_env(tmp_path / ".env"))
    assert values == {
        "OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": "http://localhost:11434/v1", "KERNELOPT_ARCH": "sm_90a",
        "KERNELOPT_HOME_WORKLOADS": "/home/someone/wl",  # ${VAR} expanded
    }
    assert read_dotenv(tmp_path / "missing.env") == {}


def test_the_working_directorys_env_is_read_and_never_overrides_the_environment(tmp_path: Path) -> None:
    write_env(tmp_path / ".env")
    opts = OptimizeOptions.build({"description": "gemm"}, environ={}, cwd=tmp_path)
    assert (opts.api_key, opts.base_url, opts.arch) == (SECRET, "http://localhost:11434/v1", "sm_90a")
    # a variable already set wins over the file
    opts = OptimizeOptions.build({"description": "gemm"}, cwd=tmp_path,
                                 environ={"OPENAI_API_KEY": "sk-env", "KERNELOPT_ARCH": "sm_100",
                                          "OPENAI_BASE_URL": "http://env/v1"})
    assert (opts.api_key, opts.base_url, opts.arch) == ("sk-env", "http://env/v1", "sm_100")
    # the key is never recorded
    assert SECRET not in json.dumps(opts.as_json()) and SECRET not in repr(opts)
    assert dotenv_environment({"A": "", "B": "env"}, {"A": "file", "B": "file"}) == {"A": "file", "B": "env"}


def test_env_file_names_another_file_and_must_exist(tmp_path: Path) -> None:
    write_env(tmp_path / "model.env")
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-cwd\n")
    opts = OptimizeOptions.build({"description": "gemm", "env_file": str(tmp_path / "model.env")},
                                 environ={}, cwd=tmp_path)
    assert opts.api_key == SECRET  # --env-file instead of ./.env
    with pytest.raises(OptionsError, match=r"--env-file .*nope\.env: no such file"):
        OptimizeOptions.build({"description": "gemm", "env_file": str(tmp_path / "nope.env")}, environ={}, cwd=tmp_path)
    assert optimize_parser().parse_args(["--env-file", "x.env"]).env_file == "x.env"


def test_the_server_a_run_starts_gets_the_files_kernelopt_settings_but_no_key(tmp_path: Path) -> None:
    environ = {"KERNELOPT_ARCH": "sm_100"}
    added = export_dotenv(read_dotenv(write_env(tmp_path / ".env")), environ)
    assert added == ["KERNELOPT_HOME_WORKLOADS"] and environ["KERNELOPT_ARCH"] == "sm_100"
    assert not any(k.startswith("OPENAI_") for k in environ)


def test_a_missing_env_file_is_one_error_line_and_no_value_is_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cmd_optimize(["--env-file", "nope.env", "--description", "gemm"]) == 2
    err = capsys.readouterr().err
    assert "--env-file nope.env: no such file" in err and "Traceback" not in err
    # a bad option after a good .env: the error names the option, never the file's values
    write_env(tmp_path / ".env")
    for key in ("KERNELOPT_ARCH", "KERNELOPT_HOME_WORKLOADS"):
        monkeypatch.setenv(key, "")  # recorded, so what the command exports is undone after the test
        monkeypatch.delenv(key)
    assert cmd_optimize(["--description", "gemm", "--max-iterations", "-1"]) == 2
    captured = capsys.readouterr()
    assert "--max-iterations must be >= 0" in captured.err
    assert SECRET not in captured.err + captured.out
    assert os.environ.get("KERNELOPT_ARCH") == "sm_90a"  # exported for the server
    assert "OPENAI_API_KEY" not in os.environ or os.environ["OPENAI_API_KEY"] != SECRET
