"""Helpers the notebooks share: ceilings, per-stage predictions, kernel sources and the
committed measurements, so that every number a notebook prints comes from the cost model
or from a committed result."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def results_dir(gpu: str = "h100") -> Path:
    return ROOT / "results" / gpu


def ceilings(gpu: str = "h100") -> dict:
    """Bandwidth (GB/s) and GEMM rates (TFLOP/s, fp32 and tf32) to predict with: measured on
    the GPU (results/<gpu>/env.json) when committed, else the H100 SXM datasheet."""
    from .bench import DATASHEET_H100
    path = results_dir(gpu) / "env.json"
    if path.exists():
        m = json.loads(path.read_text())["measured"]
        return {"bandwidth": m["copy_gbytes_per_s"], "fp32": m["gemm_fp32_tflops"], "tf32": m["gemm_tf32_tflops"],
                "source": f"measured on the GPU ({path.relative_to(ROOT)})"}
    return {"bandwidth": DATASHEET_H100["bandwidth_gbytes_per_s"], "fp32": DATASHEET_H100["fp32_tflops"],
            "tf32": DATASHEET_H100["tf32_tflops"], "source": "H100 SXM datasheet (no env.json committed)"}


def prediction(impl: str, problem: str, shape: str, mode: str = "train", precision: str = "fp32", gpu: str = "h100"):
    """(passes table, predicted ms): the cost model's passes of ``impl`` with MB moved,
    GFLOP and each pass's time at its roof, for the given problem (84/33/39) and shape."""
    import pandas as pd

    from .costmodel import cost
    from .reference import parse_shape, problem_kind
    s = parse_shape(shape)
    c = cost(problem_kind(problem), impl, s.batch, s.in_features, s.out_features, mode, precision)
    ceil = ceilings(gpu)
    rate = ceil["fp32" if precision == "fp32" else "tf32"] / (3 if precision == "3xtf32" else 1)
    rows = [{"pass": p.name, "MB": p.bytes / 1e6, "GFLOP": p.flops / 1e9,
             "ms at its roof": max(p.flops / (rate * 1e12), p.bytes / (ceil["bandwidth"] * 1e9)) * 1e3}
            for p in c.passes]
    table = pd.DataFrame(rows)
    return table, float(table["ms at its roof"].sum())


def kernel_source(stage: str, start: str | None = None, end: str | None = None) -> str:
    """The stage's CUDA file (or the lines from the one containing ``start`` up to the one
    containing ``end``) as a Markdown code block."""
    from .build import KERNEL_DIR, STAGE_FILES
    text = (KERNEL_DIR / (STAGE_FILES.get(stage, stage))).read_text()
    lines = text.splitlines()
    if start:
        i = next(k for k, line in enumerate(lines) if start in line)
        j = next((k for k, line in enumerate(lines[i + 1:], i + 1) if end and end in line), len(lines) - 1)
        lines = lines[i:j + 1]
    return "```cuda\n" + "\n".join(lines) + "\n```"


def measured(impls=None, gpu: str = "h100"):
    """The committed bench.csv as a DataFrame (optionally only some impls), or None."""
    import pandas as pd
    path = results_dir(gpu) / "bench.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path, dtype={"problem": str})
    return df if impls is None else df[df.impl.isin(list(impls))]


def cancellation_lab(ratios=(1, 3, 10, 30, 100, 300, 1000, 3000, 10000), rows: int = 4096, cols: int = 64,
                     tile_rows: int = 64, seed: int = 0):
    """Relative error of the float32 column variance against the exact variance of the same
    float32 numbers, for columns with |mean|/std = ratio: the textbook Σz/Σz² one pass
    (algebra.column_stats_textbook) against Chan-merged tile partials
    (algebra.column_stats_chan). Returns a DataFrame (|mean|/std, method, max relative error)."""
    import pandas as pd
    import torch

    from . import algebra
    g = torch.Generator().manual_seed(seed)
    out = []
    for ratio in ratios:
        z = (ratio + torch.randn(rows, cols, generator=g, dtype=torch.float64)).float()
        _, exact = algebra.column_stats_two_pass(z.double())
        for name, fn in (("textbook Σz, Σz²", algebra.column_stats_textbook), ("Chan merge", algebra.column_stats_chan)):
            _, v = fn(z, tile_rows)
            out.append({"|mean|/std": ratio, "method": name,
                        "max relative error": ((v.double() - exact).abs() / exact).max().item()})
    return pd.DataFrame(out)
