"""Real market data: validated minute bars -> day and symbol splits -> dense episode arrays.

Pure numpy/pandas (no JAX import): the environments move :class:`EpisodeSet` arrays to the
device themselves. Typical use::

    from serl_jax.data import load_market, sample_path

    market = load_market(sample_path("us_1min"))
    market.train.price  # [N, T] float32

Volumes are in the data's own unit: shares for the US sample, an undocumented relative
unit (likely lots of 100 shares) for the A-share sample.
"""

from serl_jax.data.episodes import (
    FEATURE_NAMES,
    EpisodeSet,
    MarketSplits,
    TrainStats,
    build_episodes,
    fit_stats,
    hold_out_symbols,
    load_market,
    split_days,
    with_trailing_volume,
)
from serl_jax.data.loader import (
    DataError,
    DroppedDay,
    LoadReport,
    MinuteBars,
    bars_from_frame,
    load_minute_bars,
)
from serl_jax.data.samples import sample_path

__all__ = [
    "FEATURE_NAMES",
    "DataError",
    "DroppedDay",
    "EpisodeSet",
    "LoadReport",
    "MarketSplits",
    "MinuteBars",
    "TrainStats",
    "bars_from_frame",
    "build_episodes",
    "fit_stats",
    "hold_out_symbols",
    "load_market",
    "load_minute_bars",
    "sample_path",
    "split_days",
    "with_trailing_volume",
]
