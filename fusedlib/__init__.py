"""fusedlib: GPU kernel fusion taught on KernelBench level-2 problems 84 and 33/39.

Stages ``naive`` → ``fold`` → ``sums`` → ``fused``; CPU algebra in :mod:`fusedlib.algebra`,
CUDA kernels in ``fusedlib/kernels`` (built lazily by :mod:`fusedlib.build`), drop-in
modules in :mod:`fusedlib.modules`, reference models in :mod:`fusedlib.reference`. The lab
(benchmark, cost model, course helpers, figures, report) is :mod:`fusedlib.lab`, which this
package does not import; its dependencies come with ``pip install "fusedlib[lab]"``.
"""
from ._version import __version__
from .algebra import PRECISIONS, STAGES
from .modules import FusedGemmBatchNormScalingSoftmax, FusedGemmScaleBatchNorm, convert_sync_batchnorm, from_reference
from .reference import GemmBatchNormScalingSoftmax, GemmScaleBatchNorm

__all__ = ["STAGES", "PRECISIONS", "FusedGemmBatchNormScalingSoftmax", "FusedGemmScaleBatchNorm",
           "convert_sync_batchnorm", "from_reference", "GemmBatchNormScalingSoftmax", "GemmScaleBatchNorm",
           "__version__"]
