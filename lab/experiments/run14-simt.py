"""run14: the SIMT mainloop with register prefetch of the next K step, at 3 and 4 blocks an
SM (launch bounds), against run13's (no prefetch: 7066 / 7196 / 7460 us for the 84 fp32
GEMM with the bias, statistics and statistics+merge epilogues). Smoke check of every stage
in fp32 on odd shapes, per-kernel GEMM times at 84, and the fp32 ladder timed round-robin."""
import os, sys, time, subprocess, statistics
import torch
from fusedlib import algebra, build, check
from fusedlib.lab.bench import build_impl, peer_precision, profile_kernels
from fusedlib.reference import make_reference, parse_shape

t0 = time.time()
orig_flags = build.arch_flags


def interleaved(fns, x, warmup=3, iters=24, rounds=4, flush_mb=256):
    flush = torch.empty(flush_mb * (1 << 20) // 4, device="cuda")
    with torch.no_grad():
        for fn, prec in fns.values():
            with peer_precision(prec):
                for _ in range(warmup):
                    fn(x)
        times = {k: [] for k in fns}
        for _ in range(rounds):
            for name, (fn, prec) in fns.items():
                with peer_precision(prec):
                    for _ in range(iters // rounds):
                        flush.zero_()
                        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        a.record(); fn(x); b.record(); torch.cuda.synchronize()
                        times[name].append(a.elapsed_time(b))
    return {k: statistics.median(v) for k, v in times.items()}


for blocks in (3, 4):
    build.arch_flags = lambda cap, b=blocks: orig_flags(cap) + [f"-DFL_SIMT_MIN_BLOCKS={b}"]
    build.load_stage.cache_clear()
    env = dict(os.environ)
    code = ("import fusedlib.build as b; o = b.arch_flags; "
            f"b.arch_flags = lambda c: o(c) + ['-DFL_SIMT_MIN_BLOCKS={blocks}']; b.load_stage('{{s}}')")
    procs = [subprocess.Popen([sys.executable, "-c", code.format(s=s)]) for s in build.STAGE_FILES]
    print(f"blocks={blocks} build rcs", [p.wait() for p in procs], f"{time.time() - t0:.0f} s", flush=True)
    bad = []
    for stage in algebra.STAGES:
        for problem in ("84", "33"):
            for shape in ("257x1000->999", "2x64->3", "v0", "640x1000->1000"):
                for mode in ("train", "eval"):
                    r = check.run_case(problem, stage, mode, "fp32", shape, 1, "cuda", "randn")
                    if not r["passed"]:
                        bad.append((stage, problem, shape, mode, r["rel_err"]))
    print(f"blocks={blocks} smoke fp32 failures: {bad}", flush=True)
    for problem in ("84", "39"):
        sh = parse_shape(problem)
        ref = make_reference(problem, sh.in_features, sh.out_features, seed=0).cuda()
        x = torch.rand(sh.batch, sh.in_features, device="cuda")
        fns = {impl: (build_impl(impl, ref, "fp32")[0], "fp32") for impl in
               list(algebra.STAGES) + ["eager", "gemm_only"]}
        if problem == "84":
            for impl in algebra.STAGES:
                with torch.no_grad():
                    for name, calls, us in profile_kernels(fns[impl][0], x, calls=3):
                        if "gemm" in name:
                            print(f"blocks={blocks} 84 {impl:6s} {us:9.1f} us  {name[:70]}", flush=True)
        med = interleaved(fns, x, iters=24 if problem == "84" else 12)
        print(f"blocks={blocks} {problem} fp32 ladder: " + "  ".join(f"{k} {v:.3f}" for k, v in med.items()),
              flush=True)
        del ref, fns
        torch.cuda.empty_cache()
print(f"total {time.time() - t0:.0f} s")
