"""Execute every notebook of the course in order, headless, and save it with its outputs.

On a machine with CUDA the cells tagged ``gpu`` run the kernels; elsewhere they print that
they were skipped, so the same command works everywhere. Run from anywhere:

    python notebooks/run_all.py                  # all notebooks (00–09, then the appendices), in place
    python notebooks/run_all.py 02 05            # only those whose name contains 02 or 05
    python notebooks/run_all.py appendix         # only the appendices
    python notebooks/run_all.py --out /tmp/nb    # write the executed copies elsewhere

Exit status 1 if a cell raised (the notebook is still written, with the traceback).
"""
import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="run only notebooks whose file name contains one of these")
    parser.add_argument("--out", type=Path, help="folder for the executed notebooks (default: in place)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell (default 1800)")
    args = parser.parse_args(argv)
    paths = sorted(HERE.glob("[0-9][0-9]_*.ipynb")) + sorted(HERE.glob("appendix_*.ipynb"))  # appendices after 09
    if args.names:
        paths = [p for p in paths if any(n in p.name for n in args.names)]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    failed, total = [], time.time()
    for path in paths:
        start = time.time()
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                extra_arguments=["--log-level=ERROR"],  # the kernel's own start-up warnings
                                resources={"metadata": {"path": str(HERE)}})
        status = "executed"
        try:
            client.execute()
        except CellExecutionError as err:
            failed.append(path.name)
            status = "FAILED"
            print(str(err)[-3000:], file=sys.stderr)
        nbformat.write(nb, (args.out / path.name) if args.out else path)
        print(f"{path.name}: {status} in {time.time() - start:.1f} s", flush=True)
    print(f"{len(paths)} notebooks in {time.time() - total:.1f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
