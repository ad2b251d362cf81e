"""run32, and run33/run38 after the host-time cut (two launches, one allocation, the stream's
scratch; the calls of the new cuda.stage_forward signature, `HOST_CUT`, are the only change).
run32: (1) the bad-argument crash: each shape-check case via the dispatcher, via the
extension's forward directly, and with a non-view tensor of the same wrong shape, each in its
own process; (2) where the host time of one fused forward goes (v0 and 84's KernelBench shape,
train): F.linear, the module, its forward without nn.Module.__call__, cuda.stage_forward with
prebuilt arguments, the C++ entry, torch.empty; torch.profiler's CPU events of the entry."""
import statistics
import subprocess
import sys
import time

CASE = r'''
import sys, torch, fusedlib
from fusedlib import ops
from fusedlib.build import load_stage
from fusedlib.reference import make_reference
ext = load_stage("fused")
m = fusedlib.from_reference(make_reference("33", 64, 48, seed=0).cuda(), stage="fused")
x = torch.rand(8, 64, device="cuda")
bn = m.bn
args = [x, m.gemm.weight, m.gemm.bias, m.scale, bn.weight, bn.bias, bn.running_mean, bn.running_var,
        bn.num_batches_tracked, "33", "fp32", True, bn.eps, bn.momentum]
which, route = sys.argv[1], sys.argv[2]
bad = {"w_view": (1, m.gemm.weight[:, :32]), "w_copy": (1, m.gemm.weight[:, :32].clone()),
       "w_detached": (1, m.gemm.weight.detach()[:, :32]),
       "b_view": (2, m.gemm.bias[:10]), "b_copy": (2, m.gemm.bias[:10].clone()),
       "b_nograd": (2, m.gemm.bias.detach()[:10].clone()), "x_3d": (0, x[None])}
i, v = bad[which]
args[i] = v
try:
    with torch.no_grad():
        if route == "op":
            ops.OPS["fused"](*args)
        else:
            ext.forward(*args, None, None)
    print("no error")
except Exception as e:
    print(type(e).__name__, str(e).splitlines()[0][:160])
'''


def crash_matrix():
    import shutil
    for which in ("w_view", "w_copy", "w_detached", "b_view", "b_copy", "b_nograd", "x_3d"):
        for route in ("op", "direct"):
            p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", CASE, which, route],
                               capture_output=True, text=True)
            print(f"{which:10s} {route:6s} rc {p.returncode:4d} {p.stdout.strip()[-170:]}", flush=True)
            if p.returncode < 0 and shutil.which("gdb") and which == "b_copy":
                g = subprocess.run(["gdb", "-batch", "-ex", "run", "-ex", "bt 25", "--args", sys.executable, "-c",
                                    CASE, which, route], capture_output=True, text=True)
                print("\n".join(l for l in g.stdout.splitlines() if l.startswith("#"))[:4000], flush=True)


def host_us(fn, x, calls=300):
    import torch
    for _ in range(10):
        fn(x)
    torch.cuda.synchronize()
    torch.cuda._sleep(1_500_000_000)
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def host_table():
    import inspect
    import torch
    import torch.nn.functional as F
    import fusedlib
    from fusedlib import cuda
    from fusedlib.build import load_stage
    from fusedlib.reference import PRESETS, make_reference
    ext = load_stage("fused")
    host_cut = len(inspect.signature(cuda.stage_forward).parameters) == 2  # HOST_CUT: run33, run38
    for shape_name in ("v0", "84"):
        s = PRESETS[shape_name]
        ref = make_reference("84", s.in_features, s.out_features, seed=0).cuda()
        x = torch.rand(s.batch, s.in_features, device="cuda")
        w, b = ref.gemm.weight.detach(), ref.gemm.bias.detach()
        with torch.no_grad():
            print(shape_name, "F.linear", round(host_us(lambda x: F.linear(x, w, b), x), 1),
                  "torch.empty", round(host_us(lambda x: torch.empty(s.batch, s.out_features, device="cuda"), x), 1),
                  "x.data_ptr", round(host_us(lambda x: x.data_ptr(), x), 2), flush=True)
            for precision in ("fp32", "tf32"):
                for mode in ("train", "eval"):
                    m = fusedlib.from_reference(ref, stage="fused", precision=precision).train(mode == "train")
                    bn = m.bn
                    args = (x, m.gemm.weight, m.gemm.bias, m.scale, bn.weight, bn.bias, bn.running_mean,
                            bn.running_var, bn.num_batches_tracked, "84", precision, mode == "train", bn.eps,
                            bn.momentum)
                    full = args + ((None, None) if host_cut else (cuda.gemm_path(precision, x.device, s.in_features, x), None))
                    r = {"module": host_us(m, x), "forward": host_us(m.forward, x),
                         "stage_forward": host_us(lambda x: cuda.stage_forward(m, args) if host_cut
                                                  else cuda.stage_forward(m, x, args), x),
                         "entry": host_us(lambda x: ext.forward(*full), x)}
                    print(shape_name, precision, mode, " ".join(f"{k} {v:.1f}" for k, v in r.items()), flush=True)
                    if shape_name == "v0" and precision == "tf32":
                        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                            for _ in range(50):
                                ext.forward(*full)
                                torch.cuda.synchronize()
                        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)


if __name__ == "__main__":
    crash_matrix()
    host_table()
