"""run195: the grid the cluster launch of run193 takes (kineto's kernel records), against the
unclustered kernel on the full grid and on a grid of 66 CTAs (84, bf16, sums, train)."""
import json, os, tempfile
import torch
from torch.profiler import ProfilerActivity, profile
from fusedlib.modules import from_reference
from fusedlib.reference import make_reference

ref = make_reference("84", 8192, 8192, seed=0)
m = from_reference(ref, stage="sums", precision="tf32").to(torch.bfloat16).cuda().train()
x = torch.randn(1024, 8192, device="cuda", dtype=torch.bfloat16)
out = open(os.path.join(os.environ.get("OUT", "."), "run195.log"), "w")
for label, env in (("off", {"FUSEDLIB_WGMMA_CLUSTER": "0"}), ("off grid 66", {"FUSEDLIB_WGMMA_CLUSTER": "0", "FUSEDLIB_WGMMA_GRID": "66"}),
                   ("on", {}), ("on grid 132", {"FUSEDLIB_WGMMA_GRID": "132"})):
    for k in ("FUSEDLIB_WGMMA_CLUSTER", "FUSEDLIB_WGMMA_GRID"):
        os.environ.pop(k, None)
    os.environ.update(env)
    with torch.no_grad():
        for _ in range(3):
            m(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                m(x)
            torch.cuda.synchronize()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "kernel" and "wgmma" in e.get("name", "")]
    durs = sorted(e["dur"] for e in ev)
    a = ev[0]["args"] if ev else {}
    line = f"{label:12s} grid {a.get('grid')} block {a.get('block')} cluster {a.get('cluster', '-')} smem {a.get('shared memory')} regs {a.get('registers per thread')} median µs {durs[len(durs)//2] if durs else '-'}"
    print(line); print(line, file=out, flush=True)
