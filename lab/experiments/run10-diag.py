"""Device diagnostics: host time per call (GPU kept busy so launches never wait) and an ncu target."""
import sys, time, copy
import torch, torch.nn.functional as F
import fusedlib
from fusedlib import cuda as flc, modules
from fusedlib.reference import make_reference, get_inputs, parse_shape

def host_us(fn, n=40, reps=5):
    best = 1e9
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(4e8))  # ~0.2 s of GPU spin: launches queue, the host never waits
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return best

def setup(problem, shape, stage, precision, train=True):
    sh = parse_shape(shape)
    ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
    mod = fusedlib.from_reference(ref, stage=stage, precision=precision)
    ref.train(train); mod.train(train)
    x = get_inputs(sh, "rand", torch.Generator().manual_seed(0)).cuda()
    return ref, mod, x

if sys.argv[1] == "host":
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for problem, shape in (("84", "v0"), ("84", "84"), ("33", "33")):
        for stage, prec in (("naive", "fp32"), ("fused", "fp32"), ("fused", "tf32"), ("fused", "3xtf32")):
            ref, mod, x = setup(problem, shape, stage, prec)
            mod(x); ref(x); torch.cuda.synchronize()
            with torch.no_grad():
                t_mod = host_us(lambda: mod(x))
                t_sf = host_us(lambda: flc.stage_forward(mod, x))
                t_val = host_us(lambda: modules.validate_input(x, mod.gemm.in_features, mod.gemm.weight, True), reps=2)
                t_ref = host_us(lambda: ref(x))
                t_lin = host_us(lambda: F.linear(x, ref.gemm.weight, ref.gemm.bias))
                t_empty = host_us(lambda: torch.empty(x.shape[0], 8, device="cuda"), reps=2)
                t_add = host_us(lambda: mod.bn.num_batches_tracked.add_(1), reps=2)
                t_dev = host_us(lambda: torch.cuda.device(x.device).__enter__(), reps=2)
                t_stream = host_us(lambda: torch.cuda.current_stream(x.device).cuda_stream, reps=2)
            rows.append((problem, shape, stage, prec, t_mod, t_sf, t_val, t_ref, t_lin, t_empty, t_add, t_dev, t_stream))
    print("problem shape stage precision | module(x) stage_forward validate | eager F.linear | empty add_ device() stream  [host us per call]")
    for r in rows:
        print(" ".join(f"{v:8.1f}" if isinstance(v, float) else f"{v:>7}" for v in r))
elif sys.argv[1] == "ncu":
    problem, shape, prec = sys.argv[2], sys.argv[3], sys.argv[4]
    ref, mod, x = setup(problem, shape, "fused", prec)
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    with torch.no_grad():
        for _ in range(3):
            mod(x); F.linear(x, ref.gemm.weight, ref.gemm.bias)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        mod(x); F.linear(x, ref.gemm.weight, ref.gemm.bias)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
