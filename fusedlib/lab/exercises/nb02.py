"""Checks for notebook 02 (the naive stage): predict its DRAM bytes; count a grid's waves."""
from __future__ import annotations

from fusedlib.lab.costmodel import cost
from fusedlib.lab.exercises import exercise, expect
from fusedlib.lab.exercises.solutions import nb02 as solutions


def _gemm_bytes_only(problem, n, k, m):
    """The known-wrong answer: the GEMM's operands and output, the passes after it forgotten."""
    return 4.0 * (n * k + m * k + n * m)


@exercise(solution=solutions.naive_bytes, wrong=_gemm_bytes_only,
          verified="the naive stage's DRAM bytes match the cost model within one percent at five shapes of 84 and 33/39")
def check_naive_bytes(naive_bytes) -> None:
    """``naive_bytes(problem, n, k, m)`` → bytes read plus written by the naive stage's
    train-mode forward (float32), compared with :func:`fusedlib.lab.costmodel.cost` within 1 %."""
    for problem in ("84", "33"):
        for n, k, m in ((1024, 8192, 8192), (16384, 4096, 4096), (512, 300, 1000), (4096, 64, 2048), (256, 4096, 512)):
            want = cost(problem, "naive", n, k, m, "train").bytes
            got = float(naive_bytes(problem, n, k, m))
            expect(abs(got - want) <= 0.01 * want,
                   f"problem {problem} at {n}x{k}->{m}: {got / 1e6:.1f} MB, the cost model counts {want / 1e6:.1f} MB "
                   f"(= {want / (4 * n * m):.2f} N×M tensors of float32 in all)")


def _waves_without_rounding(tiles, sms, blocks_per_sm):
    """The known-wrong answer: a fractional number of waves, and no idle slots."""
    return tiles / (sms * blocks_per_sm), 1.0


@exercise(solution=solutions.waves, wrong=_waves_without_rounding,
          verified="waves and busy share right for full, partial and single waves")
def check_waves(waves) -> None:
    """``waves(tiles, sms, blocks_per_sm)`` → (number of waves, an int; share of the block
    slots busy over those waves, a float in (0, 1])."""
    for tiles, sms, per_sm, want in ((512, 132, 1, (4, 512 / 528)), (264, 132, 2, (1, 1.0)),
                                     (133, 132, 1, (2, 133 / 264)), (64, 132, 1, (1, 64 / 132)),
                                     (2048, 132, 2, (8, 2048 / 2112))):
        got = waves(tiles, sms, per_sm)
        expect(isinstance(got[0], int) or float(got[0]).is_integer(),
               f"{tiles} tiles on {sms} SMs: a grid runs in a whole number of waves, got {got[0]}")
        expect(int(got[0]) == want[0], f"{tiles} tiles, {sms} SMs × {per_sm} blocks: {want[0]} waves, got {got[0]}")
        expect(abs(float(got[1]) - want[1]) < 1e-9,
               f"{tiles} tiles, {sms} SMs × {per_sm} blocks: busy share {want[1]:.3f}, got {float(got[1]):.3f}")
