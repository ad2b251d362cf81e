"""Solutions for notebook 06 (roofline and throughput)."""


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
