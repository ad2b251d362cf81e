"""run233 / run235 (see run233.sh): the kernels of one train step of the fused stage at 39's
KernelBench shape (16384 × 4096 → 4096), tf32 and bf16, with the backward's two passes beside
their DRAM floors at the measured copy bandwidth: the partials read dY and Z (and Y at 84), the dZ' pass reads them again and writes
dZ' (and its transpose for the float32 GEMMs). run234b's train steps put the branch's backward
100-240 µs above main's at 39; this lists where the time goes. Prints a table; writes
$OUT/run233-bwd.csv."""
import os
from pathlib import Path

import pandas as pd
import torch

from fusedlib.lab.course import ceilings
from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import PRESETS, make_reference

OUT = Path(os.environ.get("OUT", "/tmp"))


def main() -> None:
    gbs = ceilings()["bandwidth"]  # the copy bandwidth measured in results/<gpu>/env.json (GB/s)
    sh = PRESETS["39"]
    ref = make_reference("39", sh.in_features, sh.out_features, seed=0)
    rows = []
    for precision, dtype in (("tf32", torch.float32), ("bf16", torch.bfloat16)):
        mod = from_reference(ref, stage="fused", precision="tf32").cuda().train().to(dtype)
        x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=dtype)
        dy = torch.randn(sh.batch, sh.out_features, device="cuda", dtype=dtype)

        def step(x, mod=mod, dy=dy):
            mod.zero_grad(set_to_none=True)
            mod(x).backward(dy)

        elem = x.element_size()  # dY's and Z's bytes (Z' in the dtype: branch ztma)
        plane = sh.batch * sh.out_features
        floors = {"backward_partials": 2 * elem * plane, "backward_dz": (2 + (1 if elem == 2 else 2)) * elem * plane}
        for name, launches, us in profile_kernels(step, x, calls=5):
            key = next((k for k in floors if k in name), None)
            floor_us = floors[key] / (gbs * 1e3) if key else None
            rows.append(dict(precision=precision, kernel=name[:90], launches=launches, us=round(us, 1),
                             dram_floor_us=None if floor_us is None else round(floor_us, 1)))
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "run233-bwd.csv", index=False)
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()
