"""run143 (on branch cluster-multicast's tree): energy per GEMM under the power cap. run141–run142 found
the fold stage's tf32 wgmma GEMM at cuBLAS's cycle count under a locked clock, but slower in sustained
back-to-back calls, where the H100 runs at its 700 W cap (throttle reason 0x4) and the SM clock follows
the energy a kernel spends a cycle. Measured here, at 33's shape in eval (the fused stage's forward is one
kernel there: the GEMM with its affine epilogue): the GEMM with clusters of two and TMA multicast of W
("pair"), the same build without clusters ("single", $FUSEDLIB_WGMMA_CLUSTER=1), and cuBLAS's TF32
`F.linear`, in phases of 3000 back-to-back calls (A B C A B C), each phase's time a call (CUDA events
around the phase), energy a call (NVML's total-energy counter, mJ) and mean SM clock (NVML, sampled
every 2 ms). Also 39's shape (16384×4096→4096). Prints a table."""
import ctypes
import os
import threading
import time

import torch

import fusedlib
from fusedlib.reference import PRESETS, make_reference

nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0


def energy_mj():
    e = ctypes.c_ulonglong()
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(e)) == 0
    return e.value


clock = {"on": False, "samples": []}


def sampler():
    c = ctypes.c_uint()
    while clock["run"]:
        if clock["on"] and nvml.nvmlDeviceGetClockInfo(dev, 1, ctypes.byref(c)) == 0:  # NVML_CLOCK_SM
            clock["samples"].append(c.value)
        time.sleep(0.002)


clock["run"] = True
threading.Thread(target=sampler, daemon=True).start()
torch.backends.cuda.matmul.allow_tf32 = True
rows = []
with torch.no_grad():
    for shape in ("33", "39"):
        s = PRESETS[shape]
        ref = make_reference("33", s.in_features, s.out_features, seed=0).cuda().eval()
        m = fusedlib.from_reference(ref, stage="fused", precision="tf32").eval()
        x = torch.rand(s.batch, s.in_features, device="cuda")
        w, b = m.gemm.weight.detach(), m.gemm.bias.detach()

        def variant(value):
            def call():
                if value:
                    os.environ["FUSEDLIB_WGMMA_CLUSTER"] = value
                else:
                    os.environ.pop("FUSEDLIB_WGMMA_CLUSTER", None)
                return m(x)
            return call
        fns = {"pair": variant(""), "single": variant("1"), "cuBLAS": lambda: torch.nn.functional.linear(x, w, b)}
        n = 3000 if shape == "33" else 700
        for rnd in range(2):
            for name, fn in fns.items():
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
                time.sleep(0.5)
                clock["samples"] = []
                e0 = energy_mj()
                a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                clock["on"] = True
                a.record()
                for _ in range(n):
                    fn()
                z.record()
                torch.cuda.synchronize()
                clock["on"] = False
                e1 = energy_mj()
                ms = a.elapsed_time(z) / n
                mhz = sum(clock["samples"]) / max(1, len(clock["samples"]))
                rows.append((shape, name, ms, (e1 - e0) / n, mhz))
                print(f"{shape} {name:7s} {ms * 1e3:8.1f} µs a call  {(e1 - e0) / n:7.1f} mJ a call  "
                      f"{(e1 - e0) / 1e3 / (ms * n / 1e3):5.0f} W  SM {mhz:5.0f} MHz  ({len(clock['samples'])} samples)", flush=True)
clock["run"] = False
print("\n| shape | impl | µs a call | mJ a call | W | SM MHz | µs × MHz / 1980 |")
print("|---|---|---|---|---|---|---|")
for shape, name, ms, mj, mhz in rows:
    print(f"| {shape} | {name} | {ms * 1e3:.1f} | {mj:.1f} | {mj / ms:.0f} | {mhz:.0f} | {ms * 1e3 * mhz / 1980:.1f} |")
