"""Data parallelism on GPUs (docs/design.md §14): the fused modules under
``fusedlib.convert_sync_batchnorm`` in R processes, one GPU each, over NCCL.

A world size runs all its cases in one spawn (NCCL's set-up and the kernels' load once). A case
is (problem, stage, precision, per-rank batches, offset, GEMM path: the GPU's default, and at
world size 2 mma.sync too; at world size 2 also rank 1 with one row and with many row tiles,
whose GEMM takes rank 0's first row as its external shift row, :data:`EXTERNAL_SHIFT`): each
rank holds its rows of one batch and runs one train step (forward, backward of Σ Y∘dY), keeping
its Y, dX, its part of every parameter's gradient and the running buffers. Checked:

* against float64 (the KernelBench model on the concatenated batch, on the CPU) within the
  forward's budgets, ``check.case_budget(precision, noise)`` = max(BUDGET, 2·noise), noise
  being PyTorch's own error on the same quantity at the precision (``check.run_grad_case``'s
  rule: fp32 for fp32 and 3xtf32, for tf32 its module with X and W rounded to TF32); with the columns far off zero
  (offset 1000) fp32 and 3xtf32 held to BUDGET itself, which only a shift shared by the ranks
  meets (PyTorch's own error there is far larger). The scale's gradient at fp32 and 3xtf32 is a
  sum over the batch whose terms t cancel: its budget is at least u·κ, κ = ‖Σ|t|‖ / ‖Σ t‖ its
  condition number on the centred rows (float64; the offset's own cancellation is the one the
  shift removes, which the budget is there to test) and u = 2⁻²⁴: the error of any fp32
  evaluation that rounds each term once (:func:`_scale_grad_condition`). For 33 (one sum a
  column) u·κ stays below BUDGET; for 84 (one sum over the whole batch) it is 3e-5 to 4e-5 at
  256 to 1824 rows and 1.0e-3 at 5724 (κ = 17 400 at this seed), where PyTorch's own fp32 step
  misses by 1e-5 to 1e-4 on the centred rows, depending on its summation order;
* against one GPU on the concatenated batch (the same module without a group) within the same
  budget, and against DistributedDataParallel's usual way, the reference model with
  ``nn.SyncBatchNorm`` at the precision, within the budget plus that peer's own error;
* running buffers bit for bit the same on every rank.

Then at world size 2: the forward under ``torch.compile(fullgraph=True)`` and captured in a CUDA
graph, and 50 steps of DistributedDataParallel training that track one GPU.
Marked gpu; needs 2 CUDA devices (4 for the world-size-4 cases), on a machine with several GPUs.
With ``FUSEDLIB_SYNC_BACKEND=gloo`` the same cases run over gloo, the ranks sharing the GPUs
there are (rank r on GPU r mod their count; one GPU is enough): the kernels' data-parallel
arithmetic and their collectives' glue, checked on any single-GPU machine, but not NCCL (gloo
moves CUDA tensors through the host) and not a CUDA graph (a gloo collective cannot be captured:
those checks are left out). The record names the backend.
"""
from __future__ import annotations

import contextlib
import copy
import os

import pytest
import torch

from fusedlib import algebra, check
from fusedlib.lab import sync_demo

pytestmark = pytest.mark.gpu

K, M = 192, 320
#: the process group's backend: "nccl" (one GPU a rank), or "gloo" (ranks may share a GPU)
BACKEND = os.environ.get("FUSEDLIB_SYNC_BACKEND", "nccl")
if BACKEND not in ("nccl", "gloo"):
    raise ValueError(f"FUSEDLIB_SYNC_BACKEND: expected 'nccl' or 'gloo', got {BACKEND!r}")


def _device(rank: int) -> torch.device:
    """Rank ``rank``'s GPU, made current: GPU ``rank`` over NCCL, GPU ``rank`` mod the count over gloo."""
    dev = torch.device("cuda", rank if BACKEND == "nccl" else rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def _enough_devices(world: int) -> None:
    """Skip unless this machine can run ``world`` ranks over :data:`BACKEND`."""
    need = world if BACKEND == "nccl" else 1
    if torch.cuda.device_count() < need:
        pytest.skip(f"needs {need} CUDA devices over {BACKEND}, this machine has {torch.cuda.device_count()}")
#: per-rank batches at each world size: uneven, a rank of one row
SHARDS = {2: [(1000, 24), (1, 63)], 4: [(5, 300, 1, 77)]}
PRECISIONS = ("fp32", "tf32", "3xtf32")


#: at world size 2, rank 1's rows under the shared first-row shift (rank 0's row, external to rank
#: 1's GEMM: every one of its rows shifted, its first too): one row; many row tiles, a multiple of
#: none (1800 rows: 29 of the SIMT GEMM's 64-row tiles, 15 of the tensor cores' 128-row ones; and
#: at fp32 5700 rows, 45 of the SIMT GEMM's 128-row tiles, in _cases)
EXTERNAL_SHIFT = [(63, 1), (24, 1800)]


def _cases(world: int) -> list[tuple]:
    """(problem, stage, precision, per-rank batches, offset, GEMM path): each GPU's default path
    ("auto"), and at world size 2 the tensor-core precisions also on mma.sync."""
    cases = [(kind, stage, prec, shards, 3.0, "auto") for shards in SHARDS[world] for kind in ("84", "33")
             for stage in algebra.STAGES for prec in PRECISIONS]
    if world == 2:  # columns far off zero: the shared shift's test; the other tensor-core path
        cases += [(kind, "fused", prec, shards, 1000.0, "auto") for shards in [(200, 56), *EXTERNAL_SHIFT]
                  for kind in ("84", "33") for prec in ("fp32", "3xtf32")]
        cases += [(kind, "fused", "fp32", (24, 5700), 1000.0, "auto") for kind in ("84", "33")]
        cases += [(kind, stage, prec, EXTERNAL_SHIFT[0], 3.0, "auto") for kind in ("84", "33")
                  for stage in algebra.STAGES for prec in ("fp32", "3xtf32")]
        cases += [(kind, stage, prec, (1000, 24), 3.0, "mma") for kind in ("84", "33") for stage in algebra.STAGES
                  for prec in ("tf32", "3xtf32")]
        cases += [(kind, "fused", "3xtf32", shards, 1000.0, "mma") for shards in EXTERNAL_SHIFT for kind in ("84", "33")]
    return cases


@contextlib.contextmanager
def _path(path: str):
    """$FUSEDLIB_GEMM_PATH set to ``path`` inside the block (fusedlib.engine.forced_path)."""
    saved = os.environ.get("FUSEDLIB_GEMM_PATH")
    os.environ["FUSEDLIB_GEMM_PATH"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("FUSEDLIB_GEMM_PATH")
        else:
            os.environ["FUSEDLIB_GEMM_PATH"] = saved


def _reference(kind: str):
    from fusedlib.reference import make_reference
    ref = make_reference(kind, K, M, seed=11)
    with torch.no_grad():
        ref.bn.weight.copy_(torch.rand(M, generator=torch.Generator().manual_seed(12)) + 0.5)
        ref.bn.bias.copy_(torch.randn(M, generator=torch.Generator().manual_seed(13)))
    return ref


def _batch(n: int, offset: float):
    g = torch.Generator().manual_seed(14)
    return torch.randn(n, K, generator=g) + offset, torch.randn(n, M, generator=g)


def _step(model, x: torch.Tensor, dy: torch.Tensor) -> dict:
    x = x.clone().requires_grad_()
    y = model(x)
    (y * dy).sum().backward()
    return {"y": y.detach().cpu().double(), "dx": x.grad.cpu().double(),
            "grads": {n: p.grad.cpu().double() for n, p in model.named_parameters()},
            "buffers": {n: b.cpu().clone() for n, b in model.named_buffers()}}


def _fused(kind, stage, precision, group: bool):
    import fusedlib
    module = fusedlib.from_reference(_reference(kind), stage=stage, precision=precision).cuda().train()
    return fusedlib.convert_sync_batchnorm(module) if group else module


def _worker(rank: int, world: int, cases: list, out: str) -> None:
    from fusedlib import engine
    dev = _device(rank)
    results = []
    for kind, stage, precision, shards, offset, path in cases:
        x, dy = _batch(sum(shards), offset)
        lo, hi = sum(shards[:rank]), sum(shards[:rank + 1])
        xr, dyr = x[lo:hi].to(dev), dy[lo:hi].to(dev)
        with _path(path):
            fused = _step(_fused(kind, stage, precision, True), xr, dyr)
        peer = torch.nn.SyncBatchNorm.convert_sync_batchnorm(_reference(kind)).to(dev).train()
        with engine.cublas_precision(precision):
            peer = _step(peer, xr, dyr)
        results.append({"fused": fused, "peer": peer})
    torch.save(results, f"{out}/rank{rank}.pt")


@pytest.fixture(scope="module", params=sorted(SHARDS))
def world_results(request, tmp_path_factory):
    world = request.param
    _enough_devices(world)
    out = tmp_path_factory.mktemp(f"sync{world}")
    cases = _cases(world)
    sync_demo.spawn_ranks(_worker, world, cases, str(out), backend=BACKEND)
    ranks = [torch.load(out / f"rank{r}.pt") for r in range(world)]
    return world, cases, ranks


def _record(key: str, record: dict) -> None:
    """With $FUSEDLIB_SYNC_VALIDATION_OUT set, add ``record`` under ``key`` to that JSON file
    (the GPU and torch named), for results/<gpu>/sync_validation.json."""
    import json
    import os
    from pathlib import Path
    path = os.environ.get("FUSEDLIB_SYNC_VALIDATION_OUT")
    if not path:
        return
    from fusedlib.build import sources_sha256
    data = json.loads(Path(path).read_text()) if Path(path).exists() else {}
    data["sources_sha256"] = sources_sha256()  # the kernels these cases ran (tests/test_sources.py)
    data[key] = {**record, "gpu": torch.cuda.get_device_name(), "devices": torch.cuda.device_count(),
                 "backend": BACKEND, "torch": torch.__version__}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def _noise_step(kind: str, precision: str, x: torch.Tensor, dy: torch.Tensor) -> dict:
    """PyTorch's own step at the precision (check.run_grad_case's rule): the reference model in fp32
    for fp32 and 3xtf32; for tf32 with X and W rounded to TF32, what its tensor cores read."""
    model = _reference(kind)
    if precision == "tf32":
        with torch.no_grad():
            model.gemm.weight.copy_(algebra.truncate_tf32(model.gemm.weight))
    return _step(model, algebra.truncate_tf32(x) if precision == "tf32" else x, dy)


def _scale_grad_condition(kind: str, x: torch.Tensor, dy: torch.Tensor) -> float:
    """κ = ‖Σ_i |t_i|‖ / ‖Σ_i t_i‖ of the scale's gradient over the batch x, in float64: the sum of
    the terms t = ∂L/∂V ∘ B over the rows (84: V = scale·B, B = BatchNorm(Z); 33: V = Z·scale,
    B = Z), L = Σ Y∘dY, in train mode."""
    model = copy.deepcopy(_reference(kind)).double().train()
    x, dy = x.double(), dy.double()
    with torch.no_grad():
        b = model.gemm(x)
        if kind == "84":
            b = model.bn(b)
    v = (model.scale.detach() * b).requires_grad_()
    y = model.softmax(v) if kind == "84" else model.bn(v)
    (grad,) = torch.autograd.grad((y * dy).sum(), v)
    terms = (grad * b).reshape(-1, model.scale.numel())
    return float(terms.abs().sum(0).norm() / terms.sum(0).norm())


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _merged(ranks: list[dict], key: str) -> dict:
    """The ranks' step as one: Y and dX concatenated, gradients summed, rank 0's buffers."""
    parts = [r[key] for r in ranks]
    return {"y": torch.cat([p["y"] for p in parts]), "dx": torch.cat([p["dx"] for p in parts]),
            "grads": {n: sum(p["grads"][n] for p in parts) for n in parts[0]["grads"]},
            "buffers": parts[0]["buffers"]}


def test_ranks_equal_float64_one_gpu_and_syncbatchnorm(world_results):
    """Every case at this world size: see the module docstring."""
    from fusedlib import engine
    world, cases, ranks = world_results
    failures, worst = [], 0.0
    for i, (kind, stage, precision, shards, offset, path) in enumerate(cases):
        name = f"{kind}/{stage}/{precision}/{'+'.join(map(str, shards))}/offset {offset:g}/{path}"
        per_rank = [r[i] for r in ranks]
        for r in per_rank[1:]:
            for b, v in r["fused"]["buffers"].items():
                if not torch.equal(v, per_rank[0]["fused"]["buffers"][b]):
                    failures.append(f"{name}: {b} differs between ranks")
        got, peer = _merged(per_rank, "fused"), _merged(per_rank, "peer")
        x, dy = _batch(sum(shards), offset)
        want = _step(copy.deepcopy(_reference(kind)).double(), x.double(), dy.double())
        fp32 = _noise_step(kind, precision, x, dy)
        with engine.cublas_precision(precision), _path(path):
            one = _step(_fused(kind, stage, precision, False), x.cuda(), dy.cuda())
        quantities = [("Y", "y", None), ("dX", "dx", None)] + [
            (f"d {n}", "grads", n) for n in want["grads"] if n != "gemm.bias"] + [
            (n, "buffers", n) for n in ("bn.running_mean", "bn.running_var")]
        for label, key, sub in quantities:
            pick = (lambda d: d[key]) if sub is None else (lambda d: d[key][sub].double())
            noise = _rel(pick(fp32).double(), pick(want))
            budget = check.BUDGET[precision] if offset > 100 else check.case_budget(precision, noise)
            if label == "d scale" and precision != "tf32":  # (tf32: the noise has the TF32 error amplified)
                budget = max(budget, 2.0 ** -24 * _scale_grad_condition(kind, _batch(sum(shards), 0.0)[0], dy))
            if key == "buffers":
                budget = max(budget, 1e-5)
            for against, ref in (("float64", want), ("one GPU", one), ("nn.SyncBatchNorm", peer)):
                if offset > 100 and against != "float64":
                    continue  # (PyTorch's own error there is the larger one)
                # against the peer: the budget plus the peer's own error (each is that far from float64)
                bound = budget + (_rel(pick(ref), pick(want)) if against == "nn.SyncBatchNorm" else 0.0)
                err = _rel(pick(got), pick(ref))
                worst = max(worst, err / bound)
                if not err <= bound:
                    failures.append(f"{name}: {label} against {against} {err:.2e} > {bound:.1e}")
        if not torch.all(got["grads"]["gemm.bias"] == 0):
            failures.append(f"{name}: the Linear bias's gradient is not exactly zero")
    print(f"world size {world}: {len(cases)} cases, worst error / budget {worst:.3f}")
    _record(f"world {world}", {"cases": len(cases), "failures": failures, "worst_ratio": round(worst, 4),
                               "passed": not failures})
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:30])


# ----------------------------------------------------------------- compile, CUDA graphs, DDP training

def _extras_worker(rank: int, world: int, out: str) -> None:
    import fusedlib
    dev = _device(rank)
    x, _ = _batch(512, 3.0)
    xr = x[rank * 256:(rank + 1) * 256].to(dev)
    res = {}
    for precision in ("tf32", "3xtf32"):
        eager = _fused("84", "fused", precision, True)
        compiled = copy.deepcopy(eager)
        graphed = copy.deepcopy(eager)
        with torch.no_grad():
            want = eager(xr)
            got = torch.compile(compiled, fullgraph=True)(xr)
            if BACKEND != "nccl":  # (a gloo collective cannot be captured in a CUDA graph)
                res[precision] = {"eager": want.cpu(), "compiled": got.cpu(),
                                  "buffers": [m.bn.running_mean.cpu() for m in (eager, compiled)]}
                continue
            static = xr.clone()
            for _ in range(2):  # warm-up on a side stream, as torch.cuda.graphs asks
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    copy.deepcopy(graphed)(static)
                torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out_static = graphed(static)
            g.replay()
            torch.cuda.synchronize()
        res[precision] = {"eager": want.cpu(), "compiled": got.cpu(), "graphed": out_static.cpu(),
                          "buffers": [m.bn.running_mean.cpu() for m in (eager, compiled, graphed)]}
    if BACKEND == "nccl":
        res["step graphed"] = _graphed_step(xr, dev)
    # 50 steps of DDP training: 33 as a hidden layer, 84 as the output layer, fp32
    model = _two_layers(group=True).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    res["train"] = _train(ddp, model, slice(rank * 128, (rank + 1) * 128), world)
    torch.save(res, f"{out}/rank{rank}.pt")


def _graphed_step(xr: torch.Tensor, dev: torch.device) -> dict:
    """A whole train step (forward and backward, both collectives) captured in one CUDA graph,
    3xtf32: its output and gradients, and the eager step's (``want``)."""
    dy = torch.randn(256, M, generator=torch.Generator().manual_seed(15)).to(dev)
    eager = _fused("84", "fused", "3xtf32", True)
    graphed = copy.deepcopy(eager)
    want = _step(eager, xr, dy)
    static = xr.clone().requires_grad_()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm-up on a copy (its buffers), as the whole-network recipe asks
            warm = copy.deepcopy(graphed)
            (warm(static) * dy).sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    graphed.zero_grad(set_to_none=True)
    static.grad = None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out_static = graphed(static)
        (out_static * dy).sum().backward()
    g.replay()
    torch.cuda.synchronize()
    return {"want": want, "y": out_static.detach().cpu().double(), "dx": static.grad.cpu().double(),
            "grads": {n: q.grad.cpu().double() for n, q in graphed.named_parameters()}}


def _two_layers(group: bool):
    import fusedlib
    from fusedlib.reference import make_reference
    hidden = fusedlib.from_reference(make_reference("33", 64, 96, seed=21), stage="fused", precision="fp32")
    head = fusedlib.from_reference(make_reference("84", 96, 10, seed=22), stage="fused", precision="fp32")
    model = torch.nn.Sequential(hidden, head).cuda().train()
    return fusedlib.convert_sync_batchnorm(model) if group else model


def _train(model, module, rows: slice, world: int) -> dict:
    """50 steps of SGD with momentum, cross-entropy on the global batch of 256 rows (each rank's
    loss × world: DistributedDataParallel averages the ranks' gradients)."""
    import torch.distributed as dist
    dev = next(module.parameters()).device
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(50):
        g = torch.Generator().manual_seed(300 + step)
        xs, t = torch.randn(256, 64, generator=g) + 1, torch.randint(0, 10, (256,), generator=g)
        p = model(xs[rows].to(dev))  # 84's output is the softmax
        loss = -(p.clamp_min(1e-30).log().gather(1, t[rows].to(dev)[:, None])).sum() * world / 256
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach() / world
        if world > 1:
            dist.all_reduce(total)
        losses.append(total.item())
    return {"losses": losses, "state": {k: v.cpu() for k, v in module.state_dict().items()}}


def test_compile_cuda_graph_and_ddp_training():
    """At world size 2: the forward traced by ``torch.compile(fullgraph=True)`` and captured in a
    CUDA graph equals the eager one (and so do the running buffers), a whole train step (both
    collectives) captured in one CUDA graph gives the eager step's output and gradients, and 50 DDP training steps
    track one GPU on the concatenated batch (losses within 1e-4, the parameters within 1e-4 of
    their size or 1e-7 where their gradient is zero in exact arithmetic, the ranks' parameters
    bit for bit equal). Over gloo: the same without the CUDA graphs."""
    import tempfile
    from pathlib import Path
    _enough_devices(2)
    with tempfile.TemporaryDirectory() as out:
        sync_demo.spawn_ranks(_extras_worker, 2, out, backend=BACKEND)
        got = [torch.load(Path(out) / f"rank{r}.pt") for r in range(2)]
    graphs = BACKEND == "nccl"  # (over gloo: no CUDA graph, module docstring)
    for r in got:
        for precision in ("tf32", "3xtf32"):
            d = r[precision]
            budget = check.BUDGET[precision]
            for way in ("compiled", "graphed") if graphs else ("compiled",):
                assert _rel(d[way].double(), d["eager"].double()) <= budget, (precision, way)
            for b in d["buffers"][1:]:
                assert _rel(b.double(), d["buffers"][0].double()) <= budget, precision
        if not graphs:
            continue
        d = r["step graphed"]
        budget = check.BUDGET["3xtf32"]
        assert _rel(d["y"], d["want"]["y"]) <= budget and _rel(d["dx"], d["want"]["dx"]) <= budget
        for name, grad in d["grads"].items():
            want = d["want"]["grads"][name]
            assert (grad == 0).all() if name == "gemm.bias" else _rel(grad, want) <= budget, name
    _record("compile, CUDA graph" if graphs else "compile", {"passed": True})
    one_model = _two_layers(group=False)
    one = _train(one_model, one_model, slice(0, 256), 1)
    assert got[0]["train"]["losses"] == pytest.approx(one["losses"], rel=1e-4)
    for name, v in one["state"].items():
        assert torch.equal(got[0]["train"]["state"][name], got[1]["train"]["state"][name]), name
        if v.is_floating_point():  # (the hidden layer's β stays ≈ 0: the next BatchNorm cancels a column's constant)
            diff = (got[0]["train"]["state"][name].double() - v.double()).norm().item()
            assert diff <= max(1e-4 * v.double().norm().item(), 1e-7), name
    _record("DDP training, 50 steps", {"passed": True, "final_loss": got[0]["train"]["losses"][-1],
                                       "final_loss_one_gpu": one["losses"][-1]})
