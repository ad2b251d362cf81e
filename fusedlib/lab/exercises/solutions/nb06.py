"""Solutions for notebook 06 (roofline and throughput)."""
import math


def gemm_intensity(n: int, k: int, m: int) -> float:
    """Arithmetic intensity (FLOP/byte) of Z = X Wᵀ + b in fp32 with X n×k, W m×k, b of m:
    2·n·k·m FLOPs for the products plus n·m for the bias; X, W and b read once and Z written
    once, 4 bytes an element."""
    flops = 2 * n * k * m + n * m
    bytes_ = 4 * (n * k + m * k + m + n * m)
    return flops / bytes_


def predicted_ms(passes, tflops: float, gbytes_per_s: float) -> float:
    """Predicted time (ms) of kernels run one after another: each pass (flops, bytes) is
    bound by its own roof, max(flops / rate, bytes / bandwidth), and the passes add up."""
    return sum(max(f / (tflops * 1e12), b / (gbytes_per_s * 1e9)) for f, b in passes) * 1e3


def k_within(a_us: float, b_us: float, a_ref_us: float, b_ref_us: float, ratio: float) -> float:
    """The smallest K ≥ 0 at which a call of time a + b·K/1024 µs is within ``ratio`` × a
    reference's a_ref + b_ref·K/1024 (b, b_ref: µs per 1024 of K): 0 when it already is at
    K = 0, ``math.inf`` when it never is (its slope is not below ratio × the reference's)."""
    excess = a_us - ratio * a_ref_us       # what is over the budget at K = 0
    gain = ratio * b_ref_us - b_us         # what each 1024 of K wins back
    if excess <= 0:
        return 0.0
    return excess / gain * 1024 if gain > 0 else math.inf
