"""run138: Nsight Compute's source counters (ncu --page source --csv --print-source sass) of a GEMM
kernel's hottest basic block — its mainloop: instruction mix, warp-stall samples by reason, the
most-stalled instructions, and for each LDS the distance (instructions) to the first one reading
its result. Usage: python run138-src.py src-<kernel>.csv"""
import collections
import csv
import re
import sys

rows = list(csv.reader(open(sys.argv[1])))
print(rows[0][1][:110])
hdr, data = rows[1], rows[2:]
EXEC, SAMPLES = hdr.index("Instructions Executed"), hdr.index("Warp Stall Sampling (All Samples)")
executed = [int(r[EXEC] or 0) for r in data]
total_samples = sum(int(r[SAMPLES] or 0) for r in data)
blocks = collections.defaultdict(lambda: [0, 0, collections.Counter()])  # by execution count: instructions, samples, opcodes
for r, e in zip(data, executed):
    b = blocks[e]
    b[0] += 1
    b[1] += int(r[SAMPLES] or 0)
    b[2][re.sub(r"^@!?U?P\w+\s+", "", r[1].strip()).split()[0]] += 1
print("instructions by execution count (the blocks with the most samples):")
for e, (n, smp, ops_) in sorted(blocks.items(), key=lambda kv: -kv[1][1])[:4]:
    print(f"  executed {e:9d}: {n:5d} instructions, {smp / total_samples:6.1%} of the samples; "
          + ", ".join(f"{k} {v}" for k, v in ops_.most_common(5)))
hot = [i for i, e in enumerate(executed) if e == max(executed)]
body = [data[i][1].strip() for i in hot]


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


ops = collections.Counter(opcode(t).split(".")[0] for t in body)
print(f"hot block: {len(hot)} instructions, executed {max(executed)} times; "
      + ", ".join(f"{k} {v}" for k, v in ops.most_common(10)))
stalls = [c for c in hdr if c.startswith("stall_") and "Not Issued" not in c]
total = sum(int(data[i][SAMPLES] or 0) for i in hot)
by = {c: sum(float(data[i][hdr.index(c)] or 0) for i in hot) for c in stalls}
print(f"samples in the block: {total} ({total / total_samples:.1%} of the kernel's); per reason, % of the block's:")
print("  " + ", ".join(f"{k[6:]} {v / total:.1%}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]) if v / total >= 0.003))
# LDS → first reader distance
dist = []
for j, t in enumerate(body):
    if opcode(t).startswith("LDS"):
        found = re.search(r"LDS\S*\s+R(\d+)", t)
        if not found:  # LDS RZ: a placeholder ptxas leaves, no result
            continue
        dst = int(found.group(1))
        width = 4 if ".128" in t else 2 if ".64" in t else 1
        regs = {f"R{dst + q}" for q in range(width)}
        for d, u in enumerate(body[j + 1:] + body[:j], 1):  # the loop wraps around
            if any(re.search(rf"\b{r}\b", u.split(",", 1)[1] if "," in u else "") for r in regs):
                dist.append(d)
                break
if dist:
    print(f"LDS → first reader: min {min(dist)}, median {sorted(dist)[len(dist) // 2]}, max {max(dist)} instructions "
          f"({len(dist)} LDS); under 16: {sum(d < 16 for d in dist)}")
print("most-stalled instructions (samples, top reasons):")
for i in sorted(hot, key=lambda i: -int(data[i][SAMPLES] or 0))[:8]:
    top = sorted(((float(data[i][hdr.index(c)] or 0), c[6:]) for c in stalls), reverse=True)[:3]
    print(f"  {int(data[i][SAMPLES]):7d}  {data[i][1].strip()[:60]:60s} " + ", ".join(f"{n} {int(v)}" for v, n in top if v))
