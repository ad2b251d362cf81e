"""run96 (H100): host time per forward of the fused module (its eager way, fusedlib.cuda.eager_forward)
against F.linear and against the operator's way (validate_input + torch.ops.fusedlib.<stage> through the
dispatcher: what every declined call takes), the bench's protocol: L2 flush enqueued, host clock around the
call alone, synchronize; the implementations interleaved call by call, 300 rounds; median µs. Then
torch.profiler's CPU events of 50 eager calls (fused tf32 train, v0)."""
import statistics
import time

import torch
import torch.nn.functional as F

import fusedlib
from fusedlib import cuda, modules
from fusedlib.reference import PRESETS, make_reference

torch.manual_seed(0)
flush = torch.empty(256 << 18, device="cuda")
rows = []
for shape_name in ("v0", "84", "39"):
    s = PRESETS[shape_name]
    problem = "33" if shape_name == "39" else "84"
    ref = make_reference(problem, s.in_features, s.out_features, seed=0).cuda()
    x = torch.rand(s.batch, s.in_features, device="cuda")
    for training in (True, False):
        ref.train(training)
        for precision in ("fp32", "tf32", "3xtf32"):
            m = fusedlib.from_reference(ref, stage="fused", precision=precision)
            w, b = ref.gemm.weight, ref.gemm.bias
            bn = m.bn

            def op_way(x):
                modules.validate_input(x, m.gemm.in_features, m.gemm.weight, m.training)
                return cuda.stage_forward(m, (x, *m._tensors(), m._kind, m._precision, m.training, bn.eps, bn.momentum))

            impls = {"F.linear": lambda x: F.linear(x, w, b), "fused": m, "fused_op_way": op_way}
            times = {k: [] for k in impls}
            with torch.no_grad():
                for fn in impls.values():
                    fn(x)
                torch.cuda.synchronize()
                for _ in range(300):
                    for name, fn in impls.items():
                        flush.zero_()
                        t = time.perf_counter()
                        fn(x)
                        t = time.perf_counter() - t
                        torch.cuda.synchronize()
                        times[name].append(t * 1e6)
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append((shape_name, "train" if training else "eval", precision, med["F.linear"], med["fused"],
                         med["fused_op_way"]))
            print(rows[-1], flush=True)

m = fusedlib.from_reference(make_reference("84", 1024, 512, seed=0).cuda(), stage="fused", precision="tf32")
x = torch.rand(128, 1024, device="cuda")
with torch.no_grad():
    for _ in range(20):
        m(x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(50):
            m(x)
            torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=12))
print("| shape | mode | precision | F.linear µs | fused µs | fused/F.linear | operator's way µs |")
print("|---|---|---|---|---|---|---|")
for shape_name, mode, precision, lin, fused, op in rows:
    print(f"| {shape_name} | {mode} | {precision} | {lin:.1f} | {fused:.1f} | {fused / lin:.2f} | {op:.1f} |")
