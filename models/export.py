"""Exports the reference models (models/reference_models.py) as TorchScript files:
``DIR/<model>_scripted.pt``, ``DIR/<model>_traced.pt`` and ``DIR/<model>_frozen.pt``
(frozen = torch.jit.freeze(torch.jit.script(model.eval()))).

    python models/export.py --out DIR [--models NAME ...] [--variants scripted traced frozen] [--seed N]

The files are generated (the largest is ~23 MB), never committed.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_models import MODELS, build, example_input  # noqa: E402

VARIANTS = ("scripted", "traced", "frozen")


def to_torchscript(name: str, variant: str, seed: int = 0) -> torch.jit.ScriptModule:
    model = build(name, seed)
    if variant == "scripted":
        return torch.jit.script(model)
    if variant == "traced":
        return torch.jit.trace(model, example_input(name))
    if variant == "frozen":
        return torch.jit.freeze(torch.jit.script(model.eval()))
    raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")


def export(out: Path, models: List[str], variants: List[str], seed: int = 0) -> Dict[str, Path]:
    """Writes every (model, variant) file into `out`; returns {"<model>_<variant>": path}."""
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    with warnings.catch_warnings():
        # TorchScript is deprecated since torch 2.10; these files are its inputs by design.
        warnings.filterwarnings("ignore", message=".*TorchScript.*")
        warnings.filterwarnings("ignore", message=".*torch\\.jit.*")
        for name in models:
            for variant in variants:
                path = out / f"{name}_{variant}.pt"
                to_torchscript(name, variant, seed).save(str(path))
                written[f"{name}_{variant}"] = path
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), metavar="NAME",
                        help=f"models to export (default: all of {', '.join(MODELS)})")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                        help="TorchScript variants (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = parser.parse_args(argv)
    for key, path in export(args.out, args.models, args.variants, args.seed).items():
        print(f"{key}: {path} ({path.stat().st_size / 2**20:.1f} MiB, {MODELS[key.rsplit('_', 1)[0]].in_features} features)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
