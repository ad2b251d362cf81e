"""run237 (see run237.sh): three train steps of the fused stage at 39's KernelBench shape in
$PRECISION (tf32, bf16 or fp16), for ncu to read the backward's partials kernel in the third."""
import os

import torch

from fusedlib.reference import PRESETS

from ab import module_case  # (lab/experiments, the script's folder)

if __name__ == "__main__":
    sh = PRESETS["39"]
    mod, x = module_case("39", (sh.batch, sh.in_features, sh.out_features), os.environ.get("PRECISION", "bf16"))
    dy = torch.randn(sh.batch, sh.out_features, device="cuda", dtype=x.dtype)
    for _ in range(3):
        mod.zero_grad(set_to_none=True)
        mod(x).backward(dy)
    torch.cuda.synchronize()
