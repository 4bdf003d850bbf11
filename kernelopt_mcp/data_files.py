"""Reading data files (``{"generator": "file"}`` inputs) without trusting their names or contents.

Two readers share one bounded parser (:func:`read_array`):

- the library's (:func:`open_data`, used by :func:`kernelopt_mcp.evaluation.inputs.load_data_file`):
  files a workload's author named. Opened non-blocking and checked to be regular on the open
  descriptor, so a FIFO or ``/dev/zero`` fails at once instead of pinning a thread or growing the
  process, and read no further than the bytes the case needs (+1, to see that a file is longer).
- an MCP client's (:func:`stage_data_files`): files a client names in ``freeze_workload``. These
  are refused unless the operator named data roots (``--data-root``); then a name must be a
  ``.bin`` or ``.npy`` file beneath one, opened from the root's descriptor without following any
  symlink (``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, else a walk of
  ``O_NOFOLLOW`` opens), and copied as raw little-endian bytes into the server's own directory;
  the workload then names the copies, so no later read goes back to a path a client controls.

No error says anything the file told us (its size, a .npy header's dtype or shape): a client that
names a secret learns only that it is not the data the case needs.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import io
import json
import math
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from .errors import InputError
from .files import write_atomic
from .workload import DataFile, case_shape, parse_spec

DATA_SUFFIXES = (".bin", ".npy")
MAX_NPY_HEADER_BYTES = 64 * 2**10
STAGED_DIR = "data"  # a frozen directory's copies of the data files a client named

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW
# openat2(2): struct open_how and its resolve flags (include/uapi/linux/openat2.h)
_SYS_OPENAT2 = 437  # the same number on every architecture Linux numbers with the generic table
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class DataFileProblem(ValueError):
    """What is wrong with a data file, in words that quote nothing read from it."""


# --- opening -----------------------------------------------------------------------------


def open_data(path: Path) -> int:
    """A descriptor on ``path`` for :func:`read_array` (non-blocking: a FIFO does not wait for a writer)."""
    return os.open(path, _OPEN_FLAGS & ~os.O_NOFOLLOW)


def open_beneath(root: Path, relative: PurePosixPath) -> int:
    """Open ``relative`` beneath the directory ``root`` for reading, following no symlink at any
    component and never leaving ``root`` (``..`` is refused before any call).

    Raises:
        OSError: missing (ENOENT), a symlink on the way (ELOOP), a component not a directory, ...
    """
    parts = relative.parts
    if not parts or relative.is_absolute() or any(p in ("", ".", "..") for p in parts):
        raise OSError(errno.EINVAL, "not a plain relative name")
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _openat2(root_fd, str(relative))
        if fd is not None:
            return fd
        return _walk(root_fd, parts)
    finally:
        os.close(root_fd)


def _openat2(dir_fd: int, name: str) -> int | None:
    """openat2 with RESOLVE_BENEATH | NO_SYMLINKS | NO_MAGICLINKS; None where the kernel (or a seccomp
    profile) lacks it, so the caller walks instead."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    how = _OpenHow(_OPEN_FLAGS, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    fd = int(libc.syscall(_SYS_OPENAT2, dir_fd, os.fsencode(name), ctypes.byref(how), ctypes.sizeof(how)))
    if fd >= 0:
        return fd
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM, errno.E2BIG):
        return None
    raise OSError(err, os.strerror(err))


def _walk(root_fd: int, parts: tuple[str, ...]) -> int:
    """The same as openat2 by hand: each directory opened O_NOFOLLOW | O_DIRECTORY from the last."""
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], _OPEN_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


# --- reading -----------------------------------------------------------------------------


def read_array(fd: int, npy: bool, dtype: np.dtype[Any], shape: tuple[int, ...]) -> tuple[np.ndarray, bytes]:
    """The array of ``dtype`` and ``shape`` a data file holds, and the file's bytes (for its sha256).
    Takes ownership of ``fd``. Reads at most the bytes the array needs plus one (and a .npy header
    of at most MAX_NPY_HEADER_BYTES), never a whole larger file.

    Raises:
        DataFileProblem: not a regular file, not exactly that many bytes, not a .npy of ``dtype``.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    need = f"the {nbytes} bytes the case needs ({'x'.join(map(str, shape)) or 'scalar'} {dtype.name})"
    with open(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DataFileProblem("not a regular file (a FIFO, device or directory cannot be a data file)")
        header = b""
        order = "C"
        if npy:
            header, order = _npy_header(f, dtype, shape, need)
        data = _read_at_most(f, nbytes + 1)
    if len(data) != nbytes:
        raise DataFileProblem(f"does not hold {need}")
    array = np.frombuffer(data, dtype=dtype).reshape(shape, order=order)  # type: ignore[call-overload]
    return np.ascontiguousarray(array), header + data


def _read_at_most(f: io.RawIOBase, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = f.read(min(left, 2**24))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _npy_header(f: io.RawIOBase, dtype: np.dtype[Any], shape: tuple[int, ...], need: str) -> tuple[bytes, str]:
    """Parse a .npy header (versions 1-3) read from ``f``; return its bytes and the data's order."""
    problem = DataFileProblem(f"is not a .npy array of {need}")
    head = _read_at_most(f, 10)
    if len(head) < 10 or head[:6] != b"\x93NUMPY" or head[6] not in (1, 2, 3):
        raise problem
    if head[6] == 1:
        length, prefix = int.from_bytes(head[8:10], "little"), head
    else:
        more = _read_at_most(f, 2)
        prefix = head + more
        length = int.from_bytes(prefix[8:12], "little") if len(more) == 2 else -1
    if not 0 < length <= MAX_NPY_HEADER_BYTES:
        raise problem
    text = _read_at_most(f, length)
    if len(text) != length:
        raise problem
    try:
        fp = io.BytesIO(prefix + text)
        version = np.lib.format.read_magic(fp)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        file_shape, fortran, file_dtype = read(fp, max_header_size=MAX_NPY_HEADER_BYTES)
    except (ValueError, SyntaxError, TypeError):
        raise problem from None
    if file_dtype != dtype or file_dtype.hasobject or math.prod(file_shape) != math.prod(shape):
        raise problem
    return prefix + text, "F" if fortran else "C"


# --- a client's data files, staged beneath the operator's data roots ----------------------------


@dataclass
class _Use:
    """One data generator of a spec: where it is in the JSON and the bytes its cases need."""

    where: str
    gen: dict[str, Any]
    dtype: np.dtype[Any]
    shapes: set[tuple[int, ...]]


def _uses(data: dict[str, Any]) -> list[_Use]:
    """Every data generator of the spec ``data`` (JSON), with the shapes of the cases that read it."""
    parsed = parse_spec(data, "spec")
    uses: dict[tuple[str, ...], _Use] = {}
    raw_cases = data.get("cases") or []
    for i, case in enumerate(parsed.cases):
        for param in parsed.signature.inputs:
            key: tuple[str, ...]
            if param.name in case.inputs:
                key, gen, raw = (str(i), param.name), case.inputs[param.name], raw_cases[i]["inputs"][param.name]
                where = f"spec.cases.{case.name}.inputs.{param.name}"
            else:
                key, gen, raw = (param.name,), parsed.inputs[param.name], data["inputs"][param.name]
                where = f"spec.inputs.{param.name}"
            if isinstance(gen, DataFile):
                use = uses.setdefault(key, _Use(where, raw, np.dtype(param.dtype.numpy).newbyteorder("<"), set()))
                use.shapes.add(case_shape(param, case.scalars))
    named = sum(1 for g in _all_generators(data) if g.get("generator") == "file")
    if named != len(uses):
        raise InputError("a data file is named where no case reads it (an output buffer, or an input every case "
                         "overrides); remove it or use a generator there")
    return list(uses.values())


def _all_generators(data: dict[str, Any]) -> list[dict[str, Any]]:
    gens = list((data.get("inputs") or {}).values())
    gens += [g for c in data.get("cases") or [] if isinstance(c, dict) for g in (c.get("inputs") or {}).values()]
    return [g for g in gens if isinstance(g, dict)]


def data_files_named(data: dict[str, Any]) -> bool:
    return any(g.get("generator") == "file" for g in _all_generators(data))


def staged_bytes(data: dict[str, Any]) -> int:
    """What :func:`stage_data_files` would copy (to reserve it in the quota first); 0 without data files."""
    if not data_files_named(data):
        return 0
    total = 0
    for use in _uses(data):
        size = max(math.prod(s) for s in use.shapes) * use.dtype.itemsize
        total += size * (1 + bool(use.gen.get("hidden_path")))
    return total


def stage_data_files(data: dict[str, Any], roots: list[Path], dest: Path) -> dict[str, Any]:
    """The spec ``data`` with each data file a client named replaced by a copy under ``dest/data/``.

    Each ``path`` and ``hidden_path`` must be a ``.bin`` or ``.npy`` name relative to a data root
    (the first that has it) or absolute under one; it is opened beneath the root (no symlink, no
    ``..``), must be a regular file and hold exactly the bytes its cases need (a .npy: of their
    dtype), and its ``sha256``, when given, must match. The copy is raw little-endian, with its own
    sha256; ``drawn_from`` is kept.

    Raises:
        InputError: data files are not allowed (no data roots), or one is refused; the message
            names the spec field and what to do, never what the file holds.
    """
    data = json.loads(json.dumps(data))
    if not data_files_named(data):
        return data
    if not roots:
        raise InputError(
            "data files (\"generator\": \"file\") are not accepted by this server: its operator has named no data "
            "root (kernelopt-mcp --data-root DIR, env KERNELOPT_MCP_DATA_ROOTS); use a generator (uniform, normal, "
            "randint, choice, arange, constant) instead"
        )
    for n, use in enumerate(_uses(data)):
        if len(use.shapes) != 1:
            raise InputError(f"{use.where}: one data file serves cases of different shapes; give each case its own "
                             "file in its cases[].inputs")
        shape = next(iter(use.shapes))
        for key, suffix in (("path", ""), ("hidden_path", "-hidden")):
            raw = use.gen.get(key)
            if not raw:
                continue
            where = f"{use.where}.{key} {str(raw)[:200]!r}"
            array, whole = _read_beneath(str(raw), roots, use.dtype, shape, where)
            if key == "path" and use.gen.get("sha256") and hashlib.sha256(whole).hexdigest() != use.gen["sha256"]:
                raise InputError(f"{where}: its sha256 is not the one given; name the file the sha256 was taken of")
            copy = array.astype(use.dtype, copy=False).tobytes()
            target = dest / STAGED_DIR / f"{n}{suffix}.bin"
            write_atomic(target, copy, durable=False)
            use.gen[key] = str(target)
            if key == "path":
                use.gen["sha256"] = hashlib.sha256(copy).hexdigest()
    return data


def _read_beneath(
    raw: str, roots: list[Path], dtype: np.dtype[Any], shape: tuple[int, ...], where: str
) -> tuple[np.ndarray, bytes]:
    name = PurePosixPath(raw)
    if "\0" in raw or name.suffix not in DATA_SUFFIXES or ".." in name.parts:
        raise InputError(f"{where}: a data file is a .bin or .npy name under a data root, without '..'")
    if name.is_absolute():
        candidates = [(r, name.relative_to(r)) for r in roots if name.is_relative_to(r) and name != PurePosixPath(r)]
        if not candidates:
            raise InputError(f"{where}: not under a data root of this server ({', '.join(map(str, roots))}); name "
                             "the file relative to one")
    else:
        candidates = [(r, name) for r in roots]
    for i, (root, relative) in enumerate(candidates):
        try:
            fd = open_beneath(Path(root), PurePosixPath(relative))
        except FileNotFoundError:
            if i + 1 < len(candidates):
                continue
            raise InputError(f"{where}: no such file under the data roots ({', '.join(map(str, roots))})") from None
        except OSError as exc:
            why = "a symlink on the way (data files are opened without following links)" if exc.errno == errno.ELOOP \
                else "cannot open it" + (f" ({exc.strerror})" if exc.strerror else "")
            raise InputError(f"{where}: {why}; name a regular file beneath a data root") from None
        try:
            return read_array(fd, name.suffix == ".npy", dtype, shape)
        except DataFileProblem as exc:
            raise InputError(f"{where}: {exc}") from None
        except OSError as exc:
            raise InputError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    raise InputError(f"{where}: no data root to look under")


__all__ = [
    "DATA_SUFFIXES",
    "DataFileProblem",
    "data_files_named",
    "open_beneath",
    "open_data",
    "read_array",
    "stage_data_files",
    "staged_bytes",
]
