"""A ray wheel small enough to carry to the GPU machine (its carry limit is 64 MiB; ray 2.60's
manylinux wheel is 79 MB): the same wheel without the parts `--ray` never loads (the Java jars,
rllib, data, serve, llm, train, tune: ~42 MB left). RECORD loses their lines, so pip installs it
as usual.

usage: python3 scripts/slim_ray_wheel.py RAY.whl OUT_DIR
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

DROP = ("ray/jars/", "ray/rllib/", "ray/data/", "ray/serve/", "ray/llm/", "ray/train/", "ray/tune/")


def slim(wheel: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        record = None
        for info in src.infolist():
            if info.filename.startswith(DROP):
                continue
            if info.filename.endswith(".dist-info/RECORD"):
                record = info
                continue
            dst.writestr(info, src.read(info.filename))
        if record is not None:
            lines = [line for line in src.read(record.filename).decode().splitlines() if not line.startswith(DROP)]
            dst.writestr(record.filename, "\n".join(lines) + "\n")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    made = slim(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{made}: {made.stat().st_size / 1e6:.1f} MB")
