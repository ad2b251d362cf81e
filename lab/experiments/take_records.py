"""Take a landing call's records into the tree, then say which committed records are still stale.

A landing retakes every record on the new kernel sources in three two-GPU calls (run220.sh twice,
then run153.sh PART=records; results/h200/NOTES.md, "The landing of `item5` stopped by a CUDA-graph
test"). Between the calls the records come back as packed folders, and a later part only appends
to a record (bench.csv) that already holds the new sources' rows. This script does the copying:

    python lab/experiments/take_records.py FILES_AT [--gpu h200] [--log run254a]

FILES_AT is the device call's folder of returned files. From g0.tgz, g0b.tgz, g1.tgz and g1b.tgz (run220.sh)
it takes every record a part wrote (bench.csv with sources.json, env.json and profile.csv;
train_step.csv with train_step.sources.json; validation.json), and from the folder itself
run153.sh's sync.csv, sync.sources.json and sync_validation.json; the build's flcache.part-* go to
.cache/ (the next call carries them) and large.json to .cache/gpu-suite/. A record measured on other
kernel sources than the tree's is not taken. With --log, the call's logs go to
results/<gpu>/logs/<log>*.

Last it prints each record of results/<gpu> as current or stale (fusedlib.build.stale_sources, the
rule tests/test_sources.py applies), so that the next call is planned on what is still missing, and
the failures the call's logs report (the GPU suite's failed parts, which the records do not all hold:
the operator tests are run but not recorded). Exit status 0 when every record is current and no
failure was reported, 1 otherwise.
"""
import argparse
import json
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from fusedlib import build  # noqa: E402

#: record file → the file holding the sources it was measured on (None: inside the record itself)
RECORDS = {"bench.csv": "sources.json", "train_step.csv": "train_step.sources.json",
           "sync.csv": "sync.sources.json", "validation.json": None, "sync_validation.json": None}
#: files that travel with a record
COMPANIONS = {"bench.csv": ["env.json", "profile.csv"]}


def stale(folder: Path, record: str) -> list[str] | None:
    """The kernel sources a record in ``folder`` was not measured on (``[]``: current), or None
    where the record or its sources file is missing, or (validation.json) the record is not a
    whole suite's: run179.sh's PART=large writes one of the large cases alone."""
    sources = folder / (RECORDS[record] or record)
    if not (folder / record).exists() or not sources.exists():
        return None
    if record == "validation.json":
        suite = json.loads(sources.read_text())
        if not (suite.get("cases") and suite.get("gradients")):
            return None
    return build.stale_sources(json.loads(sources.read_text())["sources_sha256"], ROOT)


def failures(folder: Path) -> list[str]:
    """The failures a part's logs report: the GPU suite's failed parts (those it does not record,
    the operator tests among them, included), pytest's FAILED lines, and the steps the run scripts
    report with a nonzero status (rc=124: stopped by the call's time limit)."""
    lines = []
    for log in sorted(folder.glob("*.log")) + sorted(folder.glob("*.out")):
        lines += [f"{folder.name}/{log.name}: {line.strip()}" for line in log.read_text(errors="replace").splitlines()
                  if "failed parts:" in line or line.startswith("FAILED ") or re.search(r"\brc=[1-9]", line)]
    return lines


def take(folder: Path, results: Path) -> list[str]:
    """Copy every current record of ``folder`` (with its sources file and companions) into
    ``results``; returns what was taken."""
    taken = []
    for record, sources in RECORDS.items():
        changed = stale(folder, record)
        if changed is None:
            continue
        if changed:
            print(f"  not taken: {folder.name}/{record}, measured on other sources ({', '.join(changed)})")
            continue
        for name in [record, *([sources] if sources else []), *COMPANIONS.get(record, [])]:
            if (folder / name).exists():
                shutil.copy2(folder / name, results / name)
        taken.append(f"{folder.name}/{record}")
    return taken


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files_at", type=Path, help="the device call's folder of returned files")
    parser.add_argument("--gpu", default="h200", help="results/<gpu> (default h200)")
    parser.add_argument("--log", help="copy the call's logs to results/<gpu>/logs/<LOG>*")
    args = parser.parse_args(argv)
    results = ROOT / "results" / args.gpu
    cache = ROOT / ".cache"
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        unpacked = Path(tmp)
        folders = [args.files_at]
        for packed in sorted(args.files_at.glob("g*.tgz")):
            with tarfile.open(packed) as tar:
                tar.extractall(unpacked, filter="data")
            part = unpacked / packed.name.removesuffix(".tgz")
            folders += [part, *([part / "results"] if (part / "results").is_dir() else [])]
        parts = sorted(args.files_at.glob("flcache.part-*"))
        if parts:  # the call's build, for the next call to carry
            for old in cache.glob("flcache.part-*"):
                old.unlink()
            cache.mkdir(exist_ok=True)
            for part in parts:
                shutil.copy2(part, cache / part.name)
            print(f"build cache: {len(parts)} parts into .cache/")
        for folder in folders:
            if (folder / "large.json").exists():
                (cache / "gpu-suite").mkdir(parents=True, exist_ok=True)
                shutil.copy2(folder / "large.json", cache / "gpu-suite" / "large.json")
                print(f"large.json: {folder.name} → .cache/gpu-suite/")
            failed += failures(folder)
            for name in take(folder, results):
                print(f"taken: {name}")
            if args.log and folder.name != "results":
                for log in sorted(folder.glob("*.log")) + sorted(folder.glob("*.out")):
                    prefix = args.log if folder == args.files_at else f"{args.log}-{folder.name}"
                    own = log.stem in ("run220", "run153", args.log)  # the call's own log
                    shutil.copy2(log, results / "logs" / (f"{prefix}.log" if own else f"{prefix}-{log.name}"))
    for line in dict.fromkeys(failed):
        print(f"FAILED in this call: {line}")
    missing = []
    for record in RECORDS:
        changed = stale(results, record)
        state = ("missing (or not a whole suite's)" if changed is None else "current" if not changed
                 else "stale: " + ", ".join(changed))
        print(f"results/{args.gpu}/{record}: {state}")
        missing += [record] if changed != [] else []
    return 1 if missing or failed else 0


if __name__ == "__main__":
    sys.exit(main())
