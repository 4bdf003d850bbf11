"""The orchestrator's settings: one object built at the entry point and passed down.

Precedence: command-line flags > environment (``OPENAI_BASE_URL``) > the ``--config`` JSON file
> defaults. The environment is the process's, over the variables of a ``.env`` file (the working
directory's, or ``--env-file PATH``; read by python-dotenv, never overriding a variable already set,
see :func:`dotenv_environment`). The API key comes from ``OPENAI_API_KEY`` there; it lives only in
memory (never in :meth:`OptimizeOptions.as_json`, the run directory or a log). What else the
orchestrator takes from the environment is read here too (:meth:`OptimizeOptions.read_environment`),
so the loop and the parts read only the options.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.files import read_json

from .pricing import PriceError, Pricing

DEFAULT_MODEL = "gpt-5-mini"
DEFAULT_EFFORT = "medium"
APIS = ("responses", "chat")
EFFORTS = ("off", "none", "minimal", "low", "medium", "high", "xhigh")
MAX_CANDIDATES = 16  # concurrent model requests per iteration; more mostly queues on the one GPU
PATH_KEYS = ("signature", "reference", "initial_kernel", "input_cases", "oracle", "results_dir", "workspace", "harness")
# Options set from the environment alone (read_environment): never from --config, and a resumed run
# reads them again from its own environment rather than from the run's config.json.
FROM_ENVIRONMENT = ("api_key", "arch", "workload_dirs")


class OptionsError(ValueError):
    """The options cannot work as given; the message says what to change."""


@dataclass
class OptimizeOptions:
    """Everything ``kernelopt optimize`` needs (see ``kernelopt optimize -h``)."""

    description: str | None = None
    max_iterations: int = 7
    signature: Path | None = None
    reference: Path | None = None
    initial_kernel: Path | None = None
    input_cases: Path | None = None
    oracle: Path | None = None
    workload: str | None = None
    use_nsight: bool = False
    nvidia_research: bool = False
    model: str = DEFAULT_MODEL
    reasoning_effort: str = DEFAULT_EFFORT
    base_url: str | None = None
    results_dir: Path = Path("results")
    max_tokens: int | None = None
    max_cost: float | None = None
    warmup: int | None = None
    iterations: int | None = None
    stop: str | None = None  # count | precision; None: precision unless warmup or iterations is given
    tool_rounds: int = 8
    request_timeout_s: float = 600.0
    max_retries: int = 3
    workspace: Path | None = None
    harness: Path | None = None
    device: int | None = None
    devices: str | None = None  # the server's --devices ("0,1"); neither: every visible device
    ray: str | None = None  # the server's --ray: a Ray cluster's GPUs instead of this machine's
    server_command: list[str] | None = None
    config_file: Path | None = None
    strategy: str | None = None  # llm | tune; None: llm with an API key, tune without
    strategy_defaulted: bool = False
    tune_budget: int = 8  # configurations per model proposal that carries tunables
    tune_evals: int = 64  # configurations for --strategy tune
    tune_seconds: float | None = None
    keep_data: bool = False  # keep drawn inputs and large expected outputs in the run directory (rundata.py)
    candidates: int = 1  # proposals per iteration, asked concurrently, evaluated one after another on the GPU
    api: str | None = None  # responses | chat; None: responses on OpenAI's own endpoint, chat elsewhere
    price_per_mtok: str | list[float] | None = None  # "IN,OUT" or "IN,CACHED,OUT" USD per 1M tokens
    api_key: str | None = field(default=None, repr=False)
    arch: str | None = None  # KERNELOPT_ARCH: the compile target named to the model and docs_search; None: the GPU's
    workload_dirs: tuple[Path, ...] = field(default_factory=lambda: (bundled_workloads_dir(),))  # --workload lookup

    @property
    def timing_args(self) -> dict[str, Any]:
        """The benchmark and autotune tools' timing arguments: the counts given, and the stopping
        rule: searching stops on precision (the median's relative standard error) unless a launch
        count was asked for (--warmup or --iterations)."""
        args: dict[str, Any] = {k: v for k, v in (("warmup", self.warmup), ("iterations", self.iterations))
                                if v is not None}
        args["stop"] = self.stop or ("count" if args else "precision")
        return args

    @classmethod
    def build(
        cls, flags: Mapping[str, Any], environ: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> OptimizeOptions:
        """Merge flags (None = not given), the environment, the config file and the defaults.

        Raises:
            OptionsError: an unreadable config file, an unknown key, a bad value.
        """
        env = dict(os.environ if environ is None else environ)
        dotenv = read_dotenv(env_file_path(flags.get("env_file"), cwd or Path.cwd()))
        values: dict[str, Any] = {}
        config_path = flags.get("config")
        if config_path:
            values.update(read_config(Path(config_path)))
            values["config_file"] = Path(config_path)
        base_url = dotenv_environment(env, dotenv).get("OPENAI_BASE_URL")
        if base_url:
            values["base_url"] = base_url
        values.update({k: v for k, v in flags.items() if v is not None and k not in ("config", "env_file")})
        known = {f.name for f in fields(cls)}
        opts = cls(**{k: v for k, v in values.items() if k in known})
        for key in PATH_KEYS:
            value = getattr(opts, key)
            if value is not None and not isinstance(value, Path):
                setattr(opts, key, Path(value))
        opts.read_environment(env, dotenv)
        if opts.strategy is None:
            # without a key, a workload is tuned; without a workload there is nothing to tune, and the
            # model's missing key is the error to report (ModelClient says it)
            opts.strategy = "tune" if not opts.api_key and opts.workload else "llm"
            opts.strategy_defaulted = True
        opts.check()
        return opts

    def read_environment(self, environ: Mapping[str, str], dotenv: Mapping[str, str]) -> None:
        """Set the options that come from the environment alone (``environ`` over the .env file's
        variables, :func:`dotenv_environment`): the API key (``OPENAI_API_KEY``), the compile target
        (``KERNELOPT_ARCH``; None: the GPU's) and where --workload names are looked up:
        ``KERNELOPT_WORKLOADS``, the bundled workloads, then the workspace's created ones
        (``--workspace``, else ``KERNELOPT_MCP_WORKSPACE``, else ~/.kernelopt).

        Raises:
            OptionsError: a ``KERNELOPT_*`` variable that cannot be read (e.g. a KERNELOPT_DEVICE that
                is not a number).
        """
        environ = dotenv_environment(environ, dotenv)
        self.api_key = environ.get("OPENAI_API_KEY") or None
        self.arch = environ.get("KERNELOPT_ARCH") or None
        try:
            found = Settings.from_env(environ).workload_dirs
        except ValueError as exc:
            raise OptionsError(f"a KERNELOPT_* environment variable cannot be read: {exc}") from None
        workspace = self.workspace or Path(environ.get("KERNELOPT_MCP_WORKSPACE") or Path.home() / ".kernelopt")
        self.workload_dirs = (*found, Path(workspace).expanduser() / "workloads")

    def check(self, *, files: bool = True) -> None:
        """Raise OptionsError for options that cannot work; ``files``: the part files must exist (a resumed
        run reads its parts from its own records, so its original files may be gone)."""
        if self.strategy not in (None, "llm", "tune"):
            raise OptionsError(f"--strategy must be llm or tune (got {self.strategy!r})")
        if self.stop not in (None, "count", "precision"):
            raise OptionsError(f"--stop must be count or precision (got {self.stop!r})")
        if self.tune_budget < 1 or self.tune_evals < 1:
            raise OptionsError("--tune-budget and --tune-evals must be at least 1")
        if self.tune_seconds is not None and self.tune_seconds <= 0:
            raise OptionsError("--tune-seconds must be positive")
        if self.strategy == "tune" and self.workload is None:
            raise OptionsError(
                "--strategy tune tunes a workload's tunable.json: pass --workload NAME|DIR (bundled: sgemm, "
                "softmax, reduce_sum, transpose, layernorm); to optimize from a description or separate parts, set "
                "OPENAI_API_KEY (environment or .env) for --strategy llm"
            )
        if not isinstance(self.candidates, int) or not 1 <= self.candidates <= MAX_CANDIDATES:
            raise OptionsError(f"--candidates must be an integer from 1 to {MAX_CANDIDATES} (got {self.candidates!r}): "
                               "the number of proposals asked for concurrently each iteration")
        if self.max_iterations < 0:
            raise OptionsError(f"--max-iterations must be >= 0 (got {self.max_iterations})")
        if self.reasoning_effort not in EFFORTS:
            raise OptionsError(f"--reasoning-effort must be one of {', '.join(EFFORTS)} (got "
                               f"{self.reasoning_effort!r})")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise OptionsError("--max-tokens must be positive")
        self.check_model_api()
        if not files:
            return
        if self.workload is None and self.description is None and not (self.signature and self.input_cases):
            raise OptionsError(
                "say what to optimize: --description \"...\" (omitted parts are generated), --workload NAME|DIR, "
                "or the parts --signature and --input-cases (with --reference / --initial-kernel)"
            )
        for key in ("signature", "reference", "initial_kernel", "input_cases", "oracle"):
            path = getattr(self, key)
            if path is not None and not path.is_file():
                raise OptionsError(f"--{key.replace('_', '-')} {path}: no such file")

    def check_model_api(self) -> None:
        """--api (resolved to the API used), --price-per-mtok, and a --max-cost that can be priced."""
        if self.api is None:
            self.api = default_api(self.base_url)
        if self.api not in APIS:
            raise OptionsError(f"--api must be responses or chat (got {self.api!r})")
        try:
            pricing = Pricing.resolve(self.model, self.price_per_mtok)
        except PriceError as exc:
            raise OptionsError(str(exc)) from None
        if self.max_cost is not None and self.max_cost <= 0:
            raise OptionsError("--max-cost must be a positive number of USD")
        if self.max_cost is not None and not pricing.known and self.strategy != "tune":
            raise OptionsError(
                f"--max-cost {self.max_cost} needs the price of model {self.model!r}, which the price table "
                "(clients/kernelopt_agent/pricing.py) does not have: give it with --price-per-mtok IN,OUT "
                "(USD per million input and output tokens, e.g. 0.5,1.5), or limit tokens with --max-tokens"
            )

    def as_json(self) -> dict[str, Any]:
        """The merged settings as saved with a run: no API key, no credentials in the URL."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "api_key":
                continue
            value = getattr(self, f.name)
            out[f.name] = (str(value) if isinstance(value, Path) else [str(v) for v in value]
                           if isinstance(value, tuple) else value)
        out["base_url"] = redact_url(self.base_url)
        out["api_key"] = "set" if self.api_key else "not set"
        return out


def default_api(base_url: str | None) -> str:
    """responses on OpenAI's own endpoint (no --base-url, or api.openai.com), chat for other servers."""
    if not base_url:
        return "responses"
    host = (urlsplit(base_url).hostname or "").lower()
    return "responses" if host == "api.openai.com" else "chat"


def read_config(path: Path) -> dict[str, Any]:
    """A JSON object with the flags' names (``max-iterations`` or ``max_iterations``)."""
    data = read_json(path, OptionsError)
    if not isinstance(data, dict):
        raise OptionsError(f"--config {path}: expected a JSON object of options")
    known = {f.name for f in fields(OptimizeOptions)} - {*FROM_ENVIRONMENT, "config_file", "strategy_defaulted"}
    out = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name in ("api_key", "openai_api_key"):
            raise OptionsError(f"--config {path}: keep the API key out of config files; use OPENAI_API_KEY or .env")
        if name not in known:
            raise OptionsError(f"--config {path}: unknown option {key!r} (known: {', '.join(sorted(known))})")
        out[name] = value
    return out


def env_file_path(given: str | Path | None, cwd: Path) -> Path:
    """The .env file to read: ``--env-file`` (which must exist), else ``.env`` in ``cwd`` (which may not).

    Raises:
        OptionsError: ``--env-file`` names no readable file.
    """
    if given is None:
        return cwd / ".env"
    path = Path(given).expanduser()
    if not path.is_file():
        raise OptionsError(f"--env-file {path}: no such file (KEY=VALUE lines, as in a .env file)")
    return path


def read_dotenv(path: Path) -> dict[str, str]:
    """The variables of a .env file, parsed by python-dotenv (``KEY=VALUE`` lines, ``export``, quotes,
    ``#`` comments, ``${VAR}`` expansion); {} where there is no such file. Values are never printed."""
    from dotenv import dotenv_values

    if not path.is_file():
        return {}
    try:
        values = dotenv_values(path, encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return {key: value for key, value in values.items() if value is not None}  # a bare `KEY` line has no value


def dotenv_environment(environ: Mapping[str, str], dotenv: Mapping[str, str]) -> dict[str, str]:
    """``environ`` over the .env file's variables: a variable already set (and not empty) is never
    overridden by the file."""
    return {**dotenv, **{key: value for key, value in environ.items() if value}}


def export_dotenv(dotenv: Mapping[str, str], environ: MutableMapping[str, str]) -> list[str]:
    """Put the .env file's variables that ``environ`` lacks into it (the entry point passes
    ``os.environ``, so the kernelopt-mcp server a run starts sees the KERNELOPT_* settings the
    orchestrator read); never the ``OPENAI_*`` ones, which stay in the options. Returns their names."""
    added = [key for key, value in dotenv.items() if not key.startswith("OPENAI_") and not environ.get(key)]
    for key in added:
        environ[key] = dotenv[key]
    return added


def redact_url(url: str | None) -> str | None:
    """The URL without user:password (a key can hide there)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url
