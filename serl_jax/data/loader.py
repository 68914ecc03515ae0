"""Minute-bar loader: CSV / Parquet files -> validated bars on a per-market slot grid.

Input format (one dataset = one market):

* A folder of files or a single file; ``.csv`` (optionally compressed: ``.csv.gz``,
  ``.csv.bz2``, ``.csv.xz``, ``.csv.zip``) or Parquet (``.parquet``, ``.pq``).
* Either one file per symbol (the symbol is the file name without its suffixes, e.g.
  ``AAPL`` from ``AAPL.csv.gz``) or a ``symbol`` column (which then wins).
* Columns, case-insensitive: ``datetime`` (required; the bar's timestamp as published, in
  exchange-local wall time: A-share bars are labelled by their start minute, the US
  sample's by their end minute), ``close`` or ``price`` (required; ``close`` wins when both
  exist), ``volume`` or ``vol`` (required), ``high`` / ``low`` (optional), ``open`` and any
  other column are ignored.
* Volume is taken in the data's own unit. For the shipped A-share sample that unit is not
  documented upstream (magnitudes suggest lots of 100 shares): treat it as a relative
  quantity. The US sample's volume is in shares.

A trading day is a calendar date. The slot grid is the sorted union of the times of day
observed in the whole dataset (after dropping short days), so A-share days (240 slots,
09:30-11:29 and 13:00-14:59, the lunch break simply absent from the grid) and US days
(390 or 391 slots) both work without a calendar. Mixing markets with different sessions in
one dataset would produce a grid that is the union of both sessions: load one market per
dataset. A grid slot absent on a given day is filled (price forward-filled within the day,
back-filled at the day's start; volume 0; ``filled=True``) and counted in the report.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "CSV_SUFFIXES",
    "PARQUET_SUFFIXES",
    "DataError",
    "DroppedDay",
    "LoadReport",
    "MinuteBars",
    "bars_from_frame",
    "load_minute_bars",
]

CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip")
PARQUET_SUFFIXES = (".parquet", ".pq")
SHORT_DAYS_MODES = ("error", "drop")
FRAME_COLUMNS = ("symbol", "date", "slot", "datetime", "price", "volume", "high", "low", "filled")

# A trailing UTC offset after a clock time: "09:31:00-05:00", "09:31Z", "09:31:00 +0100".
_OFFSET = r"(\d{1,2}:\d{2}(?::\d{2}(?:\.\d*)?)?)\s*(?:Z|UTC|[+-]\d{2}:?\d{2})$"
_NAN_WORDS = {"nan", "na", "n/a", "null", "none", "<na>", "nat"}


class DataError(ValueError):
    """Bad input data. ``str(err)`` is one line naming the file, the row or day, and the
    problem, e.g. ``data/AAPL.csv: row 17: price -1.0 is not positive``."""

    def __init__(self, message: str) -> None:
        # Keep the message on one line whatever an underlying library put in it.
        super().__init__(" ".join(str(message).splitlines()).strip())


@dataclass(frozen=True)
class DroppedDay:
    """One trading day removed by ``short_days="drop"``.

    Attributes:
        symbol: the symbol whose day was dropped.
        date: the calendar date of the day.
        rows: how many input rows the day had (all dropped).
        reason: why, e.g. ``"50 bars, fewer than min_bars_per_day=100"``.
    """

    symbol: str
    date: dt.date
    rows: int
    reason: str


@dataclass(frozen=True, eq=False)
class LoadReport:
    """What the loader read, filled and dropped. Nothing is dropped without an entry here.

    Attributes:
        source: the path given to the loader (or the frame's name).
        rows_read: data rows read per file (header and blank lines excluded).
        blank_rows: blank lines skipped per CSV file (only files that had any).
        filled_slots: per symbol, the number of grid slots absent from the input and filled
            (price forward/back-filled within the day, volume 0). Every symbol is listed.
        dropped: the days dropped by ``short_days="drop"``, in symbol/date order.
        days: the (symbol, day) pairs kept, i.e. episodes.
        slots_per_day: T, the slots of the dataset's grid.
    """

    source: str
    rows_read: dict[str, int]
    blank_rows: dict[str, int]
    filled_slots: dict[str, int]
    dropped: tuple[DroppedDay, ...] = ()
    days: int = 0
    slots_per_day: int = 0

    @property
    def dropped_days(self) -> int:
        """Number of (symbol, day) pairs dropped."""
        return len(self.dropped)

    @property
    def dropped_rows(self) -> int:
        """Number of input rows dropped (all rows of the dropped days)."""
        return sum(d.rows for d in self.dropped)

    @property
    def total_filled(self) -> int:
        """Total filled slots over all symbols."""
        return sum(self.filled_slots.values())

    def summary(self, verbose: bool = False) -> str:
        """The account of the load: one line however many symbols there are, e.g.
        ``data/xsec: 100 symbol(s), 900 symbol-days x 241 minutes, 216,900 rows from 100
        file(s);
        filled 0 minutes (0.00%); dropped 0 days``; ``verbose`` adds one line per symbol's
        filled minutes, per file's blank lines and per dropped day."""
        total = self.days * self.slots_per_day
        share = self.total_filled / total if total else 0.0
        blank = sum(self.blank_rows.values())
        line = (
            f"{self.source}: {len(self.filled_slots)} symbol(s), {self.days} symbol-days x "
            f"{self.slots_per_day} minutes, {sum(self.rows_read.values()):,} rows from "
            f"{len(self.rows_read)} file(s); filled {self.total_filled:,} minutes "
            f"({share:.2%}); dropped {self.dropped_days} day(s) ({self.dropped_rows:,} rows)"
            + (f"; skipped {blank} blank line(s)" if blank else "")
        )
        if not verbose:
            return line
        return "\n".join([line, *self._details()])

    def _details(self) -> list[str]:
        lines = [f"  {name}: {n} blank line(s) skipped" for name, n in self.blank_rows.items()]
        lines += [f"  {s}: filled {n} minute(s)" for s, n in self.filled_slots.items()]
        lines += [f"  dropped {d.symbol} {d.date}: {d.rows} rows, {d.reason}" for d in self.dropped]
        return lines


@dataclass(frozen=True, eq=False)
class MinuteBars:
    """Validated minute bars of one market, aligned on the dataset's slot grid.

    Attributes:
        frame: a tidy DataFrame sorted by (symbol, date, slot) with exactly
            ``len(slot_times)`` rows per (symbol, date) and columns
            ``symbol`` (str), ``date`` (``datetime.date``), ``slot`` (int64, index into
            ``slot_times``), ``datetime`` (datetime64[ns], exchange-local wall time),
            ``price`` (float64, per share: the close), ``volume`` (float64, data units),
            ``high`` / ``low`` (float64, NaN where absent or filled), ``filled`` (bool,
            True where the slot was missing from the input and filled).
        slot_times: the slot grid, the sorted times of day observed in the dataset.
        report: the :class:`LoadReport` of the load this came from.
        name: a short dataset name (folder name or file stem), used in messages.
    """

    frame: pd.DataFrame
    slot_times: tuple[dt.time, ...]
    report: LoadReport
    name: str = ""

    @property
    def n_slots(self) -> int:
        """T, the number of slots per trading day."""
        return len(self.slot_times)

    @property
    def symbols(self) -> tuple[str, ...]:
        """The symbols present, sorted."""
        return tuple(sorted(self.frame["symbol"].unique()))

    @property
    def n_days(self) -> int:
        """Number of (symbol, day) pairs, i.e. of episodes."""
        return len(self.frame) // max(self.n_slots, 1)

    def dates(self, symbol: str) -> tuple[dt.date, ...]:
        """The sorted trading days of ``symbol``."""
        sel = self.frame.loc[self.frame["symbol"] == symbol, "date"]
        return tuple(sorted(sel.unique()))

    def with_frame(self, frame: pd.DataFrame) -> MinuteBars:
        """A copy holding a subset of whole days of this frame (same grid, report, name)."""
        return MinuteBars(frame.reset_index(drop=True), self.slot_times, self.report, self.name)


def _suffix_kind(path: Path) -> tuple[str | None, str]:
    """Returns (``"csv"`` | ``"parquet"`` | None, the symbol stem)."""
    name = path.name
    low = name.lower()
    for kind, suffixes in (("csv", CSV_SUFFIXES), ("parquet", PARQUET_SUFFIXES)):
        for suf in suffixes:
            if low.endswith(suf) and len(name) > len(suf):
                return kind, name[: -len(suf)]
    return None, name


def _unsupported(path: Path) -> DataError:
    suffix = "".join(path.suffixes) or "(none)"
    supported = ", ".join(CSV_SUFFIXES + PARQUET_SUFFIXES)
    return DataError(f"{path}: unsupported file type '{suffix}' (supported: {supported})")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _read_file(path: Path, kind: str) -> pd.DataFrame:
    try:
        if kind == "csv":
            # Strings only, no NA guessing: we validate and quote the raw values ourselves;
            # blank lines are kept so that row numbers match the file.
            return pd.read_csv(
                path, dtype=str, keep_default_na=False, na_filter=False, skip_blank_lines=False
            )
        return pd.read_parquet(path)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: file is empty (no header, no rows)") from None
    except Exception as err:  # any reader failure becomes a one-line DataError
        raise DataError(f"{path}: cannot read as {kind}: {_first_line(err)}") from err


def _describe_bad(name: str, raw: object, value: float, *, positive: bool) -> str:
    text = "" if raw is None else str(raw).strip()
    if np.isnan(value):
        if not isinstance(raw, str) and pd.isna(raw):
            return f"{name} is missing (NaN/null)"
        if text == "":
            return f"{name} is empty"
        if text.lower() in _NAN_WORDS:
            return f"{name} is NaN"
        return f"{name} {text!r} is not a number"
    if not np.isfinite(value):
        return f"{name} {text} is not finite"
    return f"{name} {text} is not positive" if positive else f"{name} {text} is negative"


def _raise_first(label: str, rows: np.ndarray, bad: np.ndarray, describe) -> None:
    """Raises a DataError naming the first bad row, if any."""
    if not bad.any():
        return
    idx = np.flatnonzero(bad)
    first = idx[0]
    more = f" ({len(idx)} such rows in this file)" if len(idx) > 1 else ""
    raise DataError(f"{label}: row {rows[first]}: {describe(first)}{more}")


def _to_float(raw: pd.Series) -> np.ndarray:
    return pd.to_numeric(raw, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def _numeric_column(
    label: str, rows: np.ndarray, raw: pd.Series, name: str, *, positive: bool, optional: bool
) -> np.ndarray:
    values = _to_float(raw)
    if positive:
        bad = ~np.isfinite(values) | (values <= 0)
    else:
        bad = ~np.isfinite(values) | (values < 0)
    raws = raw.to_numpy(dtype=object)
    if optional:
        # Absent values (empty / NaN) are allowed in optional columns; junk is not.
        text = raw.astype(str).str.strip().str.lower()
        absent = (raw.isna() | (text == "") | text.isin(_NAN_WORDS)).to_numpy()
        bad &= ~absent
        values = np.where(absent, np.nan, values)
    _raise_first(
        label,
        rows,
        bad,
        lambda i: _describe_bad(name, raws[i], values[i], positive=positive),
    )
    return values


def _parse_datetime(label: str, rows: np.ndarray, raw: pd.Series) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(raw.dtype):
        parsed = raw
    else:
        text = raw.astype(object)
        try:
            parsed = pd.to_datetime(text, errors="coerce")
        except (ValueError, TypeError):
            parsed = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns]")
        if parsed.isna().any():
            # The format inferred from the first row failed somewhere. Retry as strict
            # ISO 8601 (any precision, with or without 'T') after dropping UTC offsets,
            # which may differ across a DST change: we keep the wall time either way. No
            # lenient per-element guessing: it would turn junk like '9h34' into a time.
            wall = text.astype(str).str.replace(_OFFSET, r"\1", regex=True)
            try:
                iso = pd.to_datetime(wall, errors="coerce", format="ISO8601")
                if iso.isna().sum() < parsed.isna().sum():
                    parsed = iso
            except (ValueError, TypeError):
                pass
    if isinstance(parsed.dtype, pd.DatetimeTZDtype):
        parsed = parsed.dt.tz_localize(None)  # keep exchange-local wall time
    if not pd.api.types.is_datetime64_any_dtype(parsed.dtype):
        raise DataError(f"{label}: column 'datetime' could not be parsed (mixed time zones?)")
    bad = parsed.isna().to_numpy()
    raws = raw.to_numpy(dtype=object)

    def describe(i: int) -> str:
        text = "" if raws[i] is None else str(raws[i]).strip()
        if text == "" or text.lower() in _NAN_WORDS:
            return "datetime is empty"
        return f"unparseable datetime {text!r}"

    _raise_first(label, rows, bad, describe)
    try:
        return parsed.astype("datetime64[ns]")
    except (ValueError, OverflowError) as err:
        raise DataError(f"{label}: datetime out of range: {_first_line(err)}") from err


def _standardize(
    df: pd.DataFrame, label: str, default_symbol: str | None, blank_counts: dict[str, int]
) -> pd.DataFrame:
    """Validates one input table; returns symbol, datetime, price, volume, high, low, _file,
    _row (1-based data row in the input)."""
    names = [str(c).strip().lower() for c in df.columns]
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise DataError(f"{label}: duplicate column '{n}' (column names are case-insensitive)")
        seen.add(n)
    df = df.set_axis(names, axis=1)
    rows = np.arange(1, len(df) + 1)

    # Blank CSV lines come through as all-empty rows: skip them, count them.
    if len(df) and all(pd.api.types.is_string_dtype(df[c]) for c in df):
        blank = np.ones(len(df), dtype=bool)
        for c in df.columns:
            blank &= (df[c].fillna("").astype(str).str.strip() == "").to_numpy()
        if blank.any():
            blank_counts[label] = int(blank.sum())
            df = df.loc[~blank]
            rows = rows[~blank]

    def pick(*options: str) -> str:
        for o in options:
            if o in df.columns:
                return o
        want = " or ".join(f"'{o}'" for o in options)
        found = ", ".join(names) if names else "none"
        raise DataError(f"{label}: missing required column {want} (found columns: {found})")

    dt_col = pick("datetime")
    price_col = pick("close", "price")
    vol_col = pick("volume", "vol")
    if default_symbol is None:
        pick("symbol")
    if len(df) == 0:
        raise DataError(f"{label}: no data rows")

    stamp = _parse_datetime(label, rows, df[dt_col])
    price = _numeric_column(label, rows, df[price_col], price_col, positive=True, optional=False)
    volume = _numeric_column(label, rows, df[vol_col], vol_col, positive=False, optional=False)
    extremes = {}
    for col in ("high", "low"):
        if col in df.columns:
            extremes[col] = _numeric_column(label, rows, df[col], col, positive=True, optional=True)
        else:
            extremes[col] = np.full(len(df), np.nan)
    high, low = extremes["high"], extremes["low"]
    inverted = high < low  # NaN compares False: absent values pass
    _raise_first(label, rows, inverted, lambda i: f"high {high[i]:g} is below low {low[i]:g}")

    if "symbol" in df.columns:
        raw_sym = df["symbol"]
        sym = raw_sym.astype(str).str.strip().to_numpy(dtype=object)
        sym[raw_sym.isna().to_numpy()] = ""
        _raise_first(label, rows, sym == "", lambda i: "symbol is empty")
    else:
        sym = np.full(len(df), default_symbol, dtype=object)

    return pd.DataFrame(
        {
            "symbol": sym,
            "datetime": stamp.to_numpy(),
            "price": price,
            "volume": volume,
            "high": high,
            "low": low,
            "_file": label,
            "_row": rows,
        }
    )


def _check_duplicates(data: pd.DataFrame) -> None:
    dup = data.duplicated(["symbol", "datetime"], keep=False).to_numpy()
    if not dup.any():
        return
    d = data.loc[dup]
    first = d.iloc[0]
    same = d[(d["symbol"] == first["symbol"]) & (d["datetime"] == first["datetime"])]
    a, b = same.iloc[0], same.iloc[1]
    where = (
        f"{a['_file']}: rows {a['_row']} and {b['_row']}"
        if a["_file"] == b["_file"]
        else f"{a['_file']}: row {a['_row']} and {b['_file']}: row {b['_row']}"
    )
    n = int(dup.sum())
    raise DataError(
        f"{where}: duplicate timestamp {first['datetime']} for symbol {first['symbol']} "
        f"({n} rows share a timestamp with another row)"
    )


def _td_to_time(td: pd.Timedelta) -> dt.time:
    return (dt.datetime.min + td.to_pytimedelta()).time()


def _fill_along_days(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Forward-fill then back-fill NaN gaps along axis 1 of a [G, T] array (each row has at
    least one present value)."""
    n_slots = values.shape[1]
    idx = np.where(present, np.arange(n_slots), 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    out = np.take_along_axis(values, idx, axis=1)
    # Leading gaps are still NaN (index 0 was absent): back-fill from the first bar.
    first = np.argmax(present, axis=1)
    lead = np.arange(n_slots)[None, :] < first[:, None]
    return np.where(lead, values[np.arange(len(values)), first][:, None], out)


def _assemble(
    tables: Sequence[pd.DataFrame],
    *,
    source: str,
    name: str,
    rows_read: dict[str, int],
    blank_rows: dict[str, int],
    min_bars_per_day: int,
    short_days: str,
) -> MinuteBars:
    data = pd.concat(tables, ignore_index=True)
    data = data.sort_values(["symbol", "datetime", "_file", "_row"], kind="stable")
    data = data.reset_index(drop=True)
    _check_duplicates(data)

    date = data["datetime"].dt.normalize()
    data["date"] = date
    data["tod"] = data["datetime"] - date

    counts = data.groupby(["symbol", "date"], sort=True).size()
    short = counts[counts < min_bars_per_day]
    dropped: list[DroppedDay] = []
    if len(short):
        if short_days == "error":
            (sym, day), n = next(iter(short.items()))
            sel = data[(data["symbol"] == sym) & (data["date"] == day)]
            files = ", ".join(dict.fromkeys(sel["_file"]))
            raise DataError(
                f"{files}: day {day.date()} (symbol {sym}): {n} bars, fewer than "
                f"min_bars_per_day={min_bars_per_day} ({len(short)} short day(s) in the "
                "dataset; pass short_days='drop' to drop them)"
            )
        for (sym, day), n in short.items():
            dropped.append(
                DroppedDay(
                    symbol=str(sym),
                    date=day.date(),
                    rows=int(n),
                    reason=f"{n} bars, fewer than min_bars_per_day={min_bars_per_day}",
                )
            )
        key = pd.MultiIndex.from_frame(data[["symbol", "date"]])
        data = data.loc[~key.isin(short.index)].reset_index(drop=True)
        if len(data) == 0:
            raise DataError(
                f"{source}: every day has fewer than min_bars_per_day={min_bars_per_day} "
                f"bars ({len(short)} day(s) dropped, nothing left)"
            )

    grid = np.sort(data["tod"].unique())
    n_slots = len(grid)
    data["slot"] = np.searchsorted(grid, data["tod"].to_numpy())

    days = data[["symbol", "date"]].drop_duplicates().reset_index(drop=True)
    n_days = len(days)
    full = days.loc[days.index.repeat(n_slots)].reset_index(drop=True)
    full["slot"] = np.tile(np.arange(n_slots), n_days)
    merged = full.merge(
        data[["symbol", "date", "slot", "datetime", "price", "volume", "high", "low"]],
        on=["symbol", "date", "slot"],
        how="left",
        validate="one_to_one",
        sort=False,
    )
    present = merged["price"].notna().to_numpy().reshape(n_days, n_slots)
    price = merged["price"].to_numpy().reshape(n_days, n_slots)
    merged["price"] = _fill_along_days(price, present).reshape(-1)
    filled = ~present.reshape(-1)
    merged["filled"] = filled
    merged.loc[filled, "volume"] = 0.0
    slot_td = pd.to_timedelta(grid)
    merged.loc[filled, "datetime"] = (
        merged.loc[filled, "date"] + slot_td[merged.loc[filled, "slot"].to_numpy()]
    ).to_numpy()
    merged["date"] = merged["date"].dt.date
    merged["slot"] = merged["slot"].astype("int64")
    merged["symbol"] = merged["symbol"].astype(str)
    frame = merged[list(FRAME_COLUMNS)]

    filled_slots = {
        str(s): int(n) for s, n in frame.groupby("symbol", sort=True)["filled"].sum().items()
    }
    report = LoadReport(
        source=source,
        rows_read=rows_read,
        blank_rows=blank_rows,
        filled_slots=filled_slots,
        dropped=tuple(dropped),
        days=n_days,
        slots_per_day=n_slots,
    )
    slot_times = tuple(_td_to_time(pd.Timedelta(t)) for t in grid)
    return MinuteBars(frame=frame, slot_times=slot_times, report=report, name=name)


def _check_options(min_bars_per_day: int, short_days: str) -> None:
    if short_days not in SHORT_DAYS_MODES:
        raise ValueError(f"short_days must be one of {SHORT_DAYS_MODES}, got {short_days!r}")
    if int(min_bars_per_day) < 1:
        raise ValueError(f"min_bars_per_day must be >= 1, got {min_bars_per_day}")


def load_minute_bars(
    path: str | Path, *, min_bars_per_day: int = 100, short_days: str = "error"
) -> MinuteBars:
    """Loads and validates minute bars of one market from a folder or a single file.

    See the module docstring for the accepted formats. Rows are sorted by time (the input
    order does not matter), split into trading days (calendar dates) and aligned on the
    dataset's slot grid; missing minutes are filled and counted in the report.

    Args:
        path: a folder of ``.csv[.gz]`` / ``.parquet`` files, or one such file.
        min_bars_per_day: a (symbol, day) with fewer input bars than this is an error,
            or is dropped with ``short_days="drop"``.
        short_days: ``"error"`` (default) or ``"drop"``; dropped days are listed in
            ``report.dropped`` with their row counts and the reason.

    Returns:
        The validated :class:`MinuteBars` (price float64 per share, volume float64 in data
        units; for the A-share sample a relative unit, likely lots of 100 shares).

    Raises:
        DataError: (one line naming the file and the row or day) if the path does not
            exist, a file type is unsupported, a folder holds no data file, a file is empty
            or has no data rows or cannot be read, a required column is missing, a
            datetime is unparseable, a price is NaN/inf/non-positive/not a number, a volume
            is NaN/inf/negative, high is below low, a symbol has two rows with the same
            timestamp, or a day has fewer than ``min_bars_per_day`` bars (with
            ``short_days="error"``).
        ValueError: for invalid ``min_bars_per_day`` / ``short_days``.
    """
    _check_options(min_bars_per_day, short_days)
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: path does not exist")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        for p in files:
            if _suffix_kind(p)[0] is None:
                raise _unsupported(p)
        if not files:
            supported = ", ".join(CSV_SUFFIXES + PARQUET_SUFFIXES)
            raise DataError(f"{path}: folder has no data files ({supported})")
        name = path.name
    else:
        kind, stem = _suffix_kind(path)
        if kind is None:
            raise _unsupported(path)
        files = [path]
        name = stem

    tables, rows_read, blank_rows = [], {}, {}
    for p in files:
        kind, stem = _suffix_kind(p)
        raw = _read_file(p, kind)
        label = str(p)
        table = _standardize(raw, label, stem, blank_rows)
        rows_read[label] = len(table)
        tables.append(table)
    return _assemble(
        tables,
        source=str(path),
        name=name,
        rows_read=rows_read,
        blank_rows=blank_rows,
        min_bars_per_day=int(min_bars_per_day),
        short_days=short_days,
    )


def bars_from_frame(
    frame: pd.DataFrame,
    *,
    symbol: str | None = None,
    name: str = "frame",
    min_bars_per_day: int = 100,
    short_days: str = "error",
) -> MinuteBars:
    """Validates an in-memory DataFrame exactly as :func:`load_minute_bars` validates a file.

    Useful for synthetic data in tests and experiments. Rows are numbered 1-based in the
    frame's order in error messages, and ``name`` stands in for the file name.

    Args:
        frame: columns as for a file (``datetime``, ``close``/``price``,
            ``volume``/``vol``, optional ``high``/``low``/``symbol``).
        symbol: the symbol of all rows when the frame has no ``symbol`` column.
        name: label used in messages and as the dataset name.
        min_bars_per_day: as in :func:`load_minute_bars`.
        short_days: as in :func:`load_minute_bars`.

    Returns:
        The validated :class:`MinuteBars`.

    Raises:
        DataError: as in :func:`load_minute_bars`; also when there is neither a ``symbol``
            column nor a ``symbol`` argument.
    """
    _check_options(min_bars_per_day, short_days)
    blank_rows: dict[str, int] = {}
    table = _standardize(frame, name, symbol, blank_rows)
    return _assemble(
        [table],
        source=name,
        name=name,
        rows_read={name: len(table)},
        blank_rows=blank_rows,
        min_bars_per_day=int(min_bars_per_day),
        short_days=short_days,
    )
