"""run23: each bad-argument call of the fused operator in its own process (a crash names its case)."""
import subprocess
import sys

CASE = r'''
import sys, torch, fusedlib
from fusedlib import ops
from fusedlib.build import load_stage
from fusedlib.reference import make_reference
load_stage("fused")
m = fusedlib.from_reference(make_reference("33", 64, 48, seed=0).cuda(), stage="fused")
x = torch.rand(8, 64, device="cuda")
bn = m.bn
args = [x, m.gemm.weight, m.gemm.bias, m.scale, bn.weight, bn.bias, bn.running_mean, bn.running_var,
        bn.num_batches_tracked, "33", "fp32", True, bn.eps, bn.momentum]
i = int(sys.argv[1])
bad = {0: x.double(), 1: m.gemm.weight[:, :32], 2: m.gemm.bias[:10], 6: bn.running_mean.cpu(), 9: "42", 10: "bf16"}
if i in bad:
    args[i] = bad[i]
else:
    args.append("fastest")
try:
    with torch.no_grad():
        ops.OPS["fused"](*args)
    print("no error")
except Exception as e:
    print(type(e).__name__, str(e).splitlines()[0][:200])
'''
if len(sys.argv) > 1:  # one case in this process (under a debugger)
    exec(compile(CASE, "case", "exec"), {"__name__": "case"})
    sys.exit()
for i in (0, 1, 2, 6, 9, 10, 99):
    p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", CASE, str(i)], capture_output=True, text=True)
    print(i, "rc", p.returncode, p.stdout.strip()[-300:], p.stderr.strip().splitlines()[:3] if p.returncode else "")
