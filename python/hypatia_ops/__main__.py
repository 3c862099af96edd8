"""The C++ tools hypatia-fuse and hypatia-run, run from Python:

    python -m hypatia_ops fuse [--freeze] [--no-mlp] [--report FILE] IN.pt OUT.pt
    python -m hypatia_ops run MODEL.pt [...]

``fuse`` and ``run`` here are also the ``hypatia-fuse`` and ``hypatia-run`` console scripts that
``pip install`` puts on PATH. Each replaces this process with the program found beside the loaded
library (``bin/`` of the installed package, or the build tree root), after ``import hypatia_ops``
has checked the library's build metadata against the installed torch.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, NoReturn, Optional

from hypatia_ops import library_path

_TOOLS = {"fuse": "hypatia-fuse", "run": "hypatia-run"}


def tool_path(name: str) -> Path:
    """The program `name` (hypatia-fuse or hypatia-run) that belongs to the loaded library."""
    library_dir = library_path().parent
    candidates = [library_dir.parent / "bin" / name, library_dir / name]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"{name} not found (looked in: {', '.join(map(str, candidates))})")


def _exec(name: str, args: List[str]) -> NoReturn:
    try:
        path = tool_path(name)
    except FileNotFoundError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        sys.exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [name, *args])


def fuse() -> NoReturn:
    _exec(_TOOLS["fuse"], sys.argv[1:])


def run() -> NoReturn:
    _exec(_TOOLS["run"], sys.argv[1:])


def main(argv: Optional[List[str]] = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in _TOOLS:
        print("usage: python -m hypatia_ops fuse|run ARGS...", file=sys.stderr)
        sys.exit(2)
    _exec(_TOOLS[argv[0]], argv[1:])


if __name__ == "__main__":
    main()
