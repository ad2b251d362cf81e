"""Shared by the experiments that load a copy of the kernels beside the package's (run211,
run213, run214): a module's train forward through one extension's eager_forward (not the
dispatcher, where the extension loaded last answers for every copy), and one forward that leaves
the running buffers as it found them, so that every variant starts from the same state."""


def eager_call(ext, module, precision: str):
    """``call(x)``: ``module``'s train-mode forward (its tensors, kind, eps, momentum) by ``ext``'s
    kernels at the GEMM ``precision`` (fp32, tf32, 3xtf32; a 16-bit module's: tf32)."""
    t, bn = module._tensors(), module.bn

    def call(x):
        return ext.eager_forward(x, *t, module._kind, precision, True, bn.eps, bn.momentum)
    return call


def forward_keeping_buffers(call, x, bn) -> tuple:
    """(Y, running_mean, running_var, num_batches_tracked) after ``call(x)``, copies, with ``bn``'s
    buffers put back as they were before the call."""
    buffers = (bn.running_mean, bn.running_var, bn.num_batches_tracked)
    saved = [b.clone() for b in buffers]
    out = (call(x).clone(), *(b.clone() for b in buffers))
    for b, s in zip(buffers, saved):
        b.copy_(s)
    return out
