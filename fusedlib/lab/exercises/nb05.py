"""Checks for notebook 05: the online softmax (one sweep, running max and sum), the ring of
shared-memory stages of the Hopper GEMM, and the row pass's share of the fused stage's time in
tf32, bf16 and fp16."""
from __future__ import annotations

import math

import torch

from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb05 as solutions


def _online_max_sum_without_rescaling(chunks):
    """The known-wrong answer: ℓ is never rescaled when the maximum rises."""
    m, l = -math.inf, 0.0
    for part in chunks:
        m = max(m, float(part.max()))
        l = l + float((part.double() - m).exp().sum())
    return m, l


def _rows():
    g = torch.Generator().manual_seed(5)
    yield torch.randn(64, generator=g, dtype=torch.float64)                                  # plain
    yield torch.linspace(-3, 5, 40, dtype=torch.float64)                                      # max rises every chunk
    yield torch.randn(200, generator=g, dtype=torch.float64) * 30 + 1000                      # exp(v) overflows
    yield torch.cat([torch.full((5,), -1e4, dtype=torch.float64), torch.randn(20, generator=g, dtype=torch.float64)])


@exercise(solution=solutions.online_max_sum, wrong=_online_max_sum_without_rescaling,
          verified="one sweep over the chunks gives (m, ℓ); exp(v − m)/ℓ matches torch.softmax, large values included")
def check_online_max_sum(online_max_sum) -> None:
    """``online_max_sum(chunks)`` reads an iterator of 1-D chunks of a row once and returns
    (m, ℓ); the check forms exp(v − m)/ℓ and compares it with torch.softmax in float64."""
    for row in _rows():
        for chunk in (1, 4, 7):
            chunks = iter(row.split(chunk))           # an iterator: it can be read once only
            m, l = online_max_sum(chunks)
            expect(next(chunks, None) is None, "the answer left chunks unread: read the whole row")
            expect(float(m) == float(row.max()), f"m = {float(m)} is not the row's maximum {float(row.max())}")
            expect(math.isfinite(float(l)) and float(l) >= 1, f"ℓ = {l}: with m the maximum, ℓ is at least 1 and finite")
            y = (row - float(m)).exp() / float(l)
            expect(torch.allclose(y, torch.softmax(row, 0), rtol=1e-9, atol=1e-12),
                   f"exp(v − m)/ℓ differs from torch.softmax (chunks of {chunk}): is ℓ rescaled when m rises?")


def _ring_stages_forgetting_w_small(bn: int, three_x: bool, bm: int = 128, bk: int = 32, budget: int = 192 * 1024) -> int:
    """A known-wrong answer: counts the shared-memory operand's slice once also in 3xTF32."""
    return min(budget // (4 * bk * (bm + bn)), 6)


def _ring_stages_without_the_cap(bn: int, three_x: bool, bm: int = 128, bk: int = 32, budget: int = 192 * 1024) -> int:
    """The known-wrong answer the tests use: every whole stage that fits, without the kernel's cap of
    six (right at the wide tiles, eight stages at the narrow tf32 tile)."""
    return budget // (4 * bk * (bm + (2 if three_x else 1) * bn))


#: (BN, 3xTF32) of the ring exercise: the tile widths the engine uses (tf32: 256 and the narrow 64;
#: 3xTF32: 168, 192 and the swapped GEMM's 128) and two more.
RING_CASES = ((256, False), (64, False), (168, True), (192, True), (128, True), (128, False), (64, True))


@exercise(solution=solutions.ring_stages, wrong=_ring_stages_without_the_cap,
          verified="the ring's depth matches the kernel's WgTile::kStages for tf32 and 3xTF32 tiles, its cap included")
def check_ring_stages(ring_stages) -> None:
    """``ring_stages(bn, three_x)`` must give the number of stages the kernel's ``WgTile``
    computes (fusedlib/kernels/gemm_wgmma.cuh: 192 KiB of shared memory over the bytes of a
    stage, at most six), for the tile widths of :data:`RING_CASES`."""
    for bn, three_x in RING_CASES:
        want = solutions.ring_stages(bn, three_x)
        got = ring_stages(bn, three_x)
        fits = 192 * 1024 // (4 * 32 * (128 + (2 if three_x else 1) * bn))
        expect(got == want, f"BN = {bn}, {'3xTF32' if three_x else 'tf32'}: {got} stages, the kernel has {want}"
                            + (" (in 3xTF32 a stage holds the shared-memory operand's slice twice: its big and "
                               "small parts)" if three_x and got != fits else "")
                            + (f" ({fits} fit, but the kernel caps the ring)" if got == fits > want else ""))


def _row_pass_share_z_in_float32(n: int, k: int, m: int, element_bytes: int, tflops: float,
                                 gbytes_per_s: float) -> float:
    """The known-wrong answer: Z′ stored in float32 whatever the module's dtype, as naive and fold
    keep their Z (the fused stage keeps Z′ in the module's dtype)."""
    gemm = max(2 * n * k * m / (tflops * 1e12), ((n * k + m * k) * element_bytes + 4 * n * m) / (gbytes_per_s * 1e9))
    row = (4 + element_bytes) * n * m / (gbytes_per_s * 1e9)
    return 100 * row / (gemm + row)


#: (problem, shape) of the row-pass exercise: 84/33's and 39's KernelBench shapes, a smaller K,
#: and one where the GEMM itself is bound by the bandwidth in bf16.
ROW_PASS_CASES = (("84", "1024x8192->8192"), ("39", "16384x4096->4096"), ("33", "4096x1024->4096"),
                  ("33", "8192x512->2048"))
#: How far (percentage points) an answer may be from the cost model, which also counts the small
#: vectors (bias, coefficients, the statistics partials).
ROW_PASS_TOLERANCE = 1.0


@exercise(solution=solutions.row_pass_share, wrong=_row_pass_share_z_in_float32,
          verified="the row pass's share matches the cost model's in tf32, bf16 and fp16 at four shapes")
def check_row_pass_share(row_pass_share) -> None:
    """``row_pass_share(n, k, m, element_bytes, tflops, gbytes_per_s)`` (percent) against the
    cost model's share of the passes around the fused stage's GEMM
    (:func:`fusedlib.lab.course.pass_share`), at the course's ceilings, within
    :data:`ROW_PASS_TOLERANCE` percentage points."""
    from fusedlib.lab import course
    from fusedlib.lab.costmodel import ELEMENT_BYTES
    from fusedlib.reference import parse_shape
    ceil = course.ceilings()
    for precision in ("tf32", "bf16", "fp16"):
        rate = course.gemm_rate(precision, ceil)
        for problem, shape in ROW_PASS_CASES:
            s = parse_shape(shape)
            want = course.pass_share("fused", problem, precision, shape)["passes %"]
            got = row_pass_share(s.batch, s.in_features, s.out_features, ELEMENT_BYTES[precision], rate,
                                 ceil["bandwidth"])
            expect(abs(float(got) - want) <= ROW_PASS_TOLERANCE,
                   f"{problem} at {shape}, {precision}: {float(got):.1f} %, the cost model says {want:.1f} % "
                   "(which tensors are in the module's dtype in the fused stage? is each pass at its own roof?)")
