"""run84: which host calls a fused forward spends its time in, at 84's KernelBench shape
(torch.profiler's CPU activities over 50 calls, the GPU idle before each), train and eval, tf32."""
import torch
from torch.profiler import ProfilerActivity, profile

import fusedlib
from fusedlib.reference import PRESETS, make_reference

sh = PRESETS["84"]
ref = make_reference("84", sh.in_features, sh.out_features, seed=0).cuda()
x = torch.rand(sh.batch, sh.in_features, device="cuda")
with torch.no_grad():
    for mode in ("train", "eval"):
        m = fusedlib.from_reference(ref, stage="fused", precision="tf32")
        m.train(mode == "train")
        m(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(50):
                torch.cuda.synchronize()
                m(x)
        print(mode)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=40))
