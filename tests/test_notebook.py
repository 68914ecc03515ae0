"""Executes notebooks/quickstart.ipynb end to end at its tiny size (``SERL_QUICKSTART_TINY=1``)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def _stream_text(nb: nbformat.NotebookNode) -> str:
    """All text the executed cells printed or displayed."""
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            elif "data" in output:
                parts.append(output["data"].get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.slow
def test_quickstart_runs_at_tiny_size(monkeypatch):
    """Every cell runs without error; the results table lists PPO and the baselines."""
    monkeypatch.setenv("SERL_QUICKSTART_TINY", "1")  # the kernel inherits the environment
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in nb.cells), "commit the notebook cleared"
    # Raises CellExecutionError (with the cell and traceback) if any cell fails.
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()
    text = _stream_text(nb)
    assert "tiny run" in text
    assert "PPO" in text and "TWAP" in text and "VWAP" in text
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
