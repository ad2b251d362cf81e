"""run251 (one H200 or H100; issue 36): the train forward's kernels at 39, 84 and 33 in bf16, the
package's fused and sums stages beside cuBLAS (F.linear), three profiled rounds (ab.kernel_rounds),
after a branch's kernel changes: the row softmax with one exponential an element (run249), no merge
claimed behind a running one and the merge units' loads unrolled (run250). Writes $OUT/run251-*.csv."""
import os
from pathlib import Path

import torch

from fusedlib.build import load_stage
from fusedlib.reference import PRESETS

from ab import eager_call, kernel_rounds, module_case, report

OUT = Path(os.environ.get("OUT", "/tmp"))


def main() -> None:
    fused, sums = load_stage("fused"), load_stage("sums")
    krows = []
    for problem in ("39", "84", "33"):
        sh = PRESETS[problem]
        shape = (sh.batch, sh.in_features, sh.out_features)
        mod, x = module_case(problem, shape, "bf16")
        smod = module_case(problem, shape, "bf16", "sums")[0]
        w, b = mod.gemm.weight, mod.gemm.bias
        variants = {"fused": eager_call(fused, mod, "tf32"), "sums": eager_call(sums, smod, "tf32"),
                    "cuBLAS": lambda x, w=w, b=b: torch.nn.functional.linear(x, w, b)}
        with torch.no_grad():
            krows += kernel_rounds(variants, x, problem=f"{problem} bf16")
    report("run251", OUT, [], krows, [])


if __name__ == "__main__":
    main()
