"""run214 (prepared; one H100 or H200; issue 36's item 5): Z′ in the module's dtype.

A bf16 module's fused forward (84, train) stores Z′ = XWᵀ from the GEMM's epilogue in float32 and its
row pass reads it back: 32 MB written and read at 1024 × 8192, where cuBLAS's GEMM alone writes its Z
in bf16 (16 MB). run210 put the store of Z′ at 10 µs of the bf16 GEMM's once-a-call part a, and the
row pass moves 48 MB in 19.8 µs (run211's note). Stored in the module's dtype, Z′ halves both; the
statistics still come from the float32 accumulators (before the rounding), so only the values the
row pass normalises are rounded, once, where eager PyTorch rounds its Z too.

A copy of the kernels (fusedlib.build.copy_kernels; the package untouched) gets Problem::z16, set by
the fused stage's host code when $FUSEDLIB_Z16 is 1 for a 16-bit module in train mode (one process);
the epilogue then stores Z′ in that dtype (4-byte pairs), and the row pass reads it (84's register
rows and 33/39's affine pass: 8-byte loads of 4 elements, widened exactly). Forward only (no
backward reads this Z′).

For 84 and 33 at 1024 × 8192 → 8192, bf16 and fp16, train mode: Y of the package's kernels, of the
copy with $FUSEDLIB_Z16 unset (must equal the package's bit for bit) and with it set; each one's
normwise error against the same module in float64, beside eager PyTorch's in that dtype (issue 36's
budget: 2 × eager's); then every kernel of a forward profiled (fusedlib.lab.profiling: 10 calls
after an L2 flush each). Then KernelBench's bf16 check (issue 36's item 3, which the fused stage
fails at 33 and 39 with Z′ in float32: design §15) at 84, 33 and 39 through the copy, Z′ float32 and
16-bit. Writes $OUT/run214-z16.csv and run214-kernelbench.csv; prints both. About 5 minutes with
the copy's build."""
import copy as copying
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from fusedlib.build import copy_kernels, load_stage
from fusedlib.lab.profiling import profile_kernels
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

from ab import apply_edits, eager_call, forward_keeping_buffers  # (lab/experiments, the script's folder)

OUT = Path(os.environ.get("OUT", "/tmp"))
COPY = Path("build/run214-z16")

EDITS = {
    "common.cuh": [(
        "  int sync_phase;          // 0: one process (the whole forward); 1: up to the moments; 2: from every rank's\n",
        "  int sync_phase;          // 0: one process (the whole forward); 1: up to the moments; 2: from every rank's\n"
        "  int z16 = 0;             // run214: Z′ (p.z) in the operand's 16-bit type\n")],
    "epilogue.cuh": [(
        """      if (ok0) store_pair(row0 + c, v0, v1, c, cols, pairs);
      if (ok1) store_pair(row1 + c, v2, v3, c, cols, pairs);""",
        """      if (p.z16 == 2 && out == p.z) continue;  // run227: Z′ not stored (the store's cost, for timing)
      if (p.z16 && out == p.z) {  // run214: Z′ in the operand's 16-bit type, 4-byte pairs
        const size_t e0 = (size_t)(m0 + r) * p.m + n0 + c, e1 = e0 + (size_t)8 * p.m;
        if (p.operand == OPERAND_BF16) {
          if (ok0) store_pair16<OPERAND_BF16>(out, e0, v0, v1, c, cols, pairs);
          if (ok1) store_pair16<OPERAND_BF16>(out, e1, v2, v3, c, cols, pairs);
        } else {
          if (ok0) store_pair16<OPERAND_FP16>(out, e0, v0, v1, c, cols, pairs);
          if (ok1) store_pair16<OPERAND_FP16>(out, e1, v2, v3, c, cols, pairs);
        }
        continue;
      }
      if (ok0) store_pair(row0 + c, v0, v1, c, cols, pairs);
      if (ok1) store_pair(row1 + c, v2, v3, c, cols, pairs);"""), (
        "template <int BN, class Epi, bool DEFER = false>\n__device__ __forceinline__ void epilogue_from_fragments(",
        """// run214: elements e, e + 1 of a 16-bit Z′ (e even where pairs: one 4-byte store).
template <int OP>
__device__ __forceinline__ void store_pair16(float* base, size_t e, float a, float b, int c, int cols, bool pairs) {
  auto* z = reinterpret_cast<typename Element<OP>::T*>(base);
  if (pairs && c + 1 < cols) {
    typename Element<OP>::T two[2] = {narrow<OP>(a), narrow<OP>(b)};
    *reinterpret_cast<uint32_t*>(z + e) = *reinterpret_cast<const uint32_t*>(two);
  } else {
    if (c < cols) z[e] = narrow<OP>(a);
    if (c + 1 < cols) z[e + 1] = narrow<OP>(b);
  }
}

template <int BN, class Epi, bool DEFER = false>
__device__ __forceinline__ void epilogue_from_fragments(""")],
    "passes.cuh": [(
        "template <int VEC, int OUT>\n__global__ void __launch_bounds__(kRegRowThreads) online_softmax_rows_regs_kernel(",
        "template <int VEC, int OUT, int IN = OPERAND_FP32>\n"
        "__global__ void __launch_bounds__(kRegRowThreads) online_softmax_rows_regs_kernel("), (
        "template <int OUT>\n__global__ void affine_kernel(",
        """// run214: elements 4·q4 … 4·q4 + 3 of a 16-bit Z′, one 8-byte load, widened (exact).
template <int IN>
__device__ __forceinline__ float4 load4(const float* base, size_t q4) {
  const uint2 u = reinterpret_cast<const uint2*>(base)[q4];
  const auto* e = reinterpret_cast<const typename Element<IN>::T*>(&u);
  return make_float4(widen(e[0]), widen(e[1]), widen(e[2]), widen(e[3]));
}
template <int OUT, int IN = OPERAND_FP32>
__global__ void affine_kernel("""), (
        "      float4 v = z4[q];\n",
        "      float4 v;  // (run214: 16-bit Z′)\n"
        "      if constexpr (IN == OPERAND_FP32) v = z4[q];\n"
        "      else v = load4<IN>(z, q);\n"), (
        "      store<OUT>(y, q, coef[j] * z[q] + c[j]);\n",
        "      store<OUT>(y, q, coef[j] * load<IN>(z, q) + c[j]);  // (run214: 16-bit Z′)\n")],
    "04_fused.cu": [(
        """  if (p.sync_phase != 2) {
    if ((err = launch_gemm<ColumnStatsMerge>(p, p.x, p.w, p.z, st))) return err;  // Z', partials, a, c""",
        """  if (z16_wanted(p)) {  // run214: Z′ in the operand's 16-bit type
    Problem q = p;
    q.z16 = 1;
    if ((err = launch_gemm<ColumnStatsMerge>(q, q.x, q.w, q.z, st))) return err;
    return launch_rows_z16(q, st);
  }
  if (p.sync_phase != 2) {
    if ((err = launch_gemm<ColumnStatsMerge>(p, p.x, p.w, p.z, st))) return err;  // Z', partials, a, c"""), (
        '#include "passes.cuh"\n',
        '''#include "passes.cuh"
#include <cstdlib>
namespace fl {
// run214: a 16-bit module's train forward of 84 in one process, with $FUSEDLIB_Z16=1.
inline bool z16_wanted(const Problem& p) {
  const char* e = std::getenv("FUSEDLIB_Z16");
  return e && e[0] == '1' && p.operand != OPERAND_FP32 && p.sync_phase == 0 &&
         (p.kind != 84 || (p.m % 4 == 0 && p.m <= 4 * kMaxRegRowVec * kRegRowThreads));
}
template <int OP>
inline const char* launch_rows_z16_of(const Problem& p, cudaStream_t st) {
  if (p.kind != 84) {  // 33/39: the affine pass, as launch_affine
    const size_t work = ((size_t)p.n * p.m + 3) / 4;
    const int cap = sm_count() * 16;
    const int blocks = (int)(work < (size_t)cap * 256 ? ceil_div((int)work, 256) : cap);
    affine_kernel<OP, OP><<<blocks, 256, 0, st>>>(p.z, p.coef, y_out(p).y, p.n, p.m, p.num_batches_tracked);
    FL_CHECK_LAUNCH();
    return nullptr;
  }
  const int vec = ceil_div(p.m, 4 * kRegRowThreads);
  const auto kernel = vec == 1   ? online_softmax_rows_regs_kernel<1, OP, OP>
                      : vec == 2 ? online_softmax_rows_regs_kernel<2, OP, OP>
                      : vec <= 4 ? online_softmax_rows_regs_kernel<4, OP, OP>
                                 : online_softmax_rows_regs_kernel<8, OP, OP>;
  kernel<<<p.n, kRegRowThreads, 0, st>>>(p.z, p.coef, y_out(p).y, p.m, p.num_batches_tracked);
  FL_CHECK_LAUNCH();
  return nullptr;
}
inline const char* launch_rows_z16(const Problem& p, cudaStream_t st) {
  return p.operand == OPERAND_BF16 ? launch_rows_z16_of<OPERAND_BF16>(p, st) : launch_rows_z16_of<OPERAND_FP16>(p, st);
}
}  // namespace fl
''')],
}
LOAD_OLD = "    v[i] = q < q4 ? zr[q] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);"
LOAD_NEW = """    const float4 none = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    if constexpr (IN == OPERAND_FP32) v[i] = q < q4 ? zr[q] : none;
    else v[i] = q < q4 ? load4<IN>(z, (size_t)blockIdx.x * q4 + q) : none;"""


def z16_kernels(dest: Path) -> Path:
    """A copy of the kernels with Problem::z16 (see the module's docstring)."""
    copy_kernels(dest)
    apply_edits(dest, {**EDITS, "passes.cuh": EDITS["passes.cuh"] + [(LOAD_OLD, LOAD_NEW)]})
    return dest


def rel(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def timings(package, copy) -> pd.DataFrame:
    """84 and 33 at 1024 × 8192 → 8192, bf16 and fp16, train: bits, errors and kernel times."""
    rows = []
    x32 = torch.randn(1024, 8192, device="cuda")
    for problem in ("84", "33"):
        ref = make_reference(problem, 8192, 8192, seed=0)
        for dtype in (torch.bfloat16, torch.float16):
            mod = from_reference(ref, stage="fused", precision="tf32").cuda().train().to(dtype)
            x = x32.to(dtype)
            eager = copying.deepcopy(ref).to(x.device, dtype).train()
            with torch.no_grad():
                exact = copying.deepcopy(ref).to(x.device, torch.float64).train()(x.double())
                eager_err = rel(eager(x), exact)
                ys = {}
                for label, ext, z16 in (("package", package, "0"), ("copy", copy, "0"),
                                        ("copy, Z′ 16-bit", copy, "1")):
                    os.environ["FUSEDLIB_Z16"] = z16
                    call = eager_call(ext, mod, "tf32")
                    ys[label] = forward_keeping_buffers(call, x, mod.bn)[0]
                    ker = profile_kernels(call, x, calls=10)
                    row = dict(problem=problem, dtype=str(dtype).split(".")[1], variant=label,
                               rel_err=rel(ys[label], exact), eager_rel_err=eager_err,
                               total_us=sum(us for _, _, us in ker), gemm_us=sum(us for n, _, us in ker if "gemm" in n),
                               row_pass_us=sum(us for n, _, us in ker if "softmax" in n or "affine" in n),
                               bit_identical_to_package=torch.equal(ys[label], ys["package"]))
                    rows.append(row)
                    print(row, flush=True)
    os.environ.pop("FUSEDLIB_Z16", None)
    df = pd.DataFrame(rows)
    df["err_over_2_eager"] = df.rel_err / (2 * df.eager_rel_err)
    return df


def kernelbench(copy) -> pd.DataFrame:
    """KernelBench's bf16 check (fusedlib.kernelbench.evaluate: 5 trials, atol = rtol = 1e-2) of the
    fused stage at 84, 33 and 39's shapes through the copy, Z′ float32 and Z′ 16-bit: does Z′ rounded
    as eager rounds its Z bring 33 and 39 within the check's tolerance?"""
    import fusedlib.cuda
    from fusedlib.kernelbench import evaluate
    package_load = fusedlib.cuda.load_stage
    fusedlib.cuda.load_stage = lambda stage, device_index=0: (copy if stage == "fused"
                                                              else package_load(stage, device_index))
    rows = []
    try:
        for problem in ("84", "33", "39"):
            for z16 in ("0", "1"):
                os.environ["FUSEDLIB_Z16"] = z16
                r = evaluate(problem, dtype="bf16", stage="fused")
                rows.append(dict(problem=problem, z16=z16, passed_trials=r["passed_trials"], trials=r["trials"],
                                 max_abs_diff=max(r["max_abs_diff"]), fused_rel_err=max(r["fused_rel_err"]),
                                 eager_rel_err=max(r["eager_rel_err"])))
                print(rows[-1], flush=True)
    finally:
        fusedlib.cuda.load_stage = package_load
        os.environ.pop("FUSEDLIB_Z16", None)
    return pd.DataFrame(rows)


def main() -> None:
    package, copy = load_stage("fused"), load_stage("fused", 0, COPY)
    df = timings(package, copy)
    df.to_csv(OUT / "run214-z16.csv", index=False)
    kb = kernelbench(copy)
    kb.to_csv(OUT / "run214-kernelbench.csv", index=False)
    pd.set_option("display.width", 200)
    print(df.round(4).to_string(index=False))
    print(kb.to_string(index=False))


if __name__ == "__main__":
    if sys.argv[1:] == ["copy"]:
        z16_kernels(COPY)
    else:
        z16_kernels(COPY)
        main()
