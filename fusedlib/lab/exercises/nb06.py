"""Checks for notebook 06: a GEMM's arithmetic intensity, a stage's time bound on the roofline, and
the K at which what a call pays once fades against the GEMM's mainloop."""
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


def _ratio_on_the_slope_only(a_us: float, b_us: float, a_ref_us: float, b_ref_us: float, ratio: float) -> float:
    """The known-wrong answer: the ratio applied to the reference's slope but not its intercept."""
    gain = ratio * b_ref_us - b_us
    excess = a_us - a_ref_us
    return max(0.0, excess / gain * 1024) if gain > 0 else math.inf


@exercise(solution=solutions.k_within, wrong=_ratio_on_the_slope_only,
          verified="the K at which a line comes within a ratio of another, at five pairs of lines")
def check_k_within(k_within) -> None:
    """``k_within(a, b, a_ref, b_ref, ratio)``: the smallest K with a + b·K/1024 ≤ ratio·(a_ref +
    b_ref·K/1024), against cases worked by hand (0 when already within, inf when never)."""
    cases = (((51.0, 22.7, 1.0, 22.4, 1.10), (51.0 - 1.10) / (1.10 * 22.4 - 22.7) * 1024),
             ((150.0, 23.0, 10.0, 22.0, 1.10), (150.0 - 11.0) / (24.2 - 23.0) * 1024),
             ((5.0, 20.0, 10.0, 20.0, 1.0), 0.0),
             ((30.0, 25.0, 10.0, 22.0, 1.10), math.inf),
             ((30.0, 20.0, 20.0, 20.0, 1.25), 1024.0))
    for args, want in cases:
        got = k_within(*args)
        ok = got == want if math.isinf(want) or want == 0 else math.isclose(got, want, rel_tol=1e-9)
        expect(ok, f"k_within{args}: {got!r}, expected {want!r} (the ratio multiplies the whole reference line, "
                   "its intercept too)")
