import torch
import torch.nn as nn


class Model(nn.Module):
    """Mixed precision as training scripts write it: the Linear runs in float16 on the GPU."""

    def __init__(self, n: int):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            return torch.softmax(self.fc(x), dim=-1)


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64]
