"""run237 (see run237.sh): three train steps of the fused stage at 39's KernelBench shape in
$PRECISION (tf32, bf16 or fp16), for ncu to read the backward's partials kernel in the third."""
import os

import torch

from fusedlib.modules import from_reference
from fusedlib.reference import PRESETS, make_reference

DTYPES = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

if __name__ == "__main__":
    dtype = DTYPES[os.environ.get("PRECISION", "bf16")]
    sh = PRESETS["39"]
    mod = from_reference(make_reference("39", sh.in_features, sh.out_features, seed=0), stage="fused",
                         precision="tf32").cuda().train().to(dtype)
    x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=dtype)
    dy = torch.randn(sh.batch, sh.out_features, device="cuda", dtype=dtype)
    for _ in range(3):
        mod.zero_grad(set_to_none=True)
        mod(x).backward(dy)
    torch.cuda.synchronize()
