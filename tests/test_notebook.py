"""Executes each notebook of notebooks/ end to end at its tiny size (``SERL_QUICKSTART_TINY=1``)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

#: What each notebook's output must name: its size line and the policies it compares.
EXPECTED = {
    "quickstart.ipynb": ("tiny run", "PPO", "TWAP", "VWAP"),
    "serl_loop.ipynb": ("tiny run", "SE-RL", "PPO default", "TWAP"),
}


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
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs_at_tiny_size(name, monkeypatch, tmp_path):
    """Every cell runs without error; the output names the tiny size and the compared
    policies, and shows a figure. The kernel starts in an empty folder: what a notebook
    writes (the SE-RL run folder) lands there, and on Colab the working directory is not
    the repository either."""
    monkeypatch.setenv("SERL_QUICKSTART_TINY", "1")  # the kernel inherits the environment
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert not any(cell.get("outputs") for cell in nb.cells), "commit the notebook cleared"
    # Raises CellExecutionError (with the cell and traceback) if any cell fails.
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    text = _stream_text(nb)
    for expected in EXPECTED[name]:
        assert expected in text
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert not [o for o in outputs if o.output_type == "error"]
