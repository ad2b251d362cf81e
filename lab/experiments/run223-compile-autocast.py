"""run223 (one GPU): torch.compile of a float32 module under torch.autocast against the eager module
under autocast: where do the compiled call's rounding points differ? For 84/fused and 33/sums, bf16,
train then eval: the largest difference of Y between compiled and eager autocast, and each one's
distance to float64 forwards whose x, W, b are rounded to bf16 or not (which operands the call rounds).
The AOT graph's casts and fusedlib calls are printed by TORCH_LOGS=aot_graphs (grep them)."""
import copy

import torch

import fusedlib
from fusedlib.reference import make_reference


def forward64(ref, state, x, rx, rw, rb, training):
    r = copy.deepcopy(ref)
    r.load_state_dict(state, strict=False)  # the module's buffers (eval: after its train call)
    r = r.double()
    bf = lambda t, on: t.to(torch.bfloat16).double() if on else t.double()  # noqa: E731
    with torch.no_grad():
        r.gemm.weight.copy_(bf(ref.gemm.weight.detach(), rw))
        r.gemm.bias.copy_(bf(ref.gemm.bias.detach(), rb))
    r.train(training)
    return r(bf(x, rx)).float()


for kind, stage in (("84", "fused"), ("33", "sums")):
    torch._dynamo.reset()
    ref = make_reference(kind, 64, 48, seed=3).cuda()
    eager = fusedlib.from_reference(ref, stage=stage).cuda()
    compiled = torch.compile(copy.deepcopy(eager), fullgraph=True)
    x = torch.rand(40, 64, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
    for training in (True, False):
        eager.train(training)
        compiled.train(training)
        state = copy.deepcopy(eager.state_dict())
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ye, yc = eager(x), compiled(x)
        ye, yc = ye.detach(), yc.detach()
        print(f"{kind} {stage} {'train' if training else 'eval'}: max|compiled - eager| {(yc - ye).abs().max().item():.3e}")
        for rx, rw, rb in ((1, 1, 1), (1, 1, 0), (0, 0, 0), (1, 0, 0), (0, 1, 0)):
            y64 = forward64(ref, state, x, rx, rw, rb, training)
            print(f"   rounded x{rx} W{rw} b{rb}: eager {(ye - y64).abs().max().item():.3e}  compiled {(yc - y64).abs().max().item():.3e}")
