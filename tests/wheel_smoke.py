"""The installed wheel on its own (run by .ci/wheel-test from a folder outside the checkout, in
a fresh venv holding only torch and the wheel's dependencies): ``import fusedlib`` without the
lab's packages, the kernel sources in the package, a forward and a backward of a fused module on
the CPU against PyTorch's module, and a lab command naming its extra. Exit status 0 when all
hold; an AssertionError (non-zero status) names the first that does not."""
import importlib.util
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent

for name in ("pandas", "matplotlib", "tqdm"):
    assert importlib.util.find_spec(name) is None, f"{name} is installed: this test needs a venv without the lab extra"

import torch  # noqa: E402

import fusedlib  # noqa: E402

where = Path(fusedlib.__file__).resolve()
assert where.parent != CHECKOUT / "fusedlib" and "site-packages" in where.parts, \
    f"fusedlib imported from the checkout ({where}), not from the installed wheel"
assert "fusedlib.lab" not in sys.modules, "import fusedlib imported the lab"
kernels = sorted(p.name for p in (where.parent / "kernels").glob("*.cu*"))
from fusedlib import build  # noqa: E402  (imports no torch extension: builds nothing)
missing = sorted({p.name for p in build.source_files()} - set(kernels))
assert not missing, f"kernel sources the build needs are missing from the wheel: {missing}"

torch.manual_seed(0)
ref = fusedlib.GemmBatchNormScalingSoftmax(64, 32, scale_shape=(1,)).double()
fused = fusedlib.from_reference(ref, stage="fused", precision="fp32")
x = torch.rand(16, 64, dtype=torch.float64, requires_grad=True)
x_ref = x.detach().clone().requires_grad_()
y, y_ref = fused(x), ref(x_ref)
assert torch.allclose(y, y_ref, rtol=1e-9, atol=1e-12), "forward differs from PyTorch's"
dy = torch.randn_like(y)
y.backward(dy)
y_ref.backward(dy)
assert torch.allclose(x.grad, x_ref.grad, rtol=1e-7, atol=1e-10), "dX differs from PyTorch's"
assert torch.allclose(fused.gemm.weight.grad, ref.gemm.weight.grad, rtol=1e-7, atol=1e-10), "dW differs"

proc = subprocess.run([sys.executable, "-m", "fusedlib", "report"], capture_output=True, text=True)
assert proc.returncode == 2 and 'fusedlib[lab]' in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
    f"a lab command without the extra: status {proc.returncode}, {proc.stderr!r}"
print(f"wheel smoke test passed: fusedlib {fusedlib.__version__} from {where.parent}, kernels {len(kernels)} files, "
      "CPU forward and backward match PyTorch, the lab names its extra")
