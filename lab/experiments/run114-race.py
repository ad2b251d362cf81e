"""run114: racecheck of the persistent tf32 GEMM's unit hand-off, variants side by side. Each
variant is a copy of this tree under /tmp/var-<name> with one edit of gemm_wgmma.cuh, built in
its own cache; `check` runs the fused stage (train: tiles + merge units; eval) at small shapes,
at the default grid and at grid 3 (slots reused), under compute-sanitizer racecheck.
Usage: python run114-race.py setup NAME | check"""
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
K = "fusedlib/kernels/gemm_wgmma.cuh"
READ = "        u = tile_slot[f % 2];\n"
VARIANTS = {
    "base": [],
    # one lane a warp reads the slot, __shfl_sync gives it to the warp
    "oneread": [(READ, "        { int v = 0; if (threadIdx.x % 32 == 0) v = tile_slot[f % 2]; u = __shfl_sync(0xffffffffu, v, 0); }\n")],
    # the slot written and read with shared-memory atomics
    "atomic": [(READ, "        u = atomicAdd(tile_slot + f % 2, 0);\n"),
               ("if (issuer) tile_slot[f % 2] = v = next_unit(p, all_units);",
                "if (issuer) atomicExch(tile_slot + f % 2, v = next_unit(p, all_units));")],
}


def setup(name):
    dst = Path(f"/tmp/var-{name}")
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT / "fusedlib", dst / "fusedlib")
    path = dst / K
    s = path.read_text()
    for a, b in VARIANTS[name]:
        assert s.count(a) == 1, (name, a)
        s = s.replace(a, b)
    path.write_text(s)
    os.environ["FUSEDLIB_CACHE"] = str(dst / "cache")
    sys.path.insert(0, str(dst))
    from fusedlib.build import load_stage
    load_stage("fused")
    print(name, "built")


def check():
    import torch
    import fusedlib
    from fusedlib.reference import make_reference
    for grid in ("0", "3"):
        os.environ["FUSEDLIB_WGMMA_GRID"] = grid
        for problem in ("84", "33"):
            for n, k, m in ((130, 72, 300), (257, 96, 1000), (600, 64, 520)):
                ref = make_reference(problem, k, m, seed=0).cuda()
                f = fusedlib.from_reference(ref, stage="fused", precision="tf32")
                x = torch.rand(n, k, device="cuda")
                with torch.no_grad():
                    f(x); f(x); f.eval(); f(x)
    torch.cuda.synchronize()
    print("check done")


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup(sys.argv[2])
    else:
        check()
