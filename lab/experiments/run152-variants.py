"""run152: where the 3xTF32 split of W in shared memory costs time at 1024 rows (84/33's 8 row
tiles), variants of gemm_wgmma.cuh made by text substitution in a copy of the kernels (one
process a variant): v0 this tree; nowait: the consumers do not wait for the split (timing only);
nosplit: no split and no wait (timing only: the W slot as it landed); reorder: the split writes
Ws only (the tensor cores read W's slot as Wb, truncating), the consumers issue Xs·W and Xb·W of
the stage before they wait for the split, then Xb·Ws.
Usage: python run152-variants.py build V | time V  (FUSEDLIB_WGMMA_WSPLIT=smem)"""
import shutil, statistics, sys
from pathlib import Path
import torch
import fusedlib
from fusedlib import build, cuda as flc
from fusedlib.reference import PRESETS, make_reference

WAIT = "            if (k0 == 0 && !parts) mbar_wait(split + s, (it / ST) & 1);  // W's parts of the stage are ready\n"
PRODUCTS = """            for (int j = 0; j < G; ++j) {  // the small products first; the step's first from zero
              const int kk = k0 + j;
              wgmma_tf32_rs(d, xs[j], smem_desc_sw128(b + kk * 32), kk != 0);
              wgmma_tf32_rs(d, xb[j], smem_desc_sw128(b + T::kBBytes + kk * 32), 1);
              wgmma_tf32_rs(d, xb[j], smem_desc_sw128(b + kk * 32), 1);
            }
"""
REORDERED = """            for (int j = 0; j < G; ++j) {  // W's slot (Wb as the tensor cores read it) first
              const int kk = k0 + j;
              wgmma_tf32_rs(d, xs[j], smem_desc_sw128(b + kk * 32), kk != 0);
              wgmma_tf32_rs(d, xb[j], smem_desc_sw128(b + kk * 32), 1);
            }
            if (k0 == 0 && !parts) mbar_wait(split + s, (it / ST) & 1);  // Ws of the stage is ready
#pragma unroll
            for (int j = 0; j < G; ++j) wgmma_tf32_rs(d, xb[j], smem_desc_sw128(b + T::kBBytes + (k0 + j) * 32), 1);
"""
SPLIT_CALL = "  for (int i = t; i < (int)(BYTES / 16); i += kWgSplitThreads) split_w4(big[i], big[i], small[i]);\n"
SPLIT_WS_ONLY = ("  for (int i = t; i < (int)(BYTES / 16); i += kWgSplitThreads) {\n"
                 "    uint4 unused;\n    split_w4(big[i], unused, small[i]);\n  }\n")
LOOP = "      for (int kt = kt0, it = 0; kt < kt1 && !parts; ++kt, ++it) {"


def variant_dir(v: str) -> Path:
    src = build.KERNEL_DIR
    dst = Path(f"/tmp/kv-{v}")
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    f = dst / "gemm_wgmma.cuh"
    text = f.read_text()
    for old in (WAIT, PRODUCTS, SPLIT_CALL, LOOP):
        assert text.count(old) == 1, old
    if v in ("nowait", "nosplit"):
        text = text.replace(WAIT, "")
    if v == "nosplit":
        text = text.replace(LOOP, "      for (int kt = kt0, it = 0; kt < kt1 && false; ++kt, ++it) {")
    if v == "reorder":
        text = text.replace(WAIT, "").replace(PRODUCTS, REORDERED).replace(SPLIT_CALL, SPLIT_WS_ONLY)
    f.write_text(text)
    return dst


what, v = sys.argv[1], sys.argv[2]
build.KERNEL_DIR = Path(f"/tmp/kv-{v}") if what == "time" else variant_dir(v)
ext = build.load_stage("fused")
flc.load_stage = lambda stage, dev=0: ext
if what == "build":
    sys.exit(0)
flush = torch.empty(256 * 2**20 // 4, device="cuda")
for preset in ("84", "33"):
    s = PRESETS[preset]
    ref = make_reference(preset, s.in_features, s.out_features, seed=0).cuda()
    m = fusedlib.from_reference(ref, stage="fused", precision="3xtf32")
    x = torch.rand(s.batch, s.in_features, device="cuda")
    times = []
    with torch.no_grad():
        for i in range(80):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); y = m(x); b.record()
            torch.cuda.synchronize()
            if i >= 10:
                times.append(a.elapsed_time(b))
        want = ref.double()(x.double())
        err = ((y.double() - want).norm() / want.norm()).item()
    print(f"variant {v} {preset} median {statistics.median(times):.4f} ms min {min(times):.4f} rel_err {err:.2e}", flush=True)
