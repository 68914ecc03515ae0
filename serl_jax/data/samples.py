"""Paths of the real data samples shipped inside the package (see sample/PROVENANCE.md)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["sample_path"]


def sample_path(market: str) -> Path:
    """Folder of a shipped sample dataset, ready for :func:`load_minute_bars`.

    Args:
        market: ``"cn_1min"`` (4 A-shares, 43 days, 240 bars/day; volume in an
            undocumented relative unit, likely lots of 100 shares) or ``"us_1min"``
            (AAPL, AMZN, MSFT, QQQ, 5 days, ~390 bars/day; volume in shares). Any other
            folder shipped under ``serl_jax/data/sample/`` is accepted too.

    Returns:
        The folder's path on the file system. Provenance and licences:
        ``sample_path(market).parent / "PROVENANCE.md"``.

    Raises:
        ValueError: for an unknown market (the message lists the available ones).
        FileNotFoundError: if the package is installed in a form without a file system
            (e.g. zipped), where the samples cannot be read as plain files.
    """
    root = resources.files("serl_jax.data") / "sample"
    available = sorted(
        p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
    )
    if market not in available:
        raise ValueError(f"unknown sample market {market!r}; available: {', '.join(available)}")
    folder = root / market
    if not isinstance(folder, Path):
        raise FileNotFoundError(f"sample {market!r} is not on a file system ({folder!r})")
    return folder
