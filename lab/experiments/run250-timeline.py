"""run250 (one H200 or H100; issue 36's ≤ 1.10 × cuBLAS): the fused GEMM's merge units on a timeline.
run244 put the merges of the fused stage's persistent GEMM at +8 µs at 84 and 33 and +21 at 39 in
bf16 (the units' wait and count alone: +1 and +5), more than their work (a 64-column slice's 8 or
128 tile partials, then the coefficients) explains. A copy of the kernels (the package's untouched)
records, where $FUSEDLIB_TRACE_PTR holds a device buffer's address, from thread 128 of each CTA: each
tile's end (its epilogue done), each merge unit's start, the end of its wait for the column block's
tiles and its end, and the CTA's end (after its last bulk stores), in %globaltimer ns (and the merges'
SM clocks). One traced train forward at 84 and 39 in bf16 after untraced ones. (run250's first call
printed them with printf, whose cost made every merge last hundreds of µs: the records replace it.)
  python run250-timeline.py copy        the copy (build/run250-trace)
  python run250-timeline.py build       the copy, then its fused stage built (the run scripts, in the background)
  python run250-timeline.py trace P     one traced forward of problem P (stdout: the device's lines)
  python run250-timeline.py parse F P   the timeline in F: the tail after the last tile, the merges in it"""
import sys
from pathlib import Path

from ab import edited_copy

COPY = Path("build/run250-trace")
EDITS = {
    "common.cuh": [("  int ranks;               // R\n};",
                    "  int ranks;               // R\n  unsigned long long* trace;  // run250: $FUSEDLIB_TRACE_PTR\n};")],
    "epilogue.cuh": [
        ("""namespace fl {""",
         """namespace fl {

// run250: a record of 4 words [kind << 32 | CTA, id, a, b] at the trace's next slot (word 0 counts them)
__device__ __forceinline__ unsigned long long __run250_now() {  // ns
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
template <class P>
__device__ __forceinline__ void __run250_rec(const P& p, unsigned kind, long long id, unsigned long long a,
                                             unsigned long long b) {
  if (!p.trace) return;
  unsigned long long* r = p.trace + 4 + 4 * atomicAdd(p.trace, 1ull);
  r[0] = ((unsigned long long)kind << 32) | blockIdx.x, r[1] = id, r[2] = a, r[3] = b;
}"""),
        ("""      __nanosleep(200);
    }
  }""", """      __nanosleep(200);
    }
    __run250_rec(p, 3, j0, __run250_now(), clock64());  // W: the wait's end
  }"""),
        # the merge's phases in SM clocks, thread 0 of the unit (run250c): the fence; then in
        # merge_columns the quarter's merge (its smem store), the first barrier, column_done, the second
        ("""  epilogue_sync<256>();
  __threadfence();
  merge_columns(p, smem, j0, cols, tile_rows, tid);""", """  epilogue_sync<256>();
  const long long f0 = clock64();
  __threadfence();
  if (tid == 0) __run250_rec(p, 8, j0, clock64() - f0, 0);  // F: the fence
  merge_columns(p, smem, j0, cols, tile_rows, tid);"""),
        ("""  const int c = tid % 64, q = tid / 64;
""", """  const int c = tid % 64, q = tid / 64;
  const long long c0 = clock64();
"""),
        ("""  smem[3 * tid] = mo.n, smem[3 * tid + 1] = mo.mean, smem[3 * tid + 2] = mo.m2;
  epilogue_sync<256>();""", """  smem[3 * tid] = mo.n, smem[3 * tid + 1] = mo.mean, smem[3 * tid + 2] = mo.m2;
  const long long c1 = clock64();
  epilogue_sync<256>();
  const long long c2 = clock64();"""),
        ("""    column_done(p, j0 + c, r, false);
  }
  epilogue_sync<256>();  // smem read before anyone writes it again""", """    column_done(p, j0 + c, r, false);
  }
  const long long c3 = clock64();
  epilogue_sync<256>();  // smem read before anyone writes it again
  if (tid == 0) __run250_rec(p, 6, j0, c1 - c0, c2 - c0), __run250_rec(p, 7, j0, c3 - c0, clock64() - c0);"""),
    ],
    "gemm_wgmma.cuh": [
        ("""          if (OP != OPERAND_FP32 && wg_z_tma(p)) z_staging_drained<256>(threadIdx.x - 128);  // (epi: staging)
          merge_slice(p, epi, block, j0, min(64, p.m - j0), row_tiles, slices, kWgBM, threadIdx.x - 128);""",
         """          const unsigned long long t0 = p.trace ? __run250_now() : 0ull, c0 = p.trace ? clock64() : 0ull;
          if (OP != OPERAND_FP32 && wg_z_tma(p)) z_staging_drained<256>(threadIdx.x - 128);  // (epi: staging)
          merge_slice(p, epi, block, j0, min(64, p.m - j0), row_tiles, slices, kWgBM, threadIdx.x - 128);
          if (threadIdx.x == 128) __run250_rec(p, 2, j0, t0, __run250_now()), __run250_rec(p, 5, j0, c0, clock64());"""),
        ("""      }
      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA
    }""", """        if (threadIdx.x == 128) __run250_rec(p, 1, u, 0, __run250_now());  // T: the tile's epilogue done
      }
      if (!wg_persistent(PROMOTE)) break;  // one tile a CTA
    }"""),
        ("""      asm volatile("cp.async.bulk.wait_group 0;\\n" ::: "memory");
  }
#endif""", """      asm volatile("cp.async.bulk.wait_group 0;\\n" ::: "memory");
    if (threadIdx.x == 128) __run250_rec(p, 4, 0, 0, __run250_now());  // E: the CTA's end
  }
#endif"""),
        ("      p, out, a, b0, row0, b1);", "      run250_problem(p), out, a, b0, row0, b1);"),
        ("// One launch of the width-BN kernel:",
         """// run250: the trace's device address from $FUSEDLIB_TRACE_PTR (none when unset), read at each launch.
inline Problem run250_problem(const Problem& p) {
  Problem q = p;
  const char* e = std::getenv("FUSEDLIB_TRACE_PTR");
  q.trace = e ? reinterpret_cast<unsigned long long*>(std::strtoull(e, nullptr, 10)) : nullptr;
  return q;
}

// One launch of the width-BN kernel:"""),
    ],
}


def trace(problem: str) -> None:
    import os

    import torch

    from fusedlib.build import load_stage
    from fusedlib.reference import PRESETS

    from ab import eager_call, module_case
    sh = PRESETS[problem]
    mod, x = module_case(problem, (sh.batch, sh.in_features, sh.out_features), "bf16")
    call = eager_call(load_stage("fused", 0, COPY), mod, "tf32")
    for _ in range(5):
        call(x)
    torch.cuda.synchronize()
    buf = torch.zeros(4 + 4 * 32768, dtype=torch.int64, device="cuda")
    os.environ["FUSEDLIB_TRACE_PTR"] = str(buf.data_ptr())
    call(x)
    torch.cuda.synchronize()
    os.environ.pop("FUSEDLIB_TRACE_PTR")
    recs = buf[4:4 + 4 * int(buf[0])].view(-1, 4).cpu().tolist()
    names = {1: "T", 2: "M", 3: "W", 4: "E", 5: "C", 6: "P", 7: "Q", 8: "F"}
    for k, i, a, b in recs:
        print(names[k >> 32], k & 0xFFFFFFFF, i, a, b)


def parse(path: str, problem: str) -> None:
    import pandas as pd
    rows = [ln.split() for ln in Path(path).read_text().splitlines() if ln[:2] in ("T ", "M ", "W ", "E ", "C ", "P ", "Q ", "F ")]
    rec = pd.DataFrame([(r[0], *map(int, r[1:])) for r in rows], columns=["kind", "cta", "id", "a", "b"])
    t = rec[rec.kind == "T"].rename(columns={"id": "unit", "b": "end"})[["cta", "unit", "end"]]
    m = rec[rec.kind == "M"].rename(columns={"id": "j0", "a": "start", "b": "end"})[["cta", "j0", "start", "end"]]
    w = rec[rec.kind == "W"].rename(columns={"id": "j0", "a": "waited", "b": "clk_waited"})[["cta", "j0", "waited", "clk_waited"]]
    c = rec[rec.kind == "C"].rename(columns={"id": "j0", "a": "clk_start", "b": "clk_end"})[["cta", "j0", "clk_start", "clk_end"]]
    e = rec[rec.kind == "E"].rename(columns={"b": "end"})[["cta", "end"]]
    ticks = sorted(set(rec[rec.kind == "T"].b.sort_values().diff().dropna().astype(int)) - {0})[:3]
    print(f"  %globaltimer: its smallest steps between tile ends {ticks} ns")
    m = m.merge(w, on=["cta", "j0"]).merge(c, on=["cta", "j0"])
    m["wait_kclk"] = (m.clk_waited - m.clk_start) / 1e3
    m["merge_kclk"] = (m.clk_end - m.clk_waited) / 1e3
    t0 = min(t.end.min(), m.start.min())
    last_tile, kernel_end = t.end.max(), e.end.max()
    m["wait_us"] = (m.waited - m.start) / 1e3
    m["merge_us"] = (m.end - m.waited) / 1e3
    tail = m[m.end > last_tile]
    print(f"{problem}: {len(t)} tiles, {len(m)} merge units, {len(e)} CTAs; first event to last tile's end "
          f"{(last_tile - t0) / 1e3:.1f} us; last tile's end to the last merge's end {(m.end.max() - last_tile) / 1e3:.1f} us, "
          f"to the last CTA's end {(kernel_end - last_tile) / 1e3:.1f} us")
    print(f"  merges ending after the last tile: {len(tail)}; their merge_us (after the wait) "
          f"median {tail.merge_us.median():.2f}, max {tail.merge_us.max():.2f}; all merges' merge_us median "
          f"{m.merge_us.median():.2f}, max {m.merge_us.max():.2f}; merge_kclk (SM clocks, thousands) median "
          f"{m.merge_kclk.median():.2f}, max {m.merge_kclk.max():.2f}")
    print(f"  tiles' ends: the last 10 % within {(last_tile - t.end.quantile(0.9)) / 1e3:.1f} us of the last; "
          f"CTAs' ends after the last merge: median {(e.end.median() - m.end.max()) / 1e3:.1f} us")
    ph = rec[rec.kind.isin(["P", "Q", "F"])].pivot_table(index=["cta", "id"], columns="kind", values=["a", "b"])
    if len(ph):
        ph.columns = [f"{k}{v}" for v, k in ph.columns]
        ph = ph.reset_index().rename(columns={"id": "j0"}).merge(m[["cta", "j0", "end"]], on=["cta", "j0"])
        late = ph[ph.end > last_tile]
        cols = {"Fa": "fence", "Pa": "quarter merged", "Pb": "+ barrier", "Qa": "+ column_done", "Qb": "+ barrier"}
        print("  the tail's merges, SM clocks (thousands) from the merge's start, median / max: " + "; ".join(
            f"{name} {late[k].median() / 1e3:.2f} / {late[k].max() / 1e3:.2f}" for k, name in cols.items() if k in late))
    per_cta = m.groupby("cta").size()
    print(f"  merge units a CTA: {per_cta.value_counts().sort_index().to_dict()}")
    late = tail.sort_values("end").tail(8).assign(start=lambda d: (d.start - last_tile) / 1e3,
                                                  waited=lambda d: (d.waited - last_tile) / 1e3,
                                                  end=lambda d: (d.end - last_tile) / 1e3)
    print("  the last 8 merges, µs from the last tile's end:")
    print(late[["cta", "j0", "start", "waited", "end", "merge_us", "wait_kclk", "merge_kclk"]].round(2).to_string(index=False))


if __name__ == "__main__":
    if sys.argv[1:] in (["copy"], ["build"]):
        edited_copy(COPY, EDITS)
        if sys.argv[1] == "build":
            from fusedlib.build import load_stage
            load_stage("fused", 0, COPY)
    elif sys.argv[1] == "trace":
        trace(sys.argv[2])
    else:
        parse(sys.argv[2], sys.argv[3])
