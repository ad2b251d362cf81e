"""Training with the fused modules is training with PyTorch's: a small network built from both
fused modules, trained step by step, against the same network built from
:mod:`fusedlib.reference`'s PyTorch modules with the same parameters.

The network (:class:`Net`): x (24 features) → problem 33's module (the hidden layer,
BatchNorm1d(Linear(x)·s), 24 → 40) → tanh → problem 84's module (the output layer,
softmax(s·BatchNorm1d(Linear(h))), 40 → 10 classes); the loss is the negative log-likelihood of
the true class, read from the softmax's probabilities (clamped at 1e-12, which they never come
near here). The task: ten Gaussian blobs in 24 dimensions, a fixed sequence of batches of 64.

Every run trains four copies from the same state on the same batches: the network under test
(the fused modules at a stage and precision), a float64 copy of the PyTorch network (the
reference for every error), and two PyTorch networks at the precision's class (fp32; TF32 for
tf32 on CUDA), one of them fed each batch with its rows and input features permuted (the
same training, summed in other orders). Compared with float64: the loss at every step; at the
end every parameter and buffer (running_mean, running_var; num_batches_tracked exactly); and
the outputs of eval-mode forwards without gradients (the trained network's on an evaluation
batch at the end, and for the EMA variants the EMA copy's every 10 steps).

Pass rule (fusedlib.check's, per quantity): finite (NaN never passes), and the relative error
(normwise for tensors; per step for the loss, its largest over the steps) at most
``check.case_budget(precision, noise)`` = ``max(check.BUDGET[precision], 2·noise)``, where noise
is the larger error of the two PyTorch networks at the precision's class on that same
quantity: fp32 and 3xtf32 are held to fp32's budget, tf32 to TF32's (on the CPU, PyTorch has no
TF32 to compare with: the floor BUDGET["tf32"] = 5e-3 governs there).

What is trained (:data:`OPTIMIZERS`, :data:`VARIANTS`):

* optimizers: SGD with momentum (its default implementation), SGD(fused=True), Adam (foreach),
  AdamW (foreach), AdamW(fused=True), and on CUDA AdamW(fused=True, capturable=True) with the
  whole step (forward, backward, optimizer step) captured once in a CUDA graph and replayed;
* with AdamW (foreach, whose steps bump the version counters, so that the variant's own kind
  of write is the only one a version counter could miss): an EMA copy of the weights updated
  through ``.data``, one updated with ``copy_`` under no_grad (both evaluated in eval mode every
  10 steps); ``load_state_dict`` of a step-10 checkpoint (model and optimizer) at step 25;
* ``torch.func.functional_call`` with a fresh copy of every parameter at every call (a
  functional SGD loop: each call's weight is a new tensor with version counter 0, most often
  where the previous call's, just freed, was).

:func:`test_a_version_keyed_weight_cache_is_caught` shows the comparison's power on the CPU:
with a weight cache keyed on (data_ptr, version, shape) put into the modules, the runs of the
fused optimizers, of the ``.data`` EMA and of ``functional_call`` fail, and only they.
:func:`test_fused_adamw_3xtf32_tracks_pytorch` is the regression case on CUDA (a problem-84
module at KernelBench v0's shape, 3xtf32 on its default path, AdamW(fused=True), the version
counters checked unchanged at every step).

Parameters whose gradient BatchNorm cancels. In train mode the Linear bias cancels in
BatchNorm exactly: fusedlib gives it a zero gradient, PyTorch rounding noise (≈ 1e-9); and
problem 33's per-column scale s, which multiplies Z before BatchNorm, cancels up to ε
(BatchNorm's output depends on s_j only through ε/(s_j²σ_j²), so s_j's exact gradient is that
factor, 1e-6 to 1e-3 here, times the others', and for most columns the computed one is mostly
rounding noise). SGD turns such noise into steps of
lr·noise: compared as everything else (and with SGD fusedlib's biases stay exactly as they
were). Adam divides by √v + ε and turns noise into steps of ≈ lr whatever its size: PyTorch's
own fp32 network then misses float64 by ≈ 1e-3 on that scale and on the running statistics
that carry it (they track s∘μ and s²σ², and Z's mean with the bias in it). So under Adam and
AdamW these parameters are left out of the optimizer (they keep their initial values in all
four networks), so that everything else can be compared within fp32's budget, running
statistics included.

Matrix. CUDA (``pytest -m gpu``, recorded under the key "training" of the GPU validation
record, tests/run_gpu_suite.py's part "training"): every stage × precision × (each of the ten
optimizer/variant pairs), 120 runs, and the regression case at every stage. CPU: the nine
pairs that run there at the fused stage in 3xtf32 (the combination whose CUDA forward splits W
into TF32 parts), and every other stage × precision with AdamW(fused=True): 20 runs, plus the
cache check and the regression case at the fused stage. The CPU path is the stage algebra,
which keeps nothing between calls either, so the full matrix there would repeat the same
arithmetic; this sub-matrix keeps the file well under a minute on two cores.
"""
from __future__ import annotations

import copy
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from torch import nn

import fusedlib
from fusedlib import algebra, check, engine
from fusedlib.modules import reference_kind
from fusedlib.reference import make_reference

ROOT = Path(__file__).resolve().parent.parent
IN, HIDDEN, CLASSES, BATCH = 24, 40, 10, 64
#: Steps a run trains; the resume variant saves at SAVE_AT and loads that checkpoint at LOAD_AT.
STEPS, SAVE_AT, LOAD_AT = 60, 10, 25
#: The EMA copies: decay, and every how many steps they are evaluated (and at the end).
EMA_DECAY, EVAL_EVERY = 0.9, 10
#: Steps of the CUDA-graph variant run before the capture (on a side stream, as PyTorch's
#: whole-network capture recipe warms up): real training steps, as in every other network.
GRAPH_WARMUP = 3
#: Optimizers: name → (constructor, whether the parameters whose gradient BatchNorm cancels
#: are left out, :func:`cancelled`; see the module docstring). lr 0.05 for SGD, 1e-2 for the
#: Adam family.
OPTIMIZERS = {
    "sgd": (lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9), False),
    "sgd_fused": (lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, fused=True), False),
    "adam": (lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True), True),
    "adamw": (lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=1e-2, foreach=True), True),
    "adamw_fused": (lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=1e-2, fused=True), True),
    "adamw_fused_capturable": (lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=1e-2, fused=True,
                                                            capturable=True), True),
}
#: The functional loop's plain SGD step (new tensors p − lr·g each step).
FUNCTIONAL_LR = 0.1
#: (optimizer, variant) pairs: every optimizer plainly (the capturable one in a CUDA graph),
#: the EMA and checkpoint variants with AdamW (foreach), and the functional loop.
VARIANTS = [(name, "plain") for name in OPTIMIZERS if name != "adamw_fused_capturable"]
VARIANTS += [("adamw_fused_capturable", "cuda_graph"), ("adamw", "ema_data"), ("adamw", "ema_copy"),
             ("adamw", "load_state_dict"), ("functional_sgd", "functional_call")]
CUDA_ONLY = {"cuda_graph"}


class Net(nn.Module):
    """``head(tanh(hidden(x)))``: the two layers are problem 33's and problem 84's modules
    (reference or fused), so the state_dict keys are the same for both builds."""

    def __init__(self, hidden: nn.Module, head: nn.Module):
        super().__init__()
        self.hidden, self.head = hidden, head

    def forward(self, x):
        return self.head(torch.tanh(self.hidden(x)))


def reference_net() -> Net:
    """The PyTorch network (float32, CPU, train mode), KernelBench's initialisation, fixed seeds
    (the global RNG is left as it was)."""
    with torch.random.fork_rng():
        return Net(make_reference("33", IN, HIDDEN, seed=33), make_reference("84", HIDDEN, CLASSES, seed=84))


def fused_net(ref: Net, stage: str, precision: str) -> Net:
    """The network of fused modules with a copy of ``ref``'s parameters and buffers."""
    return Net(fusedlib.from_reference(ref.hidden, stage=stage, precision=precision),
               fusedlib.from_reference(ref.head, stage=stage, precision=precision))


def nll(probs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of the true classes, from probabilities."""
    return -probs.gather(1, y[:, None]).clamp_min(1e-12).log().mean()


@dataclass
class Data:
    """The task: the batches (x (B, K), class y (B,)) of every step, an evaluation batch, and
    for the permuted peer a permutation of the input features and one of the rows a step."""

    xs: list
    ys: list
    x_eval: torch.Tensor
    cols: torch.Tensor
    rows: list


def blobs(steps: int = STEPS, k: int = IN, classes: int = CLASSES, batch: int = BATCH, seed: int = 0) -> Data:
    """Ten Gaussian blobs (centres 0.5·randn, unit noise), drawn once from a fixed seed. They
    overlap: the loss falls from ≈ 2.9 to ≈ 0.8 in 60 steps and no further, so no probability
    of a true class comes near 1, where −log p would amplify its rounding (≈ 1e-7 absolute)
    into a large relative error of a small loss."""
    g = torch.Generator().manual_seed(seed)
    centres = 0.5 * torch.randn(classes, k, generator=g)

    def draw(n):
        y = torch.randint(0, classes, (n,), generator=g)
        return centres[y] + torch.randn(n, k, generator=g), y

    xs, ys = zip(*(draw(batch) for _ in range(steps)))
    return Data(list(xs), list(ys), draw(256)[0], torch.randperm(k, generator=g),
                [torch.randperm(batch, generator=g) for _ in range(steps)])


@dataclass
class Run:
    """What a run leaves to compare: the loss of every step, the final state_dict (float64, CPU)
    and the eval-mode outputs (the EMA copy's, then the trained network's)."""

    losses: list = field(default_factory=list)
    state: dict = field(default_factory=dict)
    evals: list = field(default_factory=list)


def _permuted_state(state: dict, cols: torch.Tensor, first_weight: str) -> dict:
    out = dict(state)
    out[first_weight] = state[first_weight][:, cols]
    return out


def cancelled(net: nn.Module) -> set[int]:
    """ids of the parameters whose gradient BatchNorm cancels: the Linear bias of every module
    of either problem (exactly) and problem 33's scale (up to ε)."""
    out = set()
    for mod in net.modules():
        if isinstance(getattr(mod, "gemm", None), nn.Linear) and isinstance(getattr(mod, "bn", None), nn.BatchNorm1d):
            out.add(id(mod.gemm.bias))
            if reference_kind(mod) == "33":
                out.add(id(mod.scale))
    return out


def _params_for(net: nn.Module, leave_out: bool) -> list:
    skip = cancelled(net) if leave_out else set()
    return [p for p in net.parameters() if id(p) not in skip]


def train(net: nn.Module, optimizer: str, variant: str, data: Data, device: str, dtype=torch.float32,
          permuted: bool = False, first_weight: str = "hidden.gemm.weight", after_step=None) -> Run:
    """Train ``net`` (moved to ``device`` and ``dtype``) on ``data`` with ``optimizer`` in
    ``variant`` (see :data:`VARIANTS`); ``permuted``: feed every batch with its input features
    permuted by ``data.cols`` (``first_weight``'s columns permuted alike, back at the end) and
    its rows by ``data.rows[step]``. ``after_step(net, params, versions)``: called after every
    optimizer step (eager variants) with the optimizer's parameters and their version
    counters from before the step. At the end the network (or, for ``functional_call``, the
    loop's parameters) also runs the evaluation batch once in eval mode, without gradients,
    after the EMA copy's evaluations if any."""
    net = net.to(device=device, dtype=dtype).train()
    if permuted:
        net.load_state_dict(_permuted_state(net.state_dict(), data.cols, first_weight))

    def batch(t):
        x, y = data.xs[t], data.ys[t]
        if permuted:
            x, y = x[:, data.cols][data.rows[t]], y[data.rows[t]]
        return x.to(device=device, dtype=dtype), y.to(device)

    x_eval = (data.x_eval[:, data.cols] if permuted else data.x_eval).to(device=device, dtype=dtype)
    run = Run()
    if variant == "functional_call":
        state = _train_functional(net, batch, len(data.xs), run)
    elif variant == "cuda_graph":
        state = _train_graph(net, optimizer, batch, len(data.xs), run)
    else:
        state = _train_eager(net, optimizer, variant, batch, len(data.xs), x_eval, run, after_step)
    with torch.no_grad():
        y_eval = torch.func.functional_call(net.eval(), state, (x_eval,)) if variant == "functional_call" else \
            net.eval()(x_eval)
    run.evals.append(y_eval.double().cpu())
    state = {k: v.detach().to("cpu", torch.float64 if v.is_floating_point() else v.dtype) for k, v in state.items()}
    if permuted:
        state = _permuted_state(state, torch.argsort(data.cols), first_weight)
    run.state = state
    return run


def _ema_update(ema: nn.Module, net: nn.Module, through_data: bool) -> None:
    """ema ← d·ema + (1 − d)·net for the parameters, the buffers copied: through ``.data``
    (no version counter sees these writes) or with ``copy_`` under no_grad (it bumps them)."""
    d = EMA_DECAY
    if through_data:
        for e, p in zip(ema.parameters(), net.parameters()):
            e.data.mul_(d).add_(p.data, alpha=1 - d)
        for e, b in zip(ema.buffers(), net.buffers()):
            e.data.copy_(b.data)
        return
    with torch.no_grad():
        for e, p in zip(ema.parameters(), net.parameters()):
            e.copy_(e * d + p * (1 - d))
        for e, b in zip(ema.buffers(), net.buffers()):
            e.copy_(b)


def _train_eager(net, optimizer, variant, batch, steps, x_eval, run, after_step):
    make, leave_out = OPTIMIZERS[optimizer]
    params = _params_for(net, leave_out)
    opt = make(params)
    ema = copy.deepcopy(net).eval() if variant.startswith("ema") else None
    saved = None
    for t in range(steps):
        if variant == "load_state_dict" and t == SAVE_AT:
            saved = copy.deepcopy(net.state_dict()), copy.deepcopy(opt.state_dict())
        if variant == "load_state_dict" and t == LOAD_AT:
            net.load_state_dict(saved[0])
            opt.load_state_dict(saved[1])
        x, y = batch(t)
        opt.zero_grad(set_to_none=True)
        loss = nll(net(x), y)
        loss.backward()
        versions = [p._version for p in params]
        opt.step()
        if after_step is not None:
            after_step(net, params, versions)
        run.losses.append(loss.item())
        if ema is not None:
            _ema_update(ema, net, variant == "ema_data")
            if (t + 1) % EVAL_EVERY == 0 or t == steps - 1:
                with torch.no_grad():
                    run.evals.append(ema(x_eval).double().cpu())
    return net.state_dict()


def _train_functional(net, batch, steps, run):
    """Plain SGD through ``torch.func.functional_call``: the parameters live in a dict outside
    the module, updated functionally (new tensors p − lr·g), and every call gets fresh copies
    of them, freed after the step, so each call's weight is a new tensor with version counter
    0, most often at the address of the previous step's (the allocator reuses the block just
    freed). The buffers are passed too (tensors of this loop's own, updated in place by the
    train-mode forward)."""
    params = {n: p.detach().clone() for n, p in net.named_parameters()}
    buffers = {n: b.clone() for n, b in net.named_buffers()}
    for t in range(steps):
        x, y = batch(t)
        call = {n: p.clone().requires_grad_() for n, p in params.items()}
        loss = nll(torch.func.functional_call(net, {**call, **buffers}, (x,)), y)
        grads = torch.autograd.grad(loss, list(call.values()))
        params = {n: p - FUNCTIONAL_LR * g for (n, p), g in zip(params.items(), grads)}
        run.losses.append(loss.item())
        del call, grads, loss
    return {**params, **buffers}


def _train_graph(net, optimizer, batch, steps, run):
    """PyTorch's whole-network capture: GRAPH_WARMUP eager steps on a side stream, then the
    step (forward, loss, backward, optimizer step) captured once and replayed for every other
    batch, copied into the static input first."""
    make, leave_out = OPTIMIZERS[optimizer]
    opt = make(_params_for(net, leave_out))
    x0, y0 = batch(0)
    static_x, static_y = torch.empty_like(x0), torch.empty_like(y0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for t in range(GRAPH_WARMUP):
            x, y = batch(t)
            static_x.copy_(x)
            static_y.copy_(y)
            opt.zero_grad(set_to_none=True)
            loss = nll(net(static_x), static_y)
            loss.backward()
            opt.step()
            run.losses.append(loss.item())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = nll(net(static_x), static_y)
        static_loss.backward()
        opt.step()
    for t in range(GRAPH_WARMUP, steps):
        x, y = batch(t)
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        run.losses.append(static_loss.item())
    return net.state_dict()


# --------------------------------------------------------------------------- comparison

def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    return check._relerr(a, b)


def errors(run: Run, ref64: Run) -> dict:
    """Relative errors of ``run`` against the float64 run: "loss" (the largest over the steps),
    each floating state_dict entry by name (normwise), "eval" (the largest over the eval-mode
    outputs, normwise); NaN where ``run`` is not finite."""
    steps = [abs(a - b) / abs(b) for a, b in zip(run.losses, ref64.losses)]
    out = {"loss": float("nan") if any(e != e for e in steps) else max(steps)}
    for name, want in ref64.state.items():
        if want.is_floating_point():
            out[name] = _relerr(run.state[name], want)
    if ref64.evals:
        out["eval"] = max(_relerr(a, b) for a, b in zip(run.evals, ref64.evals))
    return {k: v if v == v and abs(v) != float("inf") else float("nan") for k, v in out.items()}


def finite(run: Run) -> bool:
    return (all(torch.isfinite(torch.tensor(run.losses)).tolist())
            and all(bool(torch.isfinite(v).all()) for v in run.state.values() if v.is_floating_point())
            and all(bool(torch.isfinite(e).all()) for e in run.evals))


def peer_class(precision: str, device: str) -> str:
    """The precision the PyTorch peers run at: TF32 for tf32 on CUDA, else fp32 (3xtf32 is
    fp32-class; the CPU has no TF32)."""
    return "tf32" if precision == "tf32" and device == "cuda" else "fp32"


_REFERENCE_RUNS: dict = {}


def reference_runs(optimizer: str, variant: str, device: str, peer: str, make=reference_net, data=None,
                   first_weight: str = "hidden.gemm.weight", key=None) -> tuple[Run, Run, Run]:
    """(float64 run, PyTorch run at ``peer``, the same permuted), computed once per
    configuration: they do not depend on the stage or precision under test."""
    key = key or (optimizer, variant, device, peer)
    if key not in _REFERENCE_RUNS:
        data = data or DATA
        with engine.cublas_precision("fp32"):
            ref64 = train(make(), optimizer, variant, data, device, torch.float64, first_weight=first_weight)
        with engine.cublas_precision(peer):
            runs = [train(make(), optimizer, variant, data, device, permuted=permuted, first_weight=first_weight)
                    for permuted in (False, True)]
        _REFERENCE_RUNS[key] = (ref64, *runs)
    return _REFERENCE_RUNS[key]


def judge(run: Run, ref64: Run, peers: list[Run], precision: str) -> dict:
    """Every compared quantity's error, noise (the peers' larger error) and budget
    (``check.case_budget``), the worst of each group, and passed."""
    errs = errors(run, ref64)
    peer_errs = [errors(p, ref64) for p in peers]
    noise = {k: max(e[k] for e in peer_errs) for k in errs}
    budget = {k: check.case_budget(precision, noise[k]) for k in errs}
    ok = {k: errs[k] <= budget[k] for k in errs}  # NaN compares False
    state_keys = [k for k in errs if k not in ("loss", "eval")]
    worst_param = max(state_keys, key=lambda k: errs[k] / budget[k] if errs[k] == errs[k] else float("inf"))
    nbt_equal = all(torch.equal(run.state[k], ref64.state[k]) for k in ref64.state if k.endswith("num_batches_tracked"))
    result = {
        "max_loss_rel_err": errs["loss"], "loss_budget": budget["loss"], "loss_noise": noise["loss"],
        "max_param_rel_err": max(errs[k] for k in state_keys), "worst_param": worst_param,
        "worst_param_rel_err": errs[worst_param], "worst_param_budget": budget[worst_param],
        "worst_param_noise": noise[worst_param],
        "num_batches_tracked_equal": nbt_equal, "finite": finite(run),
        "failed": sorted(k for k, good in ok.items() if not good),
    }
    if "eval" in errs:
        result.update(eval_rel_err=errs["eval"], eval_budget=budget["eval"], eval_noise=noise["eval"])
    result["budget"] = check.BUDGET[precision]
    result["passed"] = result["finite"] and nbt_equal and not result["failed"]
    return result


DATA = blobs()
RECORD: dict = {"training": []}

# --------------------------------------------------------------------------- the matrix

CPU_CASES = [("fused", "3xtf32", opt, var) for opt, var in VARIANTS if var not in CUDA_ONLY]
CPU_CASES += [(s, p, "adamw_fused", "plain") for s, p in check.combos(algebra.STAGES, algebra.PRECISIONS)
              if (s, p) != ("fused", "3xtf32")]
CUDA_CASES = [(s, p, opt, var) for s, p in check.combos(algebra.STAGES, algebra.PRECISIONS) for opt, var in VARIANTS]
CASES = [pytest.param("cpu", *c, id="cpu-" + "-".join(c)) for c in CPU_CASES]
CASES += [pytest.param("cuda", *c, id="cuda-" + "-".join(c), marks=pytest.mark.gpu) for c in CUDA_CASES]


@pytest.fixture(scope="module", autouse=True)
def training_record():
    """One intra-op CPU thread for the module (its tensors are tiny: a second thread only
    waits at every parallel region, and a busy machine makes each wait long; the threads are
    restored after). On CUDA: outputs and scratch poisoned with NaN before each launch (as
    tests/test_gpu.py), and the module's records written at its end into
    ``$FUSEDLIB_VALIDATION_OUT`` (a part of tests/run_gpu_suite.py) or else merged into
    results/<gpu>/validation.json when that was made on the same kernel sources."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    if cuda:
        os.environ["FUSEDLIB_POISON"] = "1"
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if cuda:
            del os.environ["FUSEDLIB_POISON"]
    if cuda:  # also when empty: tests/run_gpu_suite.py joins every part's file
        write_record(RECORD)


def write_record(record: dict) -> None:
    """Write ``record`` as tests/test_gpu.py writes its own (environment, records, kernel
    sources): to ``$FUSEDLIB_VALIDATION_OUT``, or merged (test_gpu.merge_records) into
    results/<gpu>/validation.json made on the same kernel sources; another file is not
    overwritten (a warning says so)."""
    from fusedlib import build
    from test_gpu import OUT_VAR, _environment, _gpu_slug, merge_records
    sources = build.sources_sha256(ROOT)
    out = os.environ.get(OUT_VAR)
    if out:
        out = Path(out)
    else:
        out = ROOT / "results" / _gpu_slug() / "validation.json"
        if out.exists():
            old = json.loads(out.read_text())
            if old.get("sources_sha256") != sources:
                warnings.warn(f"{out}: made on other kernel sources; the training record is not written "
                              f"(set {OUT_VAR} to write it to a file of its own)")
                return
            record = merge_records(old, record)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": _environment(), **record, "sources_sha256": sources}, indent=1) + "\n")


@pytest.mark.parametrize("device,stage,precision,optimizer,variant", CASES)
def test_training_matches_pytorch(device, stage, precision, optimizer, variant):
    """The fused network trains as PyTorch's does: loss at every step, final parameters and
    buffers (and the EMA copy's eval outputs) within the precision's budget of float64, given
    PyTorch's own error at the precision's class (module docstring)."""
    ref64, *peers = reference_runs(optimizer, variant, device, peer_class(precision, device))
    with engine.cublas_precision("fp32"):
        run = train(fused_net(reference_net(), stage, precision), optimizer, variant, DATA, device)
    result = judge(run, ref64, peers, precision)
    if device == "cuda":
        RECORD["training"].append({"problem": "33+84", "stage": stage, "precision": precision, "optimizer": optimizer,
                                   "variant": variant, "device": torch.cuda.get_device_name(), "steps": STEPS,
                                   **result})
    assert result["passed"], result
    assert ref64.losses[-1] < 0.5 * ref64.losses[0]  # the task is learnt: the comparison is not of a stalled run
    if optimizer.startswith("sgd") or variant == "functional_call":
        # fusedlib's bias gradient is exactly zero in train mode: SGD leaves the biases as they were
        init = reference_net().state_dict()
        for name in ("hidden.gemm.bias", "head.gemm.bias"):
            assert torch.equal(run.state[name], init[name].double()), name


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("optimizer", ["sgd_fused", "adamw_fused"])
def test_fused_optimizers_write_without_bumping_the_version(device, optimizer):
    """The PyTorch behaviour the suite guards against (checked here so that a change shows):
    an optimizer with fused=True writes the parameters in place without bumping their version
    counters, and so does a write through ``.data``; ``copy_`` under no_grad bumps it."""
    lin = nn.Linear(8, 4).to(device)
    opt = OPTIMIZERS[optimizer][0](lin.parameters())
    for _ in range(2):
        lin(torch.randn(16, 8, device=device)).square().sum().backward()
        version, before, ptr = lin.weight._version, lin.weight.detach().clone(), lin.weight.data_ptr()
        opt.step()
        opt.zero_grad()
        assert lin.weight._version == version and lin.weight.data_ptr() == ptr
        assert not torch.equal(lin.weight, before)
    version = lin.weight._version
    lin.weight.data.mul_(2)
    assert lin.weight._version == version
    with torch.no_grad():
        lin.weight.copy_(torch.zeros_like(lin.weight))
    assert lin.weight._version > version


#: The regression case: one problem-84 module at KernelBench v0's 128×1024→512 (K % 4 == 0,
#: tensors 16-byte aligned: the wgmma path on an H100) as a classifier of a fixed random
#: teacher's classes, trained with AdamW(fused=True) at 3xtf32.
REGRESSION_SHAPE, REGRESSION_STEPS = (128, 1024, 512), 40


def _teacher_data() -> Data:
    n, k, m = REGRESSION_SHAPE
    g = torch.Generator().manual_seed(5)
    teacher = torch.randn(m, k, generator=g) / k ** 0.5
    xs = [torch.randn(n, k, generator=g) for _ in range(REGRESSION_STEPS)]
    ys = [(x @ teacher.T).argmax(dim=1) for x in xs]
    return Data(xs, ys, torch.randn(256, k, generator=g), torch.randperm(k, generator=g),
                [torch.randperm(n, generator=g) for _ in range(REGRESSION_STEPS)])


def _regression_reference() -> nn.Module:
    with torch.random.fork_rng():
        return make_reference("84", REGRESSION_SHAPE[1], REGRESSION_SHAPE[2], seed=0)


REGRESSION_CASES = [pytest.param("cpu", "fused", id="cpu-fused")]
REGRESSION_CASES += [pytest.param("cuda", stage, id=f"cuda-{stage}", marks=pytest.mark.gpu) for stage in algebra.STAGES]


@pytest.mark.parametrize("device,stage", REGRESSION_CASES)
def test_fused_adamw_3xtf32_tracks_pytorch(device, stage):
    """The case that a weight cache keyed on (storage, version) got wrong: AdamW(fused=True)
    changes W in place and leaves its version counter as it was (checked at every step), so
    such a cache hands the kernels the TF32 split of an old W. Here the fused module, on its
    default 3xtf32 path (wgmma on an H100), follows PyTorch fp32 at every step (on the CPU:
    the stage algebra, one stage)."""
    n, k, m = REGRESSION_SHAPE
    data = _teacher_data()
    path = "cpu" if device == "cpu" else engine.select_path(
        "3xtf32", torch.cuda.get_device_capability(), k, aligned=True, forced="auto")
    checked = []

    def versions_unchanged(net, params, versions):
        assert [p._version for p in params] == versions  # PyTorch: fused=True does not bump them
        checked.append(True)

    ref64, *peers = reference_runs("adamw_fused", "plain", device, "fp32", make=_regression_reference, data=data,
                                   first_weight="gemm.weight", key=("regression", device))
    fused = fusedlib.from_reference(_regression_reference(), stage=stage, precision="3xtf32")
    with engine.cublas_precision("fp32"):
        run = train(fused, "adamw_fused", "plain", data, device, first_weight="gemm.weight",
                    after_step=versions_unchanged)
    if device == "cuda":
        assert run_path(fused) == path
    result = judge(run, ref64, peers, "3xtf32")
    if device == "cuda":
        RECORD["training"].append({"problem": "84", "stage": stage, "precision": "3xtf32", "optimizer": "adamw_fused",
                                   "variant": f"regression {n}x{k}->{m} {path}", "device": torch.cuda.get_device_name(),
                                   "steps": REGRESSION_STEPS, "version_unchanged_steps": len(checked), **result})
    assert len(checked) == REGRESSION_STEPS
    assert result["passed"], result
    assert ref64.losses[-1] < ref64.losses[0] - 0.5  # it learns (6.66 → 5.97 in float64 on the CPU)


def run_path(module) -> str:
    """The GEMM path ``module``'s 3xtf32 forward takes on CUDA for its weight and a fresh
    input of its in_features (aligned, as every input of the test)."""
    from fusedlib import cuda as fl_cuda
    w = module.gemm.weight
    x = torch.empty(2, w.shape[1], device=w.device)
    return fl_cuda.gemm_path(module.precision, w.device, w.shape[1], x, w)


class _VersionKeyedCache:
    """The mistake, put into the CPU path for :func:`test_a_version_keyed_weight_cache_is_caught`:
    the modules' forward reads W from a copy kept on the module and renewed only when W's
    (data_ptr, version, shape) changes; the gradient still reaches W. ``stale`` counts the
    calls that got a copy whose values differ from W's."""

    def __init__(self, original):
        self.original, self.stale = original, 0

    def __call__(self, module):
        tensors = self.original(module)
        w = tensors[0]
        key = (w.data_ptr(), w._version, tuple(w.shape))
        kept = module.__dict__.get("_kept_weight")
        if kept is None or kept[0] != key:
            kept = module.__dict__["_kept_weight"] = (key, w.detach().clone())
        elif not torch.equal(kept[1], w):
            self.stale += 1
        return (w + (kept[1] - w).detach(), *tensors[1:])


@pytest.mark.parametrize("optimizer,variant", [v for v in VARIANTS if v[1] not in CUDA_ONLY])
def test_a_version_keyed_weight_cache_is_caught(optimizer, variant, monkeypatch):
    """The suite's power, on the CPU: with a weight cache keyed on (data_ptr, version, shape)
    put into the modules, a run fails exactly when the cache served an old W — under the
    fused optimizers, the EMA updated through ``.data`` and ``functional_call`` with fresh
    tensors (which the CPU allocator places at the address just freed) — and the runs whose
    writes bump the version (for-loop and foreach optimizers, ``copy_``, ``load_state_dict``)
    still pass."""
    from fusedlib.modules import _FusedBase
    cache = _VersionKeyedCache(_FusedBase._tensors)
    monkeypatch.setattr(_FusedBase, "_tensors", lambda self: cache(self))
    ref64, *peers = reference_runs(optimizer, variant, "cpu", "fp32")
    run = train(fused_net(reference_net(), "fused", "3xtf32"), optimizer, variant, DATA, "cpu")
    passed = judge(run, ref64, peers, "3xtf32")["passed"]
    if variant != "functional_call":  # there, a stale copy needs the allocator to reuse the address
        assert (cache.stale > 0) == (optimizer.endswith("fused") or variant == "ema_data"), cache.stale
    assert passed == (cache.stale == 0), (cache.stale, passed)


def test_merge_records_keeps_every_list():
    """tests/test_gpu.py's merge_records, which joins the parts' records, keeps the "training"
    list (rows of the same case replaced) beside the others, and any list it has no key for."""
    from test_gpu import merge_records
    row = {"problem": "33+84", "stage": "fused", "precision": "3xtf32", "optimizer": "sgd", "variant": "plain"}
    old = {"environment": {"gpu": "x"}, "cases": [{"problem": "84", "rel_err": 1e-7}],
           "training": [dict(row, passed=False), dict(row, stage="sums", passed=True)],
           "other": [{"name": "a", "value": 1.0}]}
    new = {"training": [dict(row, passed=True)], "other": [{"name": "a", "value": 2.0}, {"name": "b", "value": 3.0}]}
    merged = merge_records(old, new)
    assert "environment" not in merged and merged["cases"] == old["cases"]
    assert sorted((r["stage"], r["passed"]) for r in merged["training"]) == [("fused", True), ("sums", True)]
    assert merged["other"] == [{"name": "a", "value": 2.0}, {"name": "b", "value": 3.0}]
