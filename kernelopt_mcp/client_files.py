"""What a client may make the MCP server read: paths confined to the roots (the calling client's
home, the workload directories, --root, the roots the client shares), never another client's
home or the private directory of the sessions' inputs; kernel sources and tunable specs read
from them, or given inline, within their limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from .compiler import MAX_SOURCE_BYTES
from .errors import TunableError
from .files import read_json, read_regular_bytes
from .server_config import CLIENT_ROOTS, SOURCE_SUFFIXES
from .server_state import ServerState
from .tune.spec import Tunable, load_tunable, parse_tunable, workload_tunable_path
from .workload import Workload
from .workspace import RequestError


class ClientFiles:
    """Path confinement and the reading of a client's kernel sources and tunable specs."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def confine(self, raw: str) -> Path:
        """Resolve ``raw`` (absolute, or relative to the calling client's home: the workspace over
        stdio) inside a configured root, and never inside another client's home."""
        if "\0" in raw or not raw.strip():
            raise RequestError("path is empty or contains a NUL byte")
        config = self.state.config
        path = Path(raw).expanduser()
        home = config.client_home()
        if not path.is_absolute():
            path = home / path
        try:
            real = path.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
            raise RequestError(f"{raw}: cannot resolve the path ({exc})") from None
        if real.is_relative_to(self.state.private_dir):
            raise RequestError(f"{raw}: inside the evaluations' private directory (their inputs are hidden)")
        clients, own = config.clients_dir.resolve(), home.resolve()
        if real.is_relative_to(clients) and not (own.is_relative_to(clients) and real.is_relative_to(own)):
            raise RequestError(f"{raw}: another client's files; name files under {home} (your own) "
                               "or a --root directory")
        roots = list(dict.fromkeys([*config.roots(), *CLIENT_ROOTS.get()]))
        if any(real.is_relative_to(root) for root in roots):
            return real
        raise RequestError(
            f"{raw}: outside the directories this server may read ({', '.join(map(str, roots))}; "
            "symlinks are resolved). Pass the kernel inline as `source`, put the file under the "
            f"workspace {home}, or start the server with --root DIR"
        )

    async def source_text(self, source: str | None, path: str | None) -> tuple[str, str]:
        """:meth:`read_source` off the event loop (a file read must never stall other calls)."""
        if path is None:
            return self.read_source(source, path)
        return await anyio.to_thread.run_sync(self.read_source, source, path)

    def read_source(self, source: str | None, path: str | None) -> tuple[str, str]:
        """The kernel text and a file name for diagnostics, from exactly one of the two.

        A ``path`` must name a regular ``.cu``/``.cuh`` file under a root, of at most
        MAX_SOURCE_BYTES: never a FIFO or device (opened non-blocking, checked on the open
        descriptor) and never another kind of file (the workspace also holds caches and run
        records, whose text a compile log would quote). Blocking: call it in a worker thread.
        """
        if (source is None) == (path is None):
            raise RequestError(
                "give exactly one of `source` (the CUDA C++ text) or `path` (a .cu file under the "
                "workspace or a workload directory)"
            )
        if source is not None:
            if len(source.encode()) > MAX_SOURCE_BYTES:
                raise RequestError(f"source is {len(source.encode())} bytes; the limit is {MAX_SOURCE_BYTES}")
            return source, "kernel.cu"
        assert path is not None
        real = self.confine(path)
        if real.suffix not in SOURCE_SUFFIXES:
            raise RequestError(
                f"{path}: not a kernel source (resolved to {real}); `path` names a .cu or .cuh file"
            )
        try:
            data = read_regular_bytes(real, MAX_SOURCE_BYTES)
        except FileNotFoundError:
            raise RequestError(f"{path}: no such file (resolved to {real})") from None
        except OSError as exc:  # not a regular file, too large, unreadable, gone since it was resolved
            raise RequestError(
                f"{path}: cannot read ({exc.strerror or exc}); pass a regular .cu file of at most "
                f"{MAX_SOURCE_BYTES} bytes"
            ) from None
        try:
            return data.decode("utf-8"), real.name
        except UnicodeDecodeError:
            raise RequestError(f"{path}: not UTF-8 text; pass CUDA C++ source") from None

    def tunable(
        self, wl: Workload, tunable: dict[str, Any] | None, source: str | None, tunable_path: str | None
    ) -> Tunable:
        """The tunable to search: inline, from a tunable.json under a root, or the workload's own.
        Blocking (reads files): call it in a worker thread."""
        try:
            if tunable is not None:
                if tunable_path is not None:
                    raise RequestError("give `tunable` (inline, with `source`) or `tunable_path`, not both")
                if source is None:
                    raise RequestError("an inline `tunable` needs `source`: the CUDA text whose macros are the params")
                text, _ = self.read_source(source, None)
                spec = {k: v for k, v in tunable.items() if k != "source"}
                return parse_tunable(spec, text, "tunable", wl)
            if tunable_path is not None:
                real = self.confine(tunable_path)
                if real.suffix != ".json":
                    raise RequestError(f"{tunable_path}: not a tunable spec (resolved to {real}); name a .json file")
                data = read_json(real, RequestError)  # regular file, size cap: a FIFO or /dev/zero fails at once
                name = data.get("source", "tunable.cu") if isinstance(data, dict) else "tunable.cu"
                # before reading it: the source must lie inside a root too, and be a kernel source
                source_path = self.confine(str(real.parent / str(name)))
                if source_path.suffix not in SOURCE_SUFFIXES:
                    raise RequestError(f"{tunable_path}: its source {name!r} is not a .cu or .cuh file")
                return load_tunable(real, wl)
            return load_tunable(workload_tunable_path(wl), wl)
        except TunableError as exc:
            raise RequestError(str(exc)) from None
