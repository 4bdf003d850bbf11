import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, mode):
        return x if mode == "id" else -x


def get_inputs():
    return [torch.randn(10), "id"]
