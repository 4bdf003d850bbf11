import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return self.bn(x)  # training mode: updates running_mean / running_var (each call runs from a snapshot)


features = 32


def get_inputs():
    return [torch.randn(16, features)]


def get_init_inputs():
    return [features]
