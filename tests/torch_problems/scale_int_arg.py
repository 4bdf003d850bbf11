"""A Python int among the forward arguments (it becomes an int32 scalar): x * factor, in float16."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor, factor: int) -> torch.Tensor:
        return x * factor


n = 1 << 20
factor = 3


def get_inputs():
    return [torch.randn(n, dtype=torch.float16), factor]


def get_init_inputs():
    return []
