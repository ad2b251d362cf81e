"""Drop-in fused modules for KernelBench level-2 problems 84 and 33/39.

Each module has the reference's constructor signature, attribute names, parameter
creation order and ``state_dict`` keys (so ``load_state_dict`` works both ways and the
same seed gives the same parameters), plus keyword-only ``stage`` and ``precision``: every
stage runs every precision (the GEMM under all four stages is one engine,
:mod:`fusedlib.engine`). The forward is the stage's operator (``torch.ops.fusedlib.<stage>``,
:mod:`fusedlib.ops`): on CPU tensors the stage algebra of :mod:`fusedlib.algebra`, on CUDA
tensors that stage's kernels (:mod:`fusedlib.cuda`); on both, differentiable through the
derived backward (train mode: :func:`fusedlib.ops.train_backward`, the fused backward kernels
on CUDA and :func:`fusedlib.algebra.train_backward_fused` on the CPU; eval mode:
:func:`fusedlib.algebra.eval_backward`; in train mode the bias gets a zero gradient, as it
cancels), traceable by ``torch.compile`` and, on CUDA, capturable in a CUDA graph.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from . import algebra, cuda, engine, ops

__all__ = ["FusedGemmBatchNormScalingSoftmax", "FusedGemmScaleBatchNorm", "check_submodules",
           "convert_sync_batchnorm", "from_reference", "reference_kind", "validate_input"]


#: The dtypes autocast casts to its own (float64 it leaves as it is).
_AUTOCAST_DTYPES = (torch.float32, *algebra.LOW_PRECISION)


def validate_input(x, in_features: int, param: torch.Tensor, training: bool, synced: bool = False) -> None:
    """Check the input of a fused module; raise a clear error instead of a wrong answer.

    Under ``torch.autocast`` on x's device, x may be float32, bfloat16 or float16 whatever the
    parameters' dtype (the operators' autocast rule casts x and the Linear's parameters to the
    autocast dtype, as eager autocast does for ``nn.Linear``).

    Raises:
        TypeError: ``x`` is not a tensor, or its dtype is not the parameters' dtype
            (float32, bfloat16 or float16; float64 also on the CPU) outside autocast.
        ValueError: ``x`` is on another device than the parameters, is not 2-D
            (batch, in_features), has the wrong in_features, has an empty batch across a process
            group (``synced``), or has a batch of 1 in train mode (unless ``synced``: the batch
            statistics are those of every rank's rows, and only a global batch of 1 is refused). (A non-contiguous ``x`` is
            accepted: the forward makes one row-major copy, as ``nn.Linear`` does internally.)
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor of shape (batch, in_features), got {type(x).__name__}")
    if x.dtype != param.dtype and not (x.dtype in _AUTOCAST_DTYPES and param.dtype in _AUTOCAST_DTYPES
                                       and torch.is_autocast_enabled(x.device.type)):
        raise TypeError(f"x: expected dtype {param.dtype} (the module's parameters), got {x.dtype}")
    if x.device != param.device:
        raise ValueError(f"x: expected a tensor on {param.device} (the module's device), got one on {x.device}")
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D tensor (batch, in_features={in_features}), got shape {tuple(x.shape)}")
    if x.shape[1] != in_features:
        raise ValueError(f"x: expected in_features={in_features} columns, got shape {tuple(x.shape)}")
    if x.shape[0] == 0 and synced:
        raise ValueError(f"x: expected a non-empty batch on every rank of a process group, got shape {tuple(x.shape)}")
    if training and x.shape[0] == 1 and not synced:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)} "
            "(x: BatchNorm in train mode needs a batch of at least 2)")


def scale_shape_error(shape, kind: str, out_features: int) -> str | None:
    """What is wrong with a scale of ``shape`` for problem ``kind`` ("84" or "33") at
    ``out_features``, or None: 1 element for 84; 1 or out_features elements for 33/39, in a
    shape that multiplies the (N, out_features) output elementwise as the eager model's
    ``x * scale`` does, keeping its shape: (k,) or (1, k). A (M, 1) scale would scale rows in
    eager PyTorch (or fail to broadcast), and a third dimension would change the output's
    shape; the kernels read the scale flat, so either would be a silent difference."""
    shape = tuple(shape)
    if kind == "84" and math.prod(shape) != 1:
        return (f"expected 1 element for problem 84 (KernelBench's scale_shape=(1,); a scale a column is "
                f"problem 33/39's), got {shape}")
    if math.prod(shape) not in (1, out_features):
        return f"expected 1 element or out_features={out_features} (one a column), got {shape}"
    if len(shape) > 2 or (len(shape) == 2 and shape[0] != 1):
        return (f"expected shape (k,) or (1, k) (a column scale that broadcasts over the rows of the "
                f"(batch, out_features) output, as in x * scale), got {shape}")
    return None


def _parametrized(m: nn.Module, cls: type) -> bool:
    """Whether ``m`` is a ``cls`` with parametrizations (torch.nn.utils.parametrize makes its class a
    subclass of ``cls`` of its own; the forward reads the parametrized tensors, :meth:`_FusedBase._tensors`)."""
    return type(m).__bases__ == (cls,) and "parametrizations" in m._modules


def check_submodules(gemm: nn.Module, bn: nn.Module, softmax: nn.Module | None = None) -> None:
    """Check that a fused module's ``gemm`` and ``bn`` are what its forward reads: it takes their
    parameters and buffers and never calls them, so a replaced submodule (a LoRA or fake-quant
    Linear), a forward hook on one (pruning's mask, a hook that changes an output) or BatchNorm
    without running statistics would be ignored without a word. ``bn`` may be an
    ``nn.SyncBatchNorm`` (PyTorch's ``convert_sync_batchnorm``): the module then shares the batch
    statistics over its group (:attr:`_FusedBase.process_group`). Train or eval mode is ``bn``'s,
    as in ``nn.Sequential(nn.Linear, nn.BatchNorm1d)``: ``module.bn.eval()`` in a model in train
    mode (a frozen BatchNorm) gives eval mode's running statistics.

    ``softmax`` (problem 84's; None for 33/39) must be an ``nn.Softmax`` over dim 1 for the same
    reason. Module hooks registered globally (``torch.nn.modules.module.register_module_forward_hook``)
    reach the fused module, not these submodules, which are never called.

    Raises:
        TypeError: ``gemm`` is not exactly an ``nn.Linear`` with a bias, ``bn`` not an
            ``nn.BatchNorm1d`` or ``nn.SyncBatchNorm`` with ``affine=True`` (either may carry
            parametrizations), ``softmax`` not an ``nn.Softmax(dim=1)``, or one of them has
            forward or backward hooks (or pre-hooks).
        ValueError: ``bn`` keeps no running statistics (``track_running_stats=False``, or
            ``running_mean`` / ``running_var`` set to None), or ``bn.num_features`` is not
            ``gemm.out_features``.
    """
    if type(gemm) is not nn.Linear and not _parametrized(gemm, nn.Linear):
        raise TypeError(f"gemm: expected an nn.Linear (the fused module reads gemm.weight and gemm.bias and never "
                        f"calls gemm), got {type(gemm).__name__}")
    if (type(bn) is not nn.BatchNorm1d and type(bn) is not nn.SyncBatchNorm
            and not _parametrized(bn, nn.BatchNorm1d) and not _parametrized(bn, nn.SyncBatchNorm)):
        raise TypeError(f"bn: expected an nn.BatchNorm1d or nn.SyncBatchNorm (the fused module reads its parameters "
                        f"and buffers and never calls it), got {type(bn).__name__}")
    if softmax is not None and (type(softmax) is not nn.Softmax or softmax.dim not in (1, -1)):
        raise TypeError(f"softmax: expected nn.Softmax(dim=1) (problem 84's; the fused module computes it and never "
                        f"calls softmax), got {softmax!r}")
    for name, m in (("gemm", gemm), ("bn", bn), ("softmax", softmax)):
        if m is not None and (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks):
            raise TypeError(f"{name}: has forward or backward hooks, which the fused module would not run (it never "
                            f"calls {name}); register them on the fused module itself, or remove them "
                            f"(torch.nn.utils.prune: prune.remove makes the pruned weight permanent)")
    if gemm._parameters.get("bias") is None and "parametrizations" not in gemm._modules:
        raise TypeError("gemm: expected an nn.Linear with a bias (bias=True), as the problems' Linear; got bias=None")
    if not bn.affine:
        raise TypeError("bn: expected affine=True (the fused modules read BatchNorm's weight γ and bias β)")
    if bn.num_features != gemm.out_features:
        raise ValueError(f"bn: expected num_features == gemm.out_features = {gemm.out_features} (BatchNorm over "
                         f"the Linear's outputs), got {bn.num_features}")
    buffers = bn._buffers  # (not bn.running_mean: nn.Module.__getattr__ on the forward's hot path)
    if not bn.track_running_stats or buffers.get("running_mean") is None or buffers.get("running_var") is None:
        raise ValueError("bn: expected track_running_stats=True with running_mean and running_var (the fused "
                         "modules keep BatchNorm's running statistics)")


def _first_derivative_only(grad: torch.Tensor) -> None:
    """A hook on Y of the 16-bit train step's C++ autograd node (``SixteenBitTrain``, whose
    backward is the fused kernels' first derivative, recorded by no graph): a backward that
    autograd records to differentiate again (``create_graph=True``) raises here, before that node
    runs, where it would otherwise return gradients without their graph and so drop a gradient
    penalty's terms without a word (docs/design.md §10).

    Raises:
        RuntimeError: under ``create_graph=True``.
    """
    if torch.is_grad_enabled():
        raise RuntimeError(
            "fusedlib: a bf16/fp16 module's train-mode backward on CUDA cannot itself be differentiated "
            "(create_graph=True: a gradient penalty, double backward); compute such a term with the module in "
            "float32 outside torch.autocast (module.float(), whose backward is differentiable) or in eval mode")


#: A fused module's process group as :func:`convert_sync_batchnorm` sets it without one: the default
#: group, resolved at each forward as ``nn.SyncBatchNorm`` resolves it (a name, so the module pickles).
_DEFAULT_GROUP = "torch.distributed.group.WORLD"


class _FusedBase(nn.Module):
    """Shared forward of the fused modules: validation, then CPU algebra or CUDA kernels."""

    _kind = ""

    def _init_options(self, stage: str, precision: str, process_group=None, out_features: int = 0,
                      scale_shape=(1,)) -> None:
        algebra.check_stage_precision(stage, precision)
        shape = (scale_shape,) if isinstance(scale_shape, int) else tuple(scale_shape)
        problem = scale_shape_error(shape, self._kind, out_features)
        if problem is not None:
            raise ValueError(f"scale_shape: {problem}")
        self._stage, self._precision = stage, precision
        self.process_group = process_group

    @property
    def process_group(self):
        """Data parallelism (docs/design.md §14): the ``torch.distributed`` process group whose
        ranks share the batch, or None (this process's batch alone, the default). In train mode
        with a group of more than one rank, the batch statistics and running buffers are the
        global batch's (one all-gather of 3 × out_features floats a forward, one all-reduce a
        backward), as ``nn.SyncBatchNorm`` computes them; eval mode communicates nothing. CPU
        tensors over gloo, CUDA tensors over NCCL (one GPU a rank)."""
        group = self.__dict__.get("_process_group")  # (none in a module pickled before it existed)
        if isinstance(group, str):  # (_DEFAULT_GROUP) convert_sync_batchnorm without a group: the default one, as it is now
            import torch.distributed as dist
            return dist.group.WORLD if dist.is_available() and dist.is_initialized() else None
        return group

    @process_group.setter
    def process_group(self, group) -> None:
        if group is not None and not (isinstance(group, str) and group == _DEFAULT_GROUP) and not hasattr(group, "group_name"):
            raise TypeError(f"process_group: expected a torch.distributed ProcessGroup or None, got "
                            f"{type(group).__name__}")
        self._process_group = group

    def _sync_group(self, bn: nn.Module):
        """The process group a train-mode forward shares its batch statistics over, or None: the
        module's :attr:`process_group`, else, where ``bn`` is an ``nn.SyncBatchNorm`` (PyTorch's
        ``convert_sync_batchnorm`` put it there), its group as ``nn.SyncBatchNorm`` takes it (its
        ``process_group`` or the default group, once ``torch.distributed`` is initialized); a group
        of one rank is none."""
        if not bn.training:
            return None
        group = self.process_group
        if group is None and type(bn) is nn.SyncBatchNorm:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                group = bn.process_group or dist.group.WORLD
        return group if group is not None and group.size() > 1 else None

    def __deepcopy__(self, memo):
        """A deep copy that shares the process group (a group is the processes' connection, not
        state: it cannot be copied), so that ``copy.deepcopy`` of a converted model (an EMA copy)
        works; everything else is copied as ``nn.Module`` copies it."""
        import copy
        group = self.__dict__.get("_process_group")
        if group is not None:
            memo[id(group)] = group
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__dict__, memo))
        return new

    @property
    def stage(self) -> str:
        """Optimisation stage: ``naive``, ``fold``, ``sums`` or ``fused``."""
        return self._stage

    @stage.setter
    def stage(self, value: str) -> None:
        algebra.check_stage_precision(value, self._precision)
        self._stage = value

    @property
    def precision(self) -> str:
        """GEMM precision: ``fp32``, ``tf32`` or ``3xtf32`` (any of them in every stage)."""
        return self._precision

    @precision.setter
    def precision(self, value: str) -> None:
        algebra.check_stage_precision(self._stage, value)
        self._precision = value

    def invalidate_caches(self) -> None:
        """Does nothing, and need never be called: the module keeps nothing derived from its
        parameters or buffers between calls (each forward reads the weight as it is: 3xtf32
        splits it inside the GEMM, eval mode folds the running statistics in the GEMM's
        epilogue), so writes the version counter does not see (``optimizer.step()`` with
        ``fused=True``, writes through ``.data``) are always seen. Kept so that code written for
        fusedlib 0.1, which cached W's 3xTF32 split, still runs."""

    def bn_state(self) -> algebra.BNState:
        """The BatchNorm parameters and buffers as an :class:`algebra.BNState` (shared storage)."""
        bn = self.bn
        return algebra.BNState(bn.weight, bn.bias, bn.running_mean, bn.running_var,
                               bn.num_batches_tracked, bn.momentum, bn.eps)

    def _tensors(self) -> tuple:
        """(gemm.weight, gemm.bias, scale, bn.weight, bn.bias, bn.running_mean, bn.running_var,
        bn.num_batches_tracked), read from the modules' dictionaries rather than through
        ``nn.Module.__getattr__`` (a Python fallback per name, on the forward's hot path). A
        name that is not there (a parametrized weight, say) is looked up the usual way."""
        try:
            gemm, bn = self._modules["gemm"], self._modules["bn"]
            gp, bp, bb = gemm._parameters, bn._parameters, bn._buffers
            return (gp["weight"], gp["bias"], self._parameters["scale"], bp["weight"], bp["bias"],
                    bb["running_mean"], bb["running_var"], bb["num_batches_tracked"])
        except KeyError:
            gemm, bn = self.gemm, self.bn
            return (gemm.weight, gemm.bias, self.scale, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                    bn.num_batches_tracked)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, in_features) -> (N, out_features); see the class docstring."""
        tensors = self._tensors()
        if tensors[2].dim() != 1:  # a scale of shape (1, 1) or (1, M): the kernels take it flat (a view,
            if tensors[2].dim() > 2 or (tensors[2].dim() == 2 and tensors[2].shape[0] != 1):  # (its gradient in the scale's shape)
                raise ValueError(f"scale: {scale_shape_error(tensors[2].shape, self._kind, tensors[0].shape[0])}")
            tensors = (*tensors[:2], tensors[2].reshape(-1), *tensors[3:])
        gemm, bn = self._modules["gemm"], self._modules["bn"]
        check_submodules(gemm, bn, self._modules.get("softmax"))
        group = self._sync_group(bn)
        synced = group is not None
        if (isinstance(x, torch.Tensor) and x.is_cuda and not torch.compiler.is_compiling() and not synced
                and x.dtype == tensors[0].dtype and x.shape[0] > 0  # (another dtype: the operator's autocast rule)
                and not ops.transformed()):  # (a tangent or a torch.func transform: refused in _run)
            y = cuda.eager_forward(self, x, tensors, bn.eps, bn.momentum)  # None: the operator's way below
            if y is not None:
                if y.requires_grad:  # the 16-bit train step's C++ autograd node: a first derivative only
                    y.register_hook(_first_derivative_only)
                return y
        validate_input(x, gemm.in_features, tensors[0], bn.training, synced)
        if x.shape[0] == 0:
            return self._empty_batch(x, tensors, bn.training)
        x = x.contiguous()  # one copy for a strided or transposed input; none otherwise
        if x.is_cuda and x.dtype in algebra.LOW_PRECISION and x.dtype == tensors[0].dtype:
            return self._sixteen_bit(x, tensors, group)
        return self._run(x, tensors, group)

    def _empty_batch(self, x: torch.Tensor, tensors: tuple, training: bool) -> torch.Tensor:
        """An empty batch (N = 0), as ``nn.BatchNorm1d`` takes it: Y of shape (0, out_features) in
        the dtype a batch would get, connected to the parameters (their gradients zeros, as the
        reference's), ``num_batches_tracked`` counted in train mode, the running statistics left
        as they are (no row to average). No kernel runs."""
        weight, bias, scale, gamma, beta = tensors[:5]
        y = torch.nn.functional.linear(x, weight, bias) * scale * gamma + beta  # (0, M)
        if self._kind == "84":
            y = y.softmax(dim=1)
        if training:
            with torch.no_grad():
                tensors[7].add_(1)
        return y

    def _sixteen_bit(self, x: torch.Tensor, tensors: tuple, group) -> torch.Tensor:
        """A bf16/fp16 forward on CUDA (docs/design.md §15). x and gemm.weight go to the 16-bit
        tensor-core kernels as they are (:func:`fusedlib.cuda.sixteen_bit_kernels`: compute
        capability 8.0 or later, in_features % 8 == 0, x in the weight's dtype; exact products,
        float32 sums, whatever the module's precision); elsewhere, and across a process group,
        they are converted to float32 (exact: a bf16 or fp16 value is a TF32 value, so every
        precision multiplies them exactly) for the float32 kernels, at TF32 where the GPU has it
        (:func:`fusedlib.engine.widened_precision`: not the fp32 SIMT GEMM, several times slower
        for the same products), at the module's precision on the CPU. Everything after the GEMM
        runs in float32 either way: the vectors are widened (with the 16-bit kernels element by
        element as the kernels read them; here otherwise), the running buffers updated in float32
        and written back in their dtype, Y computed in float32 and returned in
        x's dtype promoted with the scale's. Gradients come in each tensor's dtype (the
        backward's call casts them, or autograd through the conversions here)."""
        weight, out_dtype = tensors[0], torch.promote_types(x.dtype, tensors[2].dtype)
        synced, bn = group is not None, self._modules["bn"]
        widened = synced or not cuda.sixteen_bit_kernels(x, weight)  # to float32 here, for the float32 kernels
        precision = None  # (the module's)
        if widened:
            if x.is_cuda:
                precision = engine.widened_precision(self._precision, torch.cuda.get_device_capability(x.device))
            x, weight = x.float(), weight.float()
            f32 = (weight, *(t.float() for t in tensors[1:7]), tensors[7])
        else:  # the operator takes them as they are: its kernels read 16-bit vectors in their dtype
            f32 = tensors
        y = None
        if (widened and x.is_cuda and not synced and not torch.compiler.is_compiling()
                and not torch.is_autocast_enabled("cuda") and not ops.transformed()):  # the eager call, as forward's (None: the operator)
            y = cuda.eager_forward(self, x, f32, bn.eps, bn.momentum, precision)
        if y is None:
            y = self._run(x, f32, group, precision)
        if bn.training:
            with torch.no_grad():
                for i in (5, 6):  # running_mean, running_var
                    if tensors[i] is not f32[i]:
                        tensors[i].copy_(f32[i])
        return y.to(out_dtype)

    def _run(self, x: torch.Tensor, tensors: tuple, group, precision: str | None = None) -> torch.Tensor:
        """The forward through the operators, x validated and contiguous; group: :meth:`_sync_group`'s;
        precision: the GEMM's, where it is not the module's (None; :meth:`_sixteen_bit`)."""
        bn, precision = self._modules["bn"], precision or self._precision
        if not torch.compiler.is_compiling() and ops.transformed():  # before any kernel reads a wrapped tensor
            ops.refuse_transforms((x, *tensors[:5]))
        if group is not None:  # the batch across the group's ranks (docs/design.md §14)
            return ops.sync_train(x, *tensors, self._stage, self._kind, precision, bn.eps, bn.momentum,
                                  group.group_name)
        args = (x, *tensors, self._kind, precision, bn.training, bn.eps, bn.momentum)
        if x.is_cuda and not torch.compiler.is_compiling():
            return cuda.stage_forward(self, args)
        # The CPU, and tracing (torch.compile, FakeTensor; on CUDA the device's default GEMM path)
        device = x.device.type
        if torch.compiler.is_compiling() and torch.is_autocast_enabled(device) and x.dtype == torch.float32:
            # x cast here as the operator's autocast rule would, so that the autocast dtype is in the
            # traced graph: AOTAutograd's cache keys whether autocast is on, not its dtype (torch ≤ 2.11,
            # pytorch/pytorch#181564), and served a graph traced under bf16 to an fp16 call
            args = (x.to(torch.get_autocast_dtype(device)), *args[1:])
        return ops.OPS[self._stage](*args)

    def extra_repr(self) -> str:
        """Shown by ``print(module)``: the stage, the precision (and a process group's name)."""
        group = self.process_group
        group = (", process_group=default" if isinstance(self.__dict__.get("_process_group"), str) and group is None
                 else "" if group is None else f", process_group={group.group_name!r}")
        return f"stage={self._stage!r}, precision={self._precision!r}{group}"


class FusedGemmBatchNormScalingSoftmax(_FusedBase):
    """Problem 84, ``softmax(scale · BatchNorm1d(Linear(x)))``, computed by one stage.

    Args:
        in_features, out_features, bn_eps, bn_momentum, scale_shape: as
            :class:`fusedlib.reference.GemmBatchNormScalingSoftmax`.
        stage: ``naive`` | ``fold`` | ``sums`` | ``fused`` (default ``fused``).
        precision: ``fp32`` | ``tf32`` | ``3xtf32``, the GEMM's precision (default ``fp32``;
            every stage runs each; on CUDA, tf32 and 3xtf32 need compute capability 8.0 or
            later and raise :class:`fusedlib.engine.UnsupportedPrecision` below it).
        process_group: a ``torch.distributed`` process group whose ranks share each batch
            (batch statistics across them, :attr:`process_group`), or None (default).

    Input x: (N, in_features) in the module's dtype: float32, bfloat16 or float16 (CPU: also
    float64; ``module.to(torch.bfloat16)`` makes a bf16 module, docs/design.md §15); under
    ``torch.autocast`` any of float32, bfloat16 and float16 (the Linear then runs in the
    autocast dtype, as eager autocast runs ``nn.Linear``). A non-contiguous x is copied once.
    Output: (N, out_features), in x's dtype promoted with the scale's (float32 under autocast
    for a float32 module, as eager PyTorch's).
    Train or eval mode is ``bn``'s own flag (``module.train()`` sets it; ``module.bn.eval()``
    alone freezes BatchNorm, as in ``nn.Sequential``): train mode uses the batch statistics and
    updates ``bn.running_mean``, ``bn.running_var`` and ``bn.num_batches_tracked`` like
    ``nn.BatchNorm1d``; eval mode uses the running buffers. ``gemm`` and ``bn`` hold the tensors
    and are never called (:func:`check_submodules`).

    Raises:
        ValueError/TypeError: see :func:`validate_input` and :func:`check_submodules`; unknown
            stage or precision; ``scale_shape`` of more than 1 element.
    """

    _kind = "84"

    def __init__(self, in_features, out_features, bn_eps=1e-5, bn_momentum=0.1, scale_shape=(1,), *,
                 stage: str = "fused", precision: str = "fp32", process_group=None):
        super().__init__()
        self._init_options(stage, precision, process_group, out_features, scale_shape)
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features, eps=bn_eps, momentum=bn_momentum)
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.softmax = nn.Softmax(dim=1)


class FusedGemmScaleBatchNorm(_FusedBase):
    """Problems 33 and 39, ``BatchNorm1d(Linear(x) * scale)``, computed by one stage.

    Args:
        in_features, out_features, scale_shape, eps, momentum: as
            :class:`fusedlib.reference.GemmScaleBatchNorm`.
        stage, precision, process_group: as :class:`FusedGemmBatchNormScalingSoftmax`.

    Input, output, modes and errors as :class:`FusedGemmBatchNormScalingSoftmax`.
    """

    _kind = "33"

    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1, *,
                 stage: str = "fused", precision: str = "fp32", process_group=None):
        super().__init__()
        self._init_options(stage, precision, process_group, out_features, scale_shape)
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)


def reference_kind(model: nn.Module) -> str:
    """The problem family of a module with the reference structure: ``"84"`` (it has a
    ``softmax`` that is an ``nn.Softmax`` over dim 1) or ``"33"`` (problems 33 and 39).

    The structure is KernelBench's (its own ``Model`` classes qualify, not only
    :mod:`fusedlib.reference`'s): ``gemm`` an ``nn.Linear`` with a bias, ``bn`` an
    ``nn.BatchNorm1d`` over ``gemm.out_features`` with affine weight/bias and running
    statistics, ``scale`` an ``nn.Parameter`` with 1 element (84) or ``out_features`` (33/39).

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` or lacks part of the structure; the
            message names every missing or mismatched attribute.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module with the KernelBench structure, got {type(model).__name__}")
    gemm, bn, scale = (getattr(model, a, None) for a in ("gemm", "bn", "scale"))
    problems = []
    if not isinstance(gemm, nn.Linear):
        problems.append(f"gemm: expected an nn.Linear, got {type(gemm).__name__}")
    elif gemm.bias is None:
        problems.append("gemm: expected an nn.Linear with a bias (bias=True)")
    if not isinstance(bn, nn.BatchNorm1d):
        problems.append(f"bn: expected an nn.BatchNorm1d, got {type(bn).__name__}")
    else:
        if not bn.affine:
            problems.append("bn: expected affine=True (weight γ and bias β)")
        if not bn.track_running_stats:
            problems.append("bn: expected track_running_stats=True (running_mean, running_var)")
        if isinstance(gemm, nn.Linear) and bn.num_features != gemm.out_features:
            problems.append(f"bn: expected num_features == gemm.out_features = {gemm.out_features}, "
                            f"got {bn.num_features}")
    softmax = getattr(model, "softmax", None)
    kind = "84" if isinstance(softmax, nn.Softmax) else "33"
    if kind == "84" and softmax.dim not in (1, -1):
        problems.append(f"softmax: expected nn.Softmax(dim=1), got dim={softmax.dim}")
    elif softmax is not None and kind == "33":  # (an 84 model whose softmax was replaced, nn.Identity say)
        problems.append(f"softmax: expected nn.Softmax(dim=1) (problem 84) or no softmax (33/39), got {softmax!r}")
    elif softmax is None and "softmax" in getattr(getattr(type(model).forward, "__code__", None), "co_names", ()):
        problems.append("softmax: the model's forward calls a softmax, but the model has no nn.Softmax(dim=1) "
                        "named softmax (problem 84's structure; without one the model would be read as 33/39)")
    if not isinstance(scale, nn.Parameter):
        problems.append(f"scale: expected an nn.Parameter, got {type(scale).__name__}")
    elif isinstance(gemm, nn.Linear):
        problem = scale_shape_error(scale.shape, kind, gemm.out_features)
        if problem is not None:
            problems.append(f"scale: {problem}")
    if problems:
        raise TypeError("model: not the KernelBench structure of problem 84 (gemm, bn, scale, softmax) "
                        "or 33/39 (gemm, scale, bn): " + "; ".join(problems))
    return kind


def from_reference(model: nn.Module, *, stage: str = "fused", precision: str = "fp32") -> _FusedBase:
    """Build the fused module matching a reference model, with a copy of its parameters and
    buffers (and their ``requires_grad``), on the same device and dtype and in the same
    train/eval mode, submodule by submodule (a frozen ``model.bn.eval()`` stays in eval mode).

    Args:
        model: any module with the reference structure (see :func:`reference_kind`),
            KernelBench's own ``Model`` included, its parameters and buffers in one dtype.
        stage: ``naive`` | ``fold`` | ``sums`` | ``fused``. precision: ``fp32`` | ``tf32`` | ``3xtf32``.

    Returns:
        A :class:`FusedGemmBatchNormScalingSoftmax` (problem 84) or
        :class:`FusedGemmScaleBatchNorm` (33/39), sharing no tensor with ``model``.

    Raises:
        TypeError: ``model`` lacks the reference structure (the message names what is missing),
            its ``gemm``, ``bn`` or ``softmax`` is a subclass or carries hooks or parametrizations
            (none of which the fused module would copy: :func:`check_submodules`), or it keeps its
            tensors in more than one dtype (a BatchNorm kept in float32 beside a bf16 Linear:
            convert the model to one dtype first).
        ValueError: unknown stage or precision.
    """
    kind = reference_kind(model)
    gemm, bn = model.gemm, model.bn
    # exactly nn.Linear / nn.BatchNorm1d, no hooks: a subclass's forward or a hook (pruning's mask)
    # would not be copied into the fused module, which never calls them
    check_submodules(gemm, bn, model.softmax if kind == "84" else None)
    for name, m in (("gemm", gemm), ("bn", bn)):
        if "parametrizations" in m._modules:
            raise TypeError(f"{name}: has parametrizations ({', '.join(m.parametrizations)}), which from_reference "
                            f"does not copy; remove them (torch.nn.utils.parametrize.remove_parametrizations) "
                            f"and register them on the fused module's {name} after conversion")
    if kind == "84":
        fused = FusedGemmBatchNormScalingSoftmax(
            gemm.in_features, gemm.out_features, bn.eps, bn.momentum,
            tuple(model.scale.shape), stage=stage, precision=precision)
    else:
        fused = FusedGemmScaleBatchNorm(
            gemm.in_features, gemm.out_features, tuple(model.scale.shape),
            bn.eps, bn.momentum, stage=stage, precision=precision)
    p = gemm.weight
    dtypes = {t.dtype for t in model.parameters()} | {b.dtype for n, b in model.named_buffers()
                                                     if not n.endswith("num_batches_tracked")}
    if len(dtypes) > 1:
        raise TypeError(f"model: parameters and buffers in more than one dtype ({', '.join(sorted(map(str, dtypes)))}); "
                        f"a fused module keeps one, as from_reference copies it: convert the model first "
                        f"(model.to(torch.float32), or model.to(torch.bfloat16) for a bf16 module)")
    fused.to(device=p.device, dtype=p.dtype)
    state = model.state_dict()  # the structure check above guarantees every key below
    fused.load_state_dict({k: state[k] for k in fused.state_dict()})
    fused.train(model.training)
    for name, sub in fused.named_children():  # a frozen BatchNorm (model.bn.eval() in a model in train mode)
        sub.train(model.get_submodule(name).training)
    reference = dict(model.named_parameters())
    for name, p in fused.named_parameters():  # frozen parameters stay frozen
        p.requires_grad_(reference[name].requires_grad)
    return fused


def convert_sync_batchnorm(module: nn.Module, process_group=None) -> nn.Module:
    """Data parallelism for a whole model, like ``nn.SyncBatchNorm.convert_sync_batchnorm``: every
    fused module in ``module`` (itself included) takes ``process_group`` (:attr:`process_group`
    of the fused modules) and every other BatchNorm layer becomes an ``nn.SyncBatchNorm`` over
    the same group (PyTorch's converter). Returns the module (a new one only where ``module`` is
    itself a plain BatchNorm layer).

    Args:
        module: any ``nn.Module``.
        process_group: a ``torch.distributed`` process group, or None: the default group
            (``torch.distributed.group.WORLD``) as it is at each forward, as ``nn.SyncBatchNorm``
            takes it. The model can then be converted before ``init_process_group``, saved whole
            with ``torch.save``, and run in one process (sharing nothing).
    """
    if isinstance(module, _FusedBase):
        module.process_group = _DEFAULT_GROUP if process_group is None else process_group
        return module
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    for name, child in module.named_children():
        module.add_module(name, convert_sync_batchnorm(child, process_group))
    return module
