"""Reference models for Hypatia Ops: small, deterministic networks built from the patterns the
fusion passes target (Linear -> ReLU chains), plus the patterns around them that must be left
alone or handled correctly (LayerNorm, residual adds, in-place ReLU, Dropout).

Every model is built by a function of a seed, so the same seed gives the same weights on
every machine. ``MODELS`` maps a model name to its builder and its input feature count.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict

import torch
from torch import nn


def mlp_classifier() -> nn.Module:
    """MNIST-style classifier 784-2048-2048-10: two fusable Linear+ReLU pairs and a plain Linear.
    ~5.8M parameters (~23 MB in float32): generated at test/demo time, never committed."""
    return nn.Sequential(
        nn.Linear(784, 2048), nn.ReLU(),
        nn.Linear(2048, 2048), nn.ReLU(),
        nn.Linear(2048, 10),
    )


class TransformerFFN(nn.Module):
    """Pre-LayerNorm transformer feed-forward block: x + W2 relu(W1 LN(x))."""

    def __init__(self, d_model: int = 256, hidden: int = 1024):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def transformer_ffn() -> nn.Module:
    return TransformerFFN(256, 1024)


def narrow_mlp(in_features: int = 63, width: int = 64, depth: int = 8, out_features: int = 4) -> nn.Module:
    """NeRF-style deep narrow MLP: `depth` Linear+ReLU layers of `width`, then a Linear head.
    63 inputs = 3 coordinates + sin/cos of 10 frequencies each (NeRF's positional encoding);
    the odd size exercises the kernels' unaligned paths."""
    layers = []
    for i in range(depth):
        layers += [nn.Linear(in_features if i == 0 else width, width), nn.ReLU()]
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


def vgg_head() -> nn.Module:
    """VGG classifier head (Linear-ReLU(inplace)-Dropout x2, Linear), scaled down from
    25088-4096-4096-1000 to 1024-512-512-10 so that its files stay ~3 MB."""
    return nn.Sequential(
        nn.Linear(1024, 512), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(512, 512), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(512, 10),
    )


@dataclass(frozen=True)
class ModelSpec:
    build: Callable[[], nn.Module]
    in_features: int


MODELS: Dict[str, ModelSpec] = {
    "mlp_classifier": ModelSpec(mlp_classifier, 784),
    "transformer_ffn": ModelSpec(transformer_ffn, 256),
    "narrow_mlp": ModelSpec(narrow_mlp, 63),
    "vgg_head": ModelSpec(vgg_head, 1024),
}


def build(name: str, seed: int = 0) -> nn.Module:
    """The model `name` in eval mode, with weights drawn from `seed`. LayerNorm's affine
    parameters are randomised too, so that they are not the trivial ones and zeros."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    gen = torch.Generator().manual_seed(seed)
    model = MODELS[name].build()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                bound = module.in_features ** -0.5  # nn.Linear's own default scale
                module.weight.uniform_(-bound, bound, generator=gen)
                module.bias.uniform_(-bound, bound, generator=gen)
            elif isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5, generator=gen)
                module.bias.uniform_(-0.5, 0.5, generator=gen)
    return model.eval()


def example_input(name: str, batch: int = 8, seed: int = 1) -> torch.Tensor:
    """A random (never zero) input [batch, in_features] for model `name`."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, MODELS[name].in_features, generator=gen)
