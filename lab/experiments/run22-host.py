"""run22: host time per forward (µs, the CPU time to enqueue one call, the GPU idle before
each) of the fused module's routes against F.linear and the eager reference, at v0 and the
KernelBench shape of 84, train mode, each precision; then one timed table (GPU ms, host µs)."""
import statistics
import time

import torch
import torch.nn.functional as F

import fusedlib
from fusedlib import ops
from fusedlib.reference import PRESETS, make_reference


def host_us(fn, x, calls=200):
    """Median host time of one call in µs, calls enqueued back to back behind a GPU sleep, so
    that none waits for the GPU and the CPU stays busy (no idle state between calls)."""
    for _ in range(10):
        fn(x)
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000_000)  # ≈ 0.6 s of GPU cycles ahead of the calls
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def main():
    rows = []
    for shape_name in ("v0", "84"):
        shape = PRESETS[shape_name]
        ref = make_reference("84", shape.in_features, shape.out_features, seed=0).cuda()
        x = torch.rand(shape.batch, shape.in_features, device="cuda")
        w, b = ref.gemm.weight.detach(), ref.gemm.bias.detach()
        with torch.no_grad():
            rows.append((shape_name, "-", "F.linear", host_us(lambda x: F.linear(x, w, b), x)))
            rows.append((shape_name, "-", "eager", host_us(ref, x)))
        for precision in ("fp32", "tf32", "3xtf32"):
            m = fusedlib.from_reference(ref, stage="fused", precision=precision)
            bn = m.bn
            args = lambda x: (x, m.gemm.weight, m.gemm.bias, m.scale, bn.weight, bn.bias, bn.running_mean,
                              bn.running_var, bn.num_batches_tracked, "84", precision, True, bn.eps, bn.momentum)
            with torch.no_grad():
                rows.append((shape_name, precision, "module (direct)", host_us(m, x)))
                rows.append((shape_name, precision, "torch.ops (dispatcher)",
                             host_us(lambda x: ops.OPS["fused"](*args(x)), x)))
            rows.append((shape_name, precision, "module, grad needed", host_us(m, x, calls=30)))
    print(f"{'shape':6s} {'precision':9s} {'route':28s} host µs")
    for r in rows:
        print(f"{r[0]:6s} {r[1]:9s} {r[2]:28s} {r[3]:8.1f}")


if __name__ == "__main__":
    main()


def breakdown():
    """Where the host time of one direct call goes (v0, train): the module against its C++
    entry with prebuilt arguments, and torch.profiler's CPU-side events of the entry."""
    from fusedlib import cuda
    from fusedlib.build import load_stage
    shape = PRESETS["v0"]
    ref = make_reference("84", shape.in_features, shape.out_features, seed=0).cuda()
    x = torch.rand(shape.batch, shape.in_features, device="cuda")
    for precision in ("fp32", "tf32"):
        m = fusedlib.from_reference(ref, stage="fused", precision=precision)
        bn = m.bn
        args = (x, m.gemm.weight, m.gemm.bias, m.scale, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                bn.num_batches_tracked, "84", precision, True, bn.eps, bn.momentum,
                cuda.gemm_path(precision, x.device, shape.in_features, x), None)
        ext = load_stage("fused")
        with torch.no_grad():
            print(precision, "module", round(host_us(m, x), 1), "entry", round(host_us(lambda x: ext.forward(*args), x), 1),
                  "empty", round(host_us(lambda x: torch.empty(128, 512, device="cuda"), x), 1))
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(50):
                    ext.forward(*args)
                    torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


if __name__ == "__main__":
    breakdown()
