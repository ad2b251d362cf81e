"""Data-parallel BatchNorm (docs/design.md §14), the specification on the CPU: every rank forms its
columns' moments (n, mean, M2) from its own rows, one collective gathers them, and every rank
merges them in rank order (:func:`fusedlib.algebra.merge_ranks`); the backward sums
[S1; S2; Σx; N] in one collective. Checked against one process on the concatenated batch:
ranks simulated in one process (every stage, both families, uneven batches, a rank of one row,
a rank of none), then the same through ``torch.distributed`` with gloo in 2 and 3 processes."""
from __future__ import annotations

import copy

import pytest
import torch

from fusedlib import algebra
from fusedlib.lab import sync_demo

SHARDS = [(20, 1, 16), (37,), (5, 0, 32)]  # per-rank batches: uneven, one row, none


class _Gathered(Exception):
    """Raised by the collecting collective: this rank's contribution was taken."""


def _problem(kind: str, n: int, k: int = 5, m: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, k, generator=g, dtype=torch.float64) * 2 + 3  # columns off zero
    weight = torch.randn(m, k, generator=g, dtype=torch.float64)
    bias = torch.randn(m, generator=g, dtype=torch.float64)
    scale = torch.randn(1 if kind == "84" else m, generator=g, dtype=torch.float64)
    bn = algebra.BNState(weight=torch.rand(m, generator=g, dtype=torch.float64) + 0.5,
                         bias=torch.randn(m, generator=g, dtype=torch.float64),
                         running_mean=torch.randn(m, generator=g, dtype=torch.float64),
                         running_var=torch.rand(m, generator=g, dtype=torch.float64) + 0.5,
                         num_batches_tracked=torch.tensor(3), eps=1e-5, momentum=0.1)
    return x, weight, bias, scale, bn


def _simulated(step, ranks: int):
    """Run ``step(rank, collective)`` for every rank in one process, where ``collective`` stands
    for the ranks' one collective: a first round collects each rank's tensor, a second gives every
    rank the gathered (R, …) tensor. Returns each rank's result and the gathered tensor."""
    sent = []

    def collect(t):
        sent.append(t)
        raise _Gathered

    for r in range(ranks):
        with pytest.raises(_Gathered):
            step(r, collect)
    gathered = torch.stack(sent)

    def give(r):
        def collective(t):
            assert torch.equal(t, gathered[r])  # the same contribution as in the first round
            return gathered
        return collective

    return [step(r, give(r)) for r in range(ranks)], gathered


@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("stage", algebra.STAGES)
@pytest.mark.parametrize("shards", SHARDS, ids=lambda s: "+".join(map(str, s)))
def test_ranks_merged_in_order_equal_one_process(kind, stage, shards):
    """Outputs, running buffers and num_batches_tracked of R ranks equal one process's on the
    concatenated batch (float64: to rounding), and every rank holds the same buffers bit for bit."""
    n = sum(shards)
    x, weight, bias, scale, bn = _problem(kind, n)
    one = copy.deepcopy(bn)
    want = algebra.stage_forward(kind, stage, x, weight, bias, scale, one, True)
    bounds = torch.tensor([0, *shards]).cumsum(0).tolist()
    bns = [copy.deepcopy(bn) for _ in shards]

    def step(r, gather):
        b = copy.deepcopy(bns[r])  # a first round must leave the buffers as they were
        y = algebra.stage_forward(kind, stage, x[bounds[r]:bounds[r + 1]], weight, bias, scale, b, True,
                                  gather=gather)
        bns[r] = b
        return y

    ys, gathered = _simulated(step, len(shards))
    assert gathered.shape == (len(shards), 3, weight.shape[0])
    assert torch.allclose(torch.cat(ys), want, rtol=1e-12, atol=1e-13)
    for b in bns:
        assert torch.equal(b.running_mean, bns[0].running_mean) and torch.equal(b.running_var, bns[0].running_var)
        assert int(b.num_batches_tracked) == int(one.num_batches_tracked) == 4
    assert torch.allclose(bns[0].running_mean, one.running_mean, rtol=1e-12, atol=1e-13)
    assert torch.allclose(bns[0].running_var, one.running_var, rtol=1e-12, atol=1e-13)


def test_global_batch_of_one_row_is_refused():
    x, weight, bias, scale, bn = _problem("84", 1)
    gathered = torch.stack([algebra.column_moments(x @ weight.t()), algebra.column_moments((x @ weight.t())[:0])])
    with pytest.raises(ValueError, match="global batch of 1"):
        algebra.stage_forward("84", "fused", x, weight, bias, scale, bn, True, gather=lambda t: gathered)


def test_merge_ranks_is_chan_in_rank_order():
    """Two ranks: Chan's pair formula; an empty rank is passed over; the order is fixed."""
    z = torch.randn(30, 4, dtype=torch.float64)
    parts = torch.stack([algebra.column_moments(z[:11]), algebra.column_moments(z[11:11]),
                         algebra.column_moments(z[11:])])
    mean, var, n = algebra.merge_ranks(parts)
    assert n == 30
    assert torch.allclose(mean, z.mean(0), rtol=1e-14) and torch.allclose(var, z.var(0, unbiased=False), rtol=1e-13)
    assert parts[1].abs().sum() == 0


@pytest.mark.parametrize("shards", [(20, 1, 16), (1, 37), (5, 300)], ids=lambda s: "+".join(map(str, s)))
@pytest.mark.parametrize("tile_rows", [None, 32])
def test_shifted_rank_moments_merge_to_the_shifted_batch(shards, tile_rows):
    """Every rank's message about rank 0's first row x₀ (:func:`fusedlib.algebra.shifted_rank_moments`:
    all of a rank's rows shifted, its first too, on every rank but 0) merges in rank order into the
    moments of D = (X − x₀)Wᵀ over the concatenated batch, a rank of one row included; the
    variance is Z's, the mean Z's less z₀ = x₀Wᵀ."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(sum(shards), 7, generator=g, dtype=torch.float64) * 2 + 3
    w = torch.randn(6, 7, generator=g, dtype=torch.float64)
    x0, z = x[0], x @ w.t()
    parts = torch.stack([algebra.shifted_rank_moments(xr, w, x0, tile_rows=tile_rows)
                         for xr in torch.split(x, shards)])
    assert parts[:, 0, 0].tolist() == list(map(float, shards))
    mean, var, n = algebra.merge_ranks(parts)
    assert n == sum(shards)
    assert torch.allclose(mean, z.mean(0) - x0 @ w.t(), rtol=1e-12, atol=1e-12)
    assert torch.allclose(var, z.var(0, unbiased=False), rtol=1e-12, atol=1e-12)


def test_a_shared_shift_keeps_fp32_accuracy_across_ranks():
    """The kernels' frame (docs/design.md §14), in float32 on inputs 1000 standard deviations off
    zero, two ranks of 1000 and 24 rows: every rank shifted by rank 0's first row
    (:func:`fusedlib.algebra.shifted_rank_moments`) normalises within 1e-6 of float64; each rank
    shifted by its own first row, its mean moved back by its own x₀Wᵀ before the merge, misses
    fp32's 1e-5 budget (the two x₀Wᵀ, ≈ 1000σ, differ by their roundings)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 192, generator=g) + 1000
    w = torch.randn(64, 192, generator=g) / 192 ** 0.5
    z64 = x.double() @ w.double().t()
    y64 = (z64 - z64.mean(0)) / z64.var(0, unbiased=False).sqrt()
    ranks = torch.split(x, (1000, 24))
    x0 = ranks[0][0]

    def error(y):
        return ((y.double() - y64).norm() / y64.norm()).item()

    shared = torch.stack([algebra.shifted_rank_moments(xr, w, x0) for xr in ranks])
    mean, var, n = algebra.merge_ranks(shared)
    assert n == 1024
    y_shared = torch.cat([((xr - x0) @ w.t() - mean) / var.sqrt() for xr in ranks])
    own, frames = [], []
    for xr in ranks:
        d, z0 = (xr - xr[0]) @ w.t(), xr[0] @ w.t()
        m = algebra.column_moments(d)
        own.append(torch.stack([m[0], m[1] + z0, m[2]]))
        frames.append((d, z0))
    mean_o, var_o, _ = algebra.merge_ranks(torch.stack(own))
    y_own = torch.cat([(d - (mean_o - z0)) / var_o.sqrt() for d, z0 in frames])
    assert error(y_shared) < 1e-6 < 1e-5 < error(y_own)


def _backward(kind, dy, y, zc, var, x, weight, scale, bn, reduce=None):
    return algebra.train_backward_fused(kind, dy, y, zc, var, x, weight, scale, bn.weight, bn.bias, bn.eps,
                                        reduce=reduce)


@pytest.mark.parametrize("kind", ["84", "33"])
@pytest.mark.parametrize("shards", SHARDS[:1] + SHARDS[2:], ids=lambda s: "+".join(map(str, s)))
def test_backward_with_one_reduction_equals_one_process(kind, shards):
    """Each rank's dX is one process's dX of its rows; dW, dγ, dβ and ds summed over the ranks
    (what DistributedDataParallel does) are one process's; the bias's gradient stays zero."""
    n = sum(shards)
    x, weight, bias, scale, bn = _problem(kind, n, seed=1)
    y = algebra.stage_forward(kind, "fused", x, weight, bias, scale, copy.deepcopy(bn), True)
    z = x @ weight.t()
    zc = z - z.mean(0)
    var = zc.pow(2).mean(0)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    want = _backward(kind, dy, y, zc, var, x, weight, scale, bn)
    bounds = torch.tensor([0, *shards]).cumsum(0).tolist()
    rows = [slice(bounds[r], bounds[r + 1]) for r in range(len(shards))]
    grads, _ = _simulated(lambda r, gathered: _backward(
        kind, dy[rows[r]], y[rows[r]], zc[rows[r]], var, x[rows[r]], weight, scale, bn,
        reduce=lambda t: gathered(t).sum(0)), len(shards))
    assert torch.allclose(torch.cat([g[0] for g in grads]), want[0], rtol=1e-10, atol=1e-12)  # dx
    for i in (1, 3, 4, 5):  # dweight, dscale, dgamma, dbeta: the ranks' parts sum to the whole
        assert torch.allclose(sum(g[i] for g in grads), want[i], rtol=1e-10, atol=1e-12), i
    assert all(torch.equal(g[2], torch.zeros_like(g[2])) for g in grads)


# ---------------------------------------------------------------------------------- gloo processes

def _worker(rank: int, world: int, shards, kind: str, stage: str, out: str) -> None:
    import torch.distributed as dist
    n = sum(shards)
    x, weight, bias, scale, bn = _problem(kind, n, seed=3)
    lo = sum(shards[:rank])
    xr = x[lo:lo + shards[rank]]

    def gather(t):
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t)
        return torch.stack(parts)

    def reduce(t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    y = algebra.stage_forward(kind, stage, xr, weight, bias, scale, bn, True, gather=gather)
    mean, var, _ = algebra.merge_ranks(gather(algebra.column_moments(xr @ weight.t())))
    dy = torch.randn(n, y.shape[1], generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    grads = _backward(kind, dy[lo:lo + shards[rank]], y, xr @ weight.t() - mean, var, xr, weight, scale, bn,
                      reduce=reduce)
    torch.save({"y": y, "running_mean": bn.running_mean, "running_var": bn.running_var, "grads": grads},
               f"{out}/rank{rank}.pt")


@pytest.mark.parametrize("kind,stage,shards", [("84", "fused", (9, 1)), ("33", "sums", (7, 12, 3)),
                                               ("84", "naive", (4, 4, 4)), ("33", "fused", (3, 1, 10, 6))])
def test_gloo_processes_equal_one_process(kind, stage, shards, tmp_path):
    """The same through torch.distributed's all_gather and all_reduce, gloo, one process a rank."""
    world = len(shards)
    sync_demo.spawn_ranks(_worker, world, shards, kind, stage, str(tmp_path))
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    n = sum(shards)
    x, weight, bias, scale, bn = _problem(kind, n, seed=3)
    y = algebra.stage_forward(kind, stage, x, weight, bias, scale, bn, True)
    assert torch.allclose(torch.cat([g["y"] for g in got]), y, rtol=1e-12, atol=1e-13)
    for g in got:
        assert torch.equal(g["running_mean"], got[0]["running_mean"]) and torch.equal(g["running_var"], got[0]["running_var"])
    assert torch.allclose(got[0]["running_mean"], bn.running_mean, rtol=1e-12, atol=1e-13)
    assert torch.allclose(got[0]["running_var"], bn.running_var, rtol=1e-12, atol=1e-13)
    z = x @ weight.t()
    zc = z - z.mean(0)
    dy = torch.randn(n, y.shape[1], generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    want = _backward(kind, dy, y, zc, zc.pow(2).mean(0), x, weight, scale, bn)
    assert torch.allclose(torch.cat([g["grads"][0] for g in got]), want[0], rtol=1e-10, atol=1e-12)
    for i in (1, 3, 4, 5):
        assert torch.allclose(sum(g["grads"][i] for g in got), want[i], rtol=1e-10, atol=1e-12), i


# ---------------------------------------------------------------------------------- the modules

@pytest.mark.parametrize("kind,stage,shards", [("84", "fused", (9, 1)), ("33", "naive", (7, 12, 3)),
                                               ("33", "fold", (6, 6)), ("84", "sums", (2, 11, 5))])
def test_module_under_a_process_group_equals_one_process(kind, stage, shards):
    """A fused module with ``convert_sync_batchnorm`` in R gloo processes
    (:func:`fusedlib.lab.sync_demo.run_ranks`): each rank's output and dX are one process's on
    the concatenated batch, the running buffers too (and the same on every rank), and the
    parameters' gradients summed over the ranks are one process's. At world size 2 the fused
    stage runs under ``torch.compile(fullgraph=True)``."""
    ranks = sync_demo.run_ranks(kind, stage, shards, compile_it=len(shards) == 2 and stage == "fused")
    diff = sync_demo.compare(ranks, sync_demo.one_process(kind, stage, sum(shards)))
    assert diff.pop("buffers equal on every rank")
    assert max(diff.values()) <= 1e-12, diff
    assert set(diff) >= {"Y", "dX", "d gemm.weight", "d scale", "d bn.weight", "bn.running_mean"}


def _ddp_worker(rank: int, world: int, n: int, out: str) -> None:
    import fusedlib
    fused = fusedlib.convert_sync_batchnorm(sync_demo._model("84", "fused"))
    ddp = torch.nn.parallel.DistributedDataParallel(fused)
    lo, hi = n * rank // world, n * (rank + 1) // world
    torch.save(_train(ddp, fused, slice(lo, hi), world, n), f"{out}/rank{rank}.pt")


def _train(model, module, rows: slice, world: int, n: int) -> dict:
    """50 steps of SGD with momentum on the mean squared error over the global batch of n rows
    (each rank's loss × world: DistributedDataParallel averages the ranks' gradients)."""
    import torch.distributed as dist
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(50):
        xs = torch.randn(n, 5, generator=torch.Generator().manual_seed(100 + step), dtype=torch.float64) + 2
        t = torch.randn(n, 6, generator=torch.Generator().manual_seed(200 + step), dtype=torch.float64)
        loss = (model(xs[rows]) - t[rows]).pow(2).sum() * world / n
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach() / world
        if world > 1:
            dist.all_reduce(total)
        losses.append(total.item())
    return {"losses": losses, "state": module.state_dict()}


def test_ddp_training_tracks_one_process(tmp_path):
    """50 SGD steps of 84's fused module under DistributedDataParallel on 2 gloo ranks of 8 rows
    each track one process on the 16 rows: losses and final parameters and buffers."""
    sync_demo.spawn_ranks(_ddp_worker, 2, 16, str(tmp_path))
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    one = sync_demo._model("84", "fused")
    want = _train(one, one, slice(0, 16), 1, 16)
    assert got[0]["losses"] == pytest.approx(want["losses"], rel=1e-9)
    for name, v in want["state"].items():
        assert torch.equal(got[0]["state"][name], got[1]["state"][name]), name
        assert torch.allclose(got[0]["state"][name].double(), v.double(), rtol=1e-8, atol=1e-10), name


def test_process_group_is_checked_and_shown():
    import fusedlib
    with pytest.raises(TypeError, match="process_group: expected a torch.distributed ProcessGroup"):
        fusedlib.FusedGemmBatchNormScalingSoftmax(4, 3, process_group="world")


def test_a_model_converted_for_the_default_group_is_saved_and_run_alone():
    """convert_sync_batchnorm without a group, as nn.SyncBatchNorm's converter: before
    init_process_group, the group resolved at the forward; the model pickles whole
    (torch.save) and, in one process, computes what it computed before conversion."""
    import io

    import fusedlib
    module = fusedlib.FusedGemmScaleBatchNorm(4, 3, (3,)).double()
    before = copy.deepcopy(module)
    converted = fusedlib.convert_sync_batchnorm(module)
    assert converted.process_group is None and "process_group=default" in repr(converted)
    buffer = io.BytesIO()
    torch.save(converted, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.randn(6, 4, dtype=torch.float64)
    for m in (converted, loaded):
        torch.testing.assert_close(m(x), before(x), rtol=1e-12, atol=1e-12)


def _pytorch_converter_worker(rank: int, world: int, out: str) -> None:
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(sync_demo._model("33", "fused"))
    x = torch.randn(12, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 2
    y = model(x[6 * rank:6 * rank + 6])
    torch.save({"y": y.detach(), "bn type": type(model.bn).__name__, "group": model.process_group,
                "buffers": {k: v for k, v in model.state_dict().items() if k.startswith("bn.running")}},
               f"{out}/rank{rank}.pt")


def test_pytorch_sync_batchnorm_converter_shares_the_batch(tmp_path):
    """nn.SyncBatchNorm.convert_sync_batchnorm (what DDP recipes call) puts an nn.SyncBatchNorm in
    a fused module's bn: on 2 gloo ranks of 6 rows the module then takes the statistics of all
    12, as fusedlib.convert_sync_batchnorm's group does: each rank's rows of one process's output,
    and its running buffers."""
    sync_demo.spawn_ranks(_pytorch_converter_worker, 2, str(tmp_path))
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    one = sync_demo._model("33", "fused")
    x = torch.randn(12, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 2
    want = one(x).detach()
    assert got[0]["bn type"] == "SyncBatchNorm" and got[0]["group"] is None
    torch.testing.assert_close(torch.cat([g["y"] for g in got]), want, rtol=1e-10, atol=1e-12)
    for name in ("running_mean", "running_var"):
        for g in got:
            torch.testing.assert_close(g["buffers"][f"bn.{name}"], getattr(one.bn, name), rtol=1e-10, atol=1e-12)


def _copy_worker(rank: int, world: int, out: str) -> None:
    import fusedlib
    fused = fusedlib.convert_sync_batchnorm(fusedlib.FusedGemmScaleBatchNorm(4, 3, (3,)))
    twin = copy.deepcopy(fused)  # an EMA copy, say
    same = twin.process_group is fused.process_group
    separate = twin.gemm.weight is not fused.gemm.weight and torch.equal(twin.gemm.weight, fused.gemm.weight)
    torch.save({"same group": same, "separate parameters": separate, "repr": repr(twin)}, f"{out}/copy.pt")


def test_deepcopy_shares_the_process_group(tmp_path):
    """``copy.deepcopy`` of a converted module (a process group cannot be copied): the copy shares
    the group and has parameters of its own."""
    sync_demo.spawn_ranks(_copy_worker, 1, str(tmp_path))
    got = torch.load(tmp_path / "copy.pt")
    assert got["same group"] and got["separate parameters"] and "process_group=" in got["repr"]


def _autocast_worker(rank: int, world: int, out: str) -> None:
    import fusedlib
    torch.manual_seed(0)
    module = fusedlib.convert_sync_batchnorm(fusedlib.FusedGemmBatchNormScalingSoftmax(8, 6))
    x = torch.randn(12, 8, generator=torch.Generator().manual_seed(1)) + 2
    rows = x[rank * 6:(rank + 1) * 6].clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = module(rows)
    (y * torch.arange(y.numel()).reshape(y.shape).sin()[None][0]).sum().backward()
    torch.save({"y": y.detach(), "dx": rows.grad, "dw": module.gemm.weight.grad,
                "running_mean": module.bn.running_mean.clone()}, f"{out}/rank{rank}.pt")


def test_autocast_under_a_process_group(tmp_path):
    """Under ``torch.autocast("cpu", bfloat16)`` the data-parallel operator takes the autocast rule
    of the stage operators (x, W and b in bf16; BatchNorm in float32): two gloo ranks give one
    process's float32 output, dX and running mean on the concatenated batch, and its dW within
    bf16's rounding (each rank's part comes in bf16, W's dtype under autocast, as eager's)."""
    import fusedlib
    sync_demo.spawn_ranks(_autocast_worker, 2, str(tmp_path))
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    torch.manual_seed(0)
    module = fusedlib.FusedGemmBatchNormScalingSoftmax(8, 6)
    x = (torch.randn(12, 8, generator=torch.Generator().manual_seed(1)) + 2).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = module(x)
    assert y.dtype == torch.float32 and got[0]["y"].dtype == torch.float32
    weights = torch.cat([torch.arange(36).reshape(6, 6).sin()] * 2)
    (y * weights).sum().backward()
    assert torch.allclose(torch.cat([g["y"] for g in got]), y.detach(), rtol=1e-4, atol=1e-6)
    assert torch.allclose(torch.cat([g["dx"] for g in got]), x.grad, rtol=1e-3, atol=1e-5)
    dw, want = got[0]["dw"] + got[1]["dw"], module.gemm.weight.grad  # each rank's part rounded to bf16 (as eager's)
    assert ((dw - want).norm() / want.norm()).item() <= 2 * 2 ** -8
    assert torch.equal(got[0]["running_mean"], got[1]["running_mean"])
    assert torch.allclose(got[0]["running_mean"], module.bn.running_mean, rtol=1e-4, atol=1e-6)


def _create_graph_worker(rank: int, world: int, out: str) -> None:
    import fusedlib
    torch.manual_seed(0)
    module = fusedlib.convert_sync_batchnorm(fusedlib.FusedGemmBatchNormScalingSoftmax(8, 6))
    rows = (torch.randn(5, 8, generator=torch.Generator().manual_seed(rank)) + 2).requires_grad_()
    try:
        torch.autograd.grad(module(rows).pow(2).sum(), rows, create_graph=True)
        message = None
    except RuntimeError as err:
        message = str(err)
    torch.save({"message": message}, f"{out}/rank{rank}.pt")


def test_create_graph_across_a_process_group_is_refused(tmp_path):
    """A backward that would itself be differentiated (create_graph=True) across a process group
    raises on every rank, naming what to do, rather than giving a first-order gradient without its
    graph (a gradient penalty dropped without a word)."""
    sync_demo.spawn_ranks(_create_graph_worker, 2, str(tmp_path))
    for r in range(2):
        message = torch.load(tmp_path / f"rank{r}.pt")["message"]
        assert message is not None and "create_graph=True" in message and "process_group" in message, message
