"""Execute every notebook in order, headless, in place (outputs saved into the .ipynb).

On a machine with CUDA the cells tagged ``gpu`` run the kernels; elsewhere they print that
they were skipped. Usage: ``python notebooks/run_all.py [names...]`` (from the repository root).
"""
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent


def main(names: list[str]) -> int:
    paths = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))
    if names:
        paths = [p for p in paths if any(n in p.name for n in names)]
    for path in paths:
        start = time.time()
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
        nbformat.write(nb, path)
        print(f"{path.name}: executed in {time.time() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
