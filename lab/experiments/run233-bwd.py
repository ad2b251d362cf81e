"""run233 / run235 (see run233.sh): the kernels of one train step of the fused stage at 39's
KernelBench shape (16384 × 4096 → 4096), tf32 and bf16, with the backward's two passes beside
their DRAM floors at the measured copy bandwidth: the partials read dY and Z (and Y at 84), the dZ' pass reads them again and writes
dZ' (and its transpose for the float32 GEMMs). run234b's train steps put the branch's backward
100-240 µs above main's at 39; this lists where the time goes. run237: $PROBLEMS (default 39) and $PRECISIONS
(default tf32,bf16; also fp16) choose the cases, $NAME the file. Prints a table; writes
$OUT/$NAME-bwd.csv (NAME: run233 by default)."""
import os
from pathlib import Path

import pandas as pd
import torch

from fusedlib.lab.course import ceilings
from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import PRESETS, make_reference

OUT = Path(os.environ.get("OUT", "/tmp"))


DTYPES = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main() -> None:
    gbs = ceilings()["bandwidth"]  # the copy bandwidth measured in results/<gpu>/env.json (GB/s)
    rows = []
    for problem in os.environ.get("PROBLEMS", "39").split(","):
        sh = PRESETS[problem]
        ref = make_reference(problem, sh.in_features, sh.out_features, seed=0)
        for precision in os.environ.get("PRECISIONS", "tf32,bf16").split(","):
            dtype = DTYPES[precision]
            mod = from_reference(ref, stage="fused", precision="tf32").cuda().train().to(dtype)
            x = torch.randn(sh.batch, sh.in_features, device="cuda", dtype=dtype)
            dy = torch.randn(sh.batch, sh.out_features, device="cuda", dtype=dtype)

            def step(x, mod=mod, dy=dy):
                mod.zero_grad(set_to_none=True)
                mod(x).backward(dy)

            elem = x.element_size()  # dY's, Y's and Z's bytes (Z' in the dtype)
            plane, reads = sh.batch * sh.out_features, 3 if problem == "84" else 2  # dY, Z (and Y at 84)
            floors = {"backward_partials": reads * elem * plane,
                      "backward_dz": (reads + (1 if elem == 2 else 2)) * elem * plane}
            for name, launches, us in profile_kernels(step, x, calls=5):
                key = next((k for k in floors if k in name), None)
                floor_us = floors[key] / (gbs * 1e3) if key else None
                rows.append(dict(problem=problem, precision=precision, kernel=name[:90], launches=launches,
                                 us=round(us, 1), dram_floor_us=None if floor_us is None else round(floor_us, 1)))
    df = pd.DataFrame(rows)
    df.to_csv(OUT / f"{os.environ.get('NAME', 'run233')}-bwd.csv", index=False)
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()
