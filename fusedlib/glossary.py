"""The course's glossary: every technical term a learner meets, with the notebook that defines
it (in a Markdown cell holding the term in bold, ``**TF32**``, and a one-sentence definition
there) and the regular expression that finds a use of it in a notebook's Markdown.

The audience knows PyTorch and CUDA threads and blocks, not Hopper. ``tests/test_course_text.py``
reads the notebooks 00 → 09 in order and fails where a term is used before its definition.
Notebook 00 renders the table (:func:`table`) of the terms the course builds on; notebook 09's,
used nowhere else, are defined where they are used and left out of it.

Patterns are case-sensitive (acronyms must not match inside other words: ``TMA`` is not in
``TMAX``); words add ``(?i)`` themselves, match plurals, and stop at word boundaries (``warp``
does not match ``warpgroup``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """One glossary entry.

    Attributes:
        definition: one plain-language sentence for a learner who knows PyTorch and CUDA
            threads and blocks.
        notebook: the two-digit number of the notebook that defines the term in bold ("00").
        pattern: a regular expression (``re`` syntax) matching a use of the term in Markdown.
    """

    definition: str
    notebook: str
    pattern: str

    def regex(self) -> re.Pattern:
        """The compiled :attr:`pattern`."""
        return re.compile(self.pattern)


TERMS: dict[str, Term] = {
    # ------------------------------------------------------------------ 00: the problem and the set-up
    "KernelBench": Term("A public benchmark of PyTorch programs, each to be rewritten with GPU kernels that give the "
                        "same outputs in less time; its level 2 holds short chains of operators such as 84, 33 and 39.",
                        "00", r"\bKernelBench\b"),
    "kernel": Term("A function the GPU runs in many threads at once, launched from the host.", "00",
                   r"(?i)\bkernels?\b(?!\s+launch)"),
    "thread block": Term("A group of a kernel's threads that run on one SM together and share its shared memory; "
                         "a kernel's threads come in blocks of the same size.", "00", r"(?i)\bthread\s+blocks?\b"),
    "grid": Term("All the thread blocks of one kernel launch.", "00", r"(?i)\bgrids?\b"),
    "cuBLAS": Term("NVIDIA's library of linear-algebra kernels: PyTorch's nn.Linear runs its GEMM on a GPU, the "
                   "fastest GEMM the course measures its own against.", "00", r"\bcuBLAS(?:Lt)?\b"),
    "DRAM": Term("The GPU's main memory (HBM on an H100 or H200): every tensor lives there between kernels, and it is the "
                 "slowest place a kernel reads from or writes to.", "00", r"\bDRAM\b"),
    "L2": Term("The cache between DRAM and the SMs, shared by the whole GPU: data read again soon after may come "
               "from it instead of DRAM.", "00", r"\bL2\b"),
    "SM": Term("A streaming multiprocessor, one of the GPU's processors (132 on an H100 SXM or an H200): it runs several thread "
               "blocks at once and has its own registers and shared memory.", "00", r"\bSMs?\b"),
    "register": Term("A thread's private storage inside the SM, the fastest there is: values kept in registers cost "
                     "no memory traffic to reuse.", "00", r"(?i)\bregisters?\b"),
    "kernel launch": Term("Starting a kernel from the host: every launch costs a few microseconds of overhead, and "
                          "a kernel's results reach the next one only through memory.", "00",
                          r"(?i)\blaunch(es|ed|ing)?\b"),
    "fusion": Term("Doing in one kernel what several kernels did, so that intermediate results stay in registers "
                   "or shared memory instead of travelling through DRAM.", "00", r"(?i)\bfusion\b"),
    "GEMM": Term("General matrix multiply: here Z' = X Wᵀ, the Linear layer's product, 2·N·K·M floating-point "
                 "operations.", "00", r"\bGEMMs?\b"),
    "tile": Term("A rectangular block of a matrix that one thread block loads or computes at a time (128×128 "
                 "elements of Z, for instance).", "00", r"(?i)\btiles?\b"),
    "CTA": Term("Cooperative thread array: NVIDIA's name for a CUDA thread block, the unit that runs on one SM and "
                "computes one tile at a time.", "00", r"\bCTAs?\b"),
    "warp": Term("32 threads of a block that execute each instruction together; a block of 256 threads is 8 "
                 "warps.", "00", r"(?i)\bwarps?\b"),
    "mainloop": Term("The loop over K in which a GEMM's thread block loads tiles of X and W and multiply-adds them "
                     "into its tile of Z, held in registers.", "00", r"(?i)\bmain ?loops?\b"),
    "epilogue": Term("What a GEMM's thread block does with its finished tile after the mainloop: add the bias and "
                     "store it, and anything else computable from values already on chip.", "00",
                     r"(?i)\bepilogues?\b"),
    "tensor core": Term("A unit of each SM that multiplies small matrix tiles in one instruction, many times "
                        "faster than the ordinary fp32 units.", "00", r"(?i)\btensor[- ]cores?\b"),
    "TF32": Term("TensorFloat-32: an fp32 number with its mantissa cut to 10 bits, the format tensor cores multiply "
                 "fp32 inputs in; products are accurate to about one part in a thousand.", "00",
                 r"\b(?:TF32|tf32)\b"),
    "3xTF32": Term("Each fp32 operand split into a TF32 part and a TF32 remainder, and three TF32 products summed: "
                   "nearly fp32's accuracy on tensor cores, for three times their work.", "00",
                   r"\b3[x×](?:TF32|tf32)\b"),
    "arithmetic intensity": Term("The FLOPs a kernel performs per byte it moves to or from DRAM.", "00",
                                 r"(?i)\barithmetic intensit(y|ies)\b"),
    "roofline": Term("A kernel's time is at least the larger of its FLOPs over the peak FLOP rate and its bytes "
                     "over the DRAM bandwidth: below an arithmetic intensity the bandwidth bounds it, above it the "
                     "compute.", "00", r"(?i)\brooflines?\b"),
    "shared memory": Term("On-chip memory inside each SM, shared by the threads of one block: much faster than L2, "
                          "and where a block stages the tiles it works on.", "00", r"(?i)\bshared[- ]memory\b"),
    "ridge point": Term("The arithmetic intensity at which a GPU's FLOP rate and its DRAM bandwidth take the same "
                        "time: below it a kernel is memory-bound, above it compute-bound.", "00",
                        r"(?i)\bridge points?\b"),
    "column block": Term("All the tiles of Z that cover the same columns: the tiles whose partials a column's "
                         "statistics merge.", "00", r"(?i)\bcolumn blocks?\b"),
    "Chan's merge": Term("The exact rule that combines the row count, mean and sum of squared deviations of two "
                         "blocks of rows into those of both, without reading the rows again (Chan, Golub & LeVeque).",
                         "00", r"\bChan(?:'s|’s)?(?:\s+|-)(?:merge[ds]?|formula)\b"),
    "online softmax": Term("A softmax whose row maximum and sum of exponentials come from one sweep over the row, the "
                           "running sum rescaled whenever the maximum grows.", "00", r"(?i)\bonline[- ]softmax\b"),
    "CUDA graph": Term("A recording of a sequence of kernel launches, captured once and replayed with one call, "
                       "which saves the host's per-launch overhead.", "00", r"\bCUDA graphs?\b"),
    # ------------------------------------------------------------------ 01: the algebra
    "normwise relative error": Term("The norm of a result's difference from the float64 result over the norm of "
                                    "that result, ‖y − y₆₄‖ / ‖y₆₄‖: one number for a whole tensor.", "01",
                                    r"(?i)\bnormwise\b"),
    # ------------------------------------------------------------------ 02: the naive stage and the GEMM engine
    "sm_XY": Term("NVIDIA's name for compute capability X.Y, the GPU generation a kernel is compiled for: sm_80 is "
                  "Ampere (A100), sm_90a Hopper (H100, H200) with its architecture-specific instructions.", "02",
                  r"\bsm_(?:\d+a?|XY)\b|(?i:\bcompute capabilit(?:y|ies)\b)"),
    "SIMT": Term("Single instruction, multiple threads: the ordinary CUDA cores, each thread computing its own "
                 "fp32 fused multiply-adds; the fp32 GEMM runs this way.", "02", r"\bSIMT\b"),
    "mma.sync": Term("The tensor-core instruction of Ampere GPUs (sm_80 on): one warp multiplies a 16×8 tile by an "
                     "8×8 tile and waits for the result.", "02", r"\bmma\.sync\b"),
    "warpgroup": Term("Four consecutive warps (128 threads) that Hopper's wgmma instruction treats as one.", "02",
                      r"(?i)\bwarp ?groups?\b"),
    "wgmma": Term("Hopper's warpgroup tensor-core instruction: a warpgroup multiplies tiles read straight from "
                  "shared memory, asynchronously, so loads and math overlap.", "02", r"\bwgmma\b"),
    "TMA": Term("Tensor Memory Accelerator: a Hopper unit that copies a whole tile between DRAM and shared memory "
                "on one thread's request, computing the addresses itself.", "02", r"\bTMA\b"),
    "occupancy": Term("How many warps an SM holds at once, as a share of the most it can; registers and shared "
                      "memory per block limit it.", "02", r"(?i)\boccupancy\b"),
    "wave": Term("The set of thread blocks the GPU runs at the same time, one batch of blocks per SM; a grid of more "
                 "blocks runs in several waves, and a last, partial wave leaves SMs idle.", "02",
                 r"(?i)\bwaves?\b"),
    "split-K": Term("Splitting the K loop of a GEMM over several thread blocks, each summing part of K for the same "
                    "tile, and adding their partial tiles after; more blocks for a GEMM with few tiles.", "02",
                    r"(?i)\bsplit[- ]?k\b"),
    "FFMA": Term("The fp32 fused multiply-add instruction, a·b + c rounded once: the SIMT GEMM's unit of work.",
                 "02", r"\bFFMAs?\b"),
    "coalesced": Term("A warp's 32 memory accesses falling on consecutive addresses, so that a few wide "
                      "transactions serve them all.", "02", r"(?i)\bcoalesc(?:ed|ing|es|e)\b"),
    "SGEMM": Term("BLAS's name for a GEMM in fp32 (single precision).", "02", r"\bSGEMMs?\b"),
    "bank conflict": Term("Threads of a warp reading different words of the same one of shared memory's 32 banks: "
                          "they wait for each other.", "02", r"(?i)\bbank\s+conflicts?\b"),
    "grid-stride loop": Term("A kernel loop in which thread t of T takes elements t, t + T, t + 2T, …, so that a "
                             "grid of any size covers a tensor.", "02", r"(?i)\bgrid-stride\s+loops?\b"),
    "persistent kernel": Term("A kernel launched with one thread block per SM, each looping over many tiles "
                              "instead of one block per tile.", "02", r"(?i)\bpersistent\b"),
    # ------------------------------------------------------------------ 04: the statistics in the epilogue
    "lane": Term("A thread's index (0–31) within its warp.", "04", r"(?i)\blanes?\b"),
    "shuffle": Term("An instruction by which a thread reads another lane's register directly "
                    "(``__shfl_xor_sync``), without shared memory.", "04", r"(?i)\bshuffles?\b"),
    "butterfly": Term("A reduction across lanes by rounds of shuffles between lanes whose numbers differ in one "
                      "bit, each lane keeping half of the values and adding its partner's: log₂ of the lanes rounds.",
                      "04", r"(?i)\bbutterfl(y|ies)\b"),
    # ------------------------------------------------------------------ 05: the fused stage's GEMM
    "mbarrier": Term("A barrier object in shared memory that threads (and TMA copies) arrive at and wait on, to "
                     "tell one warp that another's data is ready.", "05", r"\bmbarriers?\b"),
    "setmaxnreg": Term("A Hopper instruction that moves registers between warpgroups of one block: the loading "
                       "warpgroup gives some up, the computing ones take them.", "05", r"\bsetmaxnreg\b"),
    "multicast": Term("One TMA copy delivered to the shared memory of several thread blocks of a cluster at once, "
                      "so that a tile they all need is read from L2 once.", "05", r"(?i)\bmulticast\b"),
    "swizzle": Term("A permutation of the addresses of a tile in shared memory so that the threads reading a column "
                    "hit different banks.", "05", r"(?i)\bswizzl(e|es|ed|ing)\b"),
    "producer/consumer": Term("Warp specialization: some warps (producers) only load tiles, the others (consumers) "
                              "only compute on them, handing tiles over through barriers.", "05",
                              r"(?i)\bproducers?\b|\bconsumers?\b|\bwarp[- ]speciali[sz](ed|ation)\b"),
    "cluster": Term("A group of CTAs that Hopper runs at the same time on nearby SMs, which can read and write "
                    "each other's shared memory.", "05", r"(?i)\bclusters?\b"),
    # ------------------------------------------------------------------ 05: the 16-bit precisions
    "bf16": Term("bfloat16, a 16-bit float with fp32's 8 exponent bits and 7 mantissa bits: fp32's range with "
                 "about two significant decimal digits; the format models usually train in.", "05",
                 r"\b(?:bf16|BF16|bfloat16)\b"),
    "fp16": Term("IEEE half precision, a 16-bit float with 5 exponent bits and 10 mantissa bits: about three "
                 "significant decimal digits, but nothing beyond 65504 and a narrow range near zero.", "05",
                 r"\b(?:fp16|FP16|float16)\b"),
    # ------------------------------------------------------------------ 07: eval mode and state kept between calls
    "version counter": Term("The integer every PyTorch tensor carries (``t._version``), incremented by each in-place "
                            "operation run through PyTorch's operators; autograd reads it to refuse a backward "
                            "through an overwritten tensor.", "07", r"(?i)\bversion counters?\b"),
    # ------------------------------------------------------------------ 08: the backward
    "autocast": Term("``torch.autocast``: a context in which PyTorch runs chosen operators, such as nn.Linear, in a "
                     "lower precision (bf16 here) while the parameters stay float32.", "08", r"(?i)\bautocast\b"),
    # ------------------------------------------------------------------ 09: data parallelism
    "rank": Term("One of the processes that train together, usually one per GPU, numbered from 0: each holds a "
                 "copy of the model and a slice of every batch.", "09",
                 r"(?i)\branks?\b(?!\s+them\b)"),  # (not the verb: notebook 03 "ranks them")
    "process group": Term("The set of ranks that call collectives together; ``torch.distributed.init_process_group`` "
                          "makes the default one.", "09", r"(?i)\bprocess[- ]groups?\b"),
    "collective": Term("An operation that every rank of a process group calls together, such as an all-gather or an "
                       "all-reduce: the only way the ranks exchange data.", "09", r"(?i)\bcollectives?\b"),
    "gloo": Term("A backend of ``torch.distributed`` whose collectives run on the CPU (CUDA tensors travel through "
                 "the host): it works on any machine.", "09", r"\bgloo\b"),
    "NCCL": Term("NVIDIA's collective-communication library, ``torch.distributed``'s backend for CUDA tensors: its "
                 "collectives run as kernels on the GPUs, over NVLink or the network.", "09", r"\bNCCL\b"),
    "all-gather": Term("A collective in which each rank contributes a tensor and every rank receives all of them, in "
                       "rank order.", "09", r"(?i)\ball[- ]gathers?\b"),
    "all-reduce": Term("A collective in which each rank contributes a tensor and every rank receives their elementwise "
                       "sum over all ranks.", "09", r"(?i)\ball[- ]reduc(?:e|es|ed|ing)\b"),
    "DDP": Term("DistributedDataParallel, PyTorch's data-parallel wrapper: each rank runs the model on its own rows, "
                "and the backward all-reduces the parameters' gradients and divides them by the world size.", "09",
                r"\bDDP\b|\bDistributedDataParallel\b"),
    "broadcast": Term("A collective in which one rank sends a tensor and every other rank receives a copy of it.", "09",
                      r"(?i)(?<!\()\bbroadcast(?:s|ing)?\b(?!\))"),  # (not notebook 01's "(broadcast) product")
    "world size": Term("The number of ranks in a process group, usually the number of GPUs that train together.",
                       "09", r"(?i)\bworld[- ]sizes?\b"),
}


def bold_definition(term: str, markdown: str) -> bool:
    """True if ``markdown`` holds ``term`` in bold: a ``**…**`` span that the term's pattern matches."""
    rx = TERMS[term].regex()
    return any(rx.search(span) for span in re.findall(r"\*\*(.+?)\*\*", markdown, flags=re.S))


#: Notebooks whose terms only they use: defined there in bold (and checked like every term), but
#: not in notebook 00's table of the terms the course builds on.
OWN_TERMS_NOTEBOOKS = frozenset({"09"})


def table():
    """The glossary as a pandas DataFrame, one row per term in the order of the course: term,
    definition and the notebook that introduces it; the terms of
    :data:`OWN_TERMS_NOTEBOOKS` left out (notebook 00 renders this table)."""
    import pandas as pd
    return pd.DataFrame([{"term": name, "introduced in": f"notebook {t.notebook}", "definition": t.definition}
                         for name, t in TERMS.items()
                         if t.notebook not in OWN_TERMS_NOTEBOOKS]).set_index("term")
