"""KernelBench level 2's own Model classes for problems 84 and 33/39, as upstream writes them
(classes of their own, not fusedlib's): what the reference models and the KernelBench
interop are tested against."""
import torch
from torch import nn


class Upstream84(nn.Module):  # KernelBench/level2/84_Gemm_BatchNorm_Scaling_Softmax.py
    def __init__(self, in_features, out_features, bn_eps=1e-5, bn_momentum=0.1, scale_shape=(1,)):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features, eps=bn_eps, momentum=bn_momentum)
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        return self.softmax(self.scale * self.bn(self.gemm(x)))


class Upstream33(nn.Module):  # KernelBench/level2/33_Gemm_Scale_BatchNorm.py (= 39)
    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        return self.bn(self.gemm(x) * self.scale)
