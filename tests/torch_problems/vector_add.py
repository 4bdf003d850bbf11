"""Elementwise with two inputs: a + b (its output named c with --output-name c, as the pretend GPU of
tests/fakegpu.py computes it)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


n = 4096


def get_inputs():
    return [torch.rand(n), torch.randn(n)]


def get_init_inputs():
    return []
