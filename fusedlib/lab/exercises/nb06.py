"""Checks for notebook 06: a GEMM's arithmetic intensity, and a stage's time bound on the roofline."""
from __future__ import annotations

import math

from fusedlib.lab import costmodel
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb06 as solutions


def _intensity_without_the_output(n: int, k: int, m: int) -> float:
    """The known-wrong answer: Z's write is not counted."""
    return (2 * n * k * m + n * m) / (4 * (n * k + m * k + m))


@exercise(solution=solutions.gemm_intensity, wrong=_intensity_without_the_output,
          verified="the intensity matches the cost model's GEMM alone at four shapes")
def check_gemm_intensity(gemm_intensity) -> None:
    """``gemm_intensity(n, k, m)`` against ``costmodel.cost(…, "gemm_only", …).intensity``."""
    for n, k, m in ((1024, 8192, 8192), (16384, 4096, 4096), (128, 1024, 512), (7, 33, 65)):
        want = costmodel.cost("84", "gemm_only", n, k, m).intensity
        got = gemm_intensity(n, k, m)
        expect(math.isclose(got, want, rel_tol=1e-9),
               f"{n}x{k}->{m}: {got:.4g} FLOP/byte, the cost model says {want:.4g} (are all four tensors counted?)")


def _one_roof_for_all(passes, tflops: float, gbytes_per_s: float) -> float:
    """The known-wrong answer: the passes priced as one kernel (total FLOPs, total bytes)."""
    flops, bytes_ = sum(f for f, _ in passes), sum(b for _, b in passes)
    return max(flops / (tflops * 1e12), bytes_ / (gbytes_per_s * 1e9)) * 1e3


@exercise(solution=solutions.predicted_ms, wrong=_one_roof_for_all,
          verified="the predicted times match the cost model's for every stage of 84 and 39 in fp32 and tf32")
def check_predicted_ms(predicted_ms) -> None:
    """``predicted_ms(passes, tflops, gbytes_per_s)`` with passes as (FLOPs, bytes) pairs
    against ``costmodel.Cost.time_ms`` at H100-like ceilings."""
    ceilings = {"fp32": 51.0, "tf32": 425.0}
    for kind, (n, k, m) in (("84", (1024, 8192, 8192)), ("33", (16384, 4096, 4096))):   # 39 is kind 33
        for stage in ("naive", "fold", "sums", "fused"):
            for precision, rate in ceilings.items():
                c = costmodel.cost(kind, stage, n, k, m, "train", precision)
                want = c.time_ms(rate, 3000.0)
                got = predicted_ms([(p.flops, p.bytes) for p in c.passes], rate, 3000.0)
                expect(math.isclose(got, want, rel_tol=1e-9),
                       f"{kind} at {n}x{k}->{m}, {stage} {precision}: {got:.4f} ms, the cost model says {want:.4f} ms "
                       "(each pass is its own kernel, bound by its own roof)")
