"""run147: the 3xTF32 split of W in shared memory, variants (one process a variant; FL_SPLIT_VARIANT):
0 Wb truncated in place + Ws, 1 Ws only (W read as it is for Wb), 2 as 0 without the consumers'
wait (timing only), 3 no split at all (timing only); 'base': HEAD's kernels (cached split).
Usage: python run147-variants.py build V | time V"""
import statistics, sys
import torch
import fusedlib
from fusedlib import build, cuda as flc
from fusedlib.reference import PRESETS, make_reference

what, v = sys.argv[1], sys.argv[2]
if v != "base":
    src = f'#include "{build.STAGE_FILES["fused"]}"\n#include "{build.HOST}"\n'
    ext = build._load("fused", src, "", None, 0, ["-DFL_STAGE=fused", f"-DFL_SPLIT_VARIANT={v}"])
    flc.load_stage = lambda stage, dev=0: ext
if what == "build":
    if v == "base":
        build.load_stage("fused")
    sys.exit(0)
flush = torch.empty(256 * 2**20 // 4, device="cuda")
for preset in ("84", "39"):
    s = PRESETS[preset]
    ref = make_reference(preset, s.in_features, s.out_features, seed=0).cuda()
    m = fusedlib.from_reference(ref, stage="fused", precision="3xtf32")
    x = torch.rand(s.batch, s.in_features, device="cuda")
    times = []
    with torch.no_grad():
        for i in range(60):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); y = m(x); b.record()
            torch.cuda.synchronize()
            if i >= 10:
                times.append(a.elapsed_time(b))
        ref.train()
        want = ref.double()(x.double()) if preset == "84" else None
        err = ((y.double() - want).norm() / want.norm()).item() if want is not None else float("nan")
    print(f"variant {v} {preset} median {statistics.median(times):.4f} ms min {min(times):.4f} rel_err {err:.2e}", flush=True)
