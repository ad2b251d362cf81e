"""nbval on machines without CUDA: cells tagged ``gpu`` are skipped (their committed outputs
come from the GPU run); every other cell runs and, unless tagged ``nbval-ignore-output``,
must reproduce its committed output."""
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu cell: needs a CUDA device")
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None and "gpu" in cell.metadata.get("tags", []):
            item.add_marker(skip)
