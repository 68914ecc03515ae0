"""Loader tests: bad-input errors, session grids, sorting, filling, drops, formats, samples."""

from __future__ import annotations

import datetime as dt
import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from serl_jax.data import (
    DataError,
    MinuteBars,
    bars_from_frame,
    load_minute_bars,
    sample_path,
)

GOOD_HEADER = "datetime,price,vol"


def _times(start: str, n: int) -> list[str]:
    t0 = dt.datetime.strptime(start, "%H:%M")
    return [(t0 + dt.timedelta(minutes=i)).strftime("%H:%M:%S") for i in range(n)]


def _write(path: Path, lines: list[str], header: str = GOOD_HEADER) -> Path:
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


def _good_rows(day: str = "2019-01-02", n: int = 5) -> list[str]:
    return [f"{day} {t},{10 + i * 0.1:.2f},{100 + i}" for i, t in enumerate(_times("09:30", n))]


def _error(path: Path, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        load_minute_bars(path, **{"min_bars_per_day": 1, **kwargs})
    msg = str(info.value)
    assert "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------- bad input, one error each


def test_path_does_not_exist(tmp_path):
    msg = _error(tmp_path / "nope")
    assert "nope" in msg and "does not exist" in msg


def test_unsupported_file_type_single_file_and_in_folder(tmp_path):
    f = tmp_path / "bars.txt"
    f.write_text("x")
    msg = _error(f)
    assert "bars.txt" in msg and "unsupported file type '.txt'" in msg

    folder = tmp_path / "data"
    folder.mkdir()
    _write(folder / "AAA.csv", _good_rows())
    (folder / "notes.json").write_text("{}")
    msg = _error(folder)
    assert "notes.json" in msg and "unsupported file type '.json'" in msg


def test_folder_without_data_files(tmp_path):
    msg = _error(tmp_path)
    assert str(tmp_path) in msg and "no data files" in msg


def test_empty_file_and_header_only(tmp_path):
    f = tmp_path / "AAA.csv"
    f.write_text("")
    msg = _error(f)
    assert "AAA.csv" in msg and "file is empty" in msg

    g = _write(tmp_path / "BBB.csv", [])
    msg = _error(g)
    assert "BBB.csv" in msg and "no data rows" in msg


@pytest.mark.parametrize(
    "header, missing",
    [
        ("time,price,vol", "'datetime'"),
        ("datetime,open,vol", "'close' or 'price'"),
        ("datetime,close,qty", "'volume' or 'vol'"),
    ],
)
def test_missing_column(tmp_path, header, missing):
    f = _write(tmp_path / "AAA.csv", ["2019-01-02 09:30:00,10,5"], header=header)
    msg = _error(f)
    assert "AAA.csv" in msg and f"missing required column {missing}" in msg


def test_unparseable_time_names_row(tmp_path):
    rows = _good_rows(n=5)
    rows[3] = "2019-01-02 9h34,10.3,103"  # a lenient parser would read 09:34
    msg = _error(_write(tmp_path / "AAA.csv", rows))
    assert "AAA.csv: row 4: unparseable datetime '2019-01-02 9h34'" in msg


def test_empty_time_names_row(tmp_path):
    rows = _good_rows(n=5)
    rows[1] = ",10.3,103"
    msg = _error(_write(tmp_path / "AAA.csv", rows))
    assert "AAA.csv: row 2: datetime is empty" in msg


@pytest.mark.parametrize(
    "value, problem",
    [
        ("nan", "price is NaN"),
        ("", "price is empty"),
        ("inf", "price inf is not finite"),
        ("-inf", "price -inf is not finite"),
        ("0", "price 0 is not positive"),
        ("-1.5", "price -1.5 is not positive"),
        ("abc", "price 'abc' is not a number"),
    ],
)
def test_bad_price_names_row_and_problem(tmp_path, value, problem):
    rows = _good_rows(n=5)
    rows[2] = f"2019-01-02 09:32:00,{value},102"
    msg = _error(_write(tmp_path / "AAA.csv", rows))
    assert f"AAA.csv: row 3: {problem}" in msg


@pytest.mark.parametrize(
    "value, problem",
    [("-3", "vol -3 is negative"), ("nan", "vol is NaN"), ("", "vol is empty")],
)
def test_bad_volume_names_row_and_problem(tmp_path, value, problem):
    rows = _good_rows(n=5)
    rows[4] = f"2019-01-02 09:34:00,10.4,{value}"
    msg = _error(_write(tmp_path / "AAA.csv", rows))
    assert f"AAA.csv: row 5: {problem}" in msg


def test_bad_row_count_is_reported(tmp_path):
    rows = _good_rows(n=5)
    rows[1] = "2019-01-02 09:31:00,-1,101"
    rows[3] = "2019-01-02 09:33:00,-2,103"
    msg = _error(_write(tmp_path / "AAA.csv", rows))
    assert "row 2: price -1 is not positive (2 such rows in this file)" in msg


def test_high_below_low(tmp_path):
    header = "datetime,high,low,close,volume"
    rows = [
        "2019-01-02 09:30:00,10.5,10.0,10.2,5",
        "2019-01-02 09:31:00,10.0,10.5,10.2,5",
    ]
    msg = _error(_write(tmp_path / "AAA.csv", rows, header=header))
    assert "AAA.csv: row 2: high 10 is below low 10.5" in msg


def test_duplicate_timestamps_name_both_rows(tmp_path):
    rows = _good_rows(n=5)
    rows[4] = rows[1].replace("10.10", "10.90")  # same timestamp as data row 2
    msg = _error(_write(tmp_path / "AAA.csv", rows))
    assert "AAA.csv: rows 2 and 5: duplicate timestamp 2019-01-02 09:31:00 for symbol AAA" in msg


def test_duplicate_timestamps_within_symbol_column(tmp_path):
    header = "symbol,datetime,price,vol"
    rows = [
        "AAA,2019-01-02 09:30:00,10,1",
        "BBB,2019-01-02 09:30:00,20,1",  # same time, other symbol: fine
        "AAA,2019-01-02 09:30:00,11,1",
    ]
    msg = _error(_write(tmp_path / "all.csv", rows, header=header))
    assert "all.csv: rows 1 and 3: duplicate timestamp" in msg and "symbol AAA" in msg


def test_short_day_error_names_day(tmp_path):
    rows = _good_rows("2019-01-02", 6) + _good_rows("2019-01-03", 3)
    msg = _error(_write(tmp_path / "AAA.csv", rows), min_bars_per_day=5)
    assert "AAA.csv: day 2019-01-03 (symbol AAA): 3 bars, fewer than min_bars_per_day=5" in msg
    assert "short_days='drop'" in msg


def test_short_day_drop_is_reported(tmp_path):
    rows = _good_rows("2019-01-02", 6) + _good_rows("2019-01-03", 3) + _good_rows("2019-01-04", 6)
    bars = load_minute_bars(
        _write(tmp_path / "AAA.csv", rows), min_bars_per_day=5, short_days="drop"
    )
    rep = bars.report
    assert rep.dropped_days == 1 and rep.dropped_rows == 3
    d = rep.dropped[0]
    assert (d.symbol, d.date, d.rows) == ("AAA", dt.date(2019, 1, 3), 3)
    assert "fewer than min_bars_per_day=5" in d.reason
    assert bars.dates("AAA") == (dt.date(2019, 1, 2), dt.date(2019, 1, 4))
    assert rep.rows_read == {str(tmp_path / "AAA.csv"): 15}
    summary = rep.summary()
    assert "1 symbol(s), 2 symbol-days x 6 minutes, 15 rows from 1 file(s)" in summary
    assert "dropped 1 day(s) (3 rows)" in summary and "\n" not in summary
    assert "  dropped AAA 2019-01-03: 3 rows, 3 bars, fewer than" in rep.summary(verbose=True)


def test_short_days_drop_everything_is_an_error(tmp_path):
    msg = _error(
        _write(tmp_path / "AAA.csv", _good_rows(n=3)), min_bars_per_day=5, short_days="drop"
    )
    assert "nothing left" in msg


def test_blank_lines_are_counted_and_rows_stay_file_rows(tmp_path):
    rows = _good_rows(n=5)
    rows.insert(1, "")  # data row 2 is blank
    rows[4] = "2019-01-02 09:33:00,-1,103"  # data row 5 of the file
    f = _write(tmp_path / "AAA.csv", rows)
    assert "AAA.csv: row 5: price -1 is not positive" in _error(f)

    rows[4] = "2019-01-02 09:33:00,10.3,103"
    f = _write(tmp_path / "AAA.csv", rows)
    bars = load_minute_bars(f, min_bars_per_day=1)
    assert bars.report.blank_rows == {str(f): 1}
    assert bars.report.rows_read == {str(f): 5}


def test_invalid_options():
    with pytest.raises(ValueError, match="short_days"):
        load_minute_bars(".", short_days="skip")
    with pytest.raises(ValueError, match="min_bars_per_day"):
        load_minute_bars(".", min_bars_per_day=0)


# ---------------------------------------------------------------- sessions, sorting, filling


def _cn_day(day: str) -> list[str]:
    times = _times("09:30", 120) + _times("13:00", 120)
    return [f"{day} {t},{10 + 0.01 * i:.2f},{1000 + i}" for i, t in enumerate(times)]


def test_ashare_lunch_break_gives_240_slots(tmp_path):
    rows = _cn_day("2019-01-02") + _cn_day("2019-01-03")
    bars = load_minute_bars(_write(tmp_path / "SH600000.csv", rows))
    assert bars.n_slots == 240 and bars.n_days == 2
    assert bars.slot_times[119] == dt.time(11, 29) and bars.slot_times[120] == dt.time(13, 0)
    assert bars.report.filled_slots == {"SH600000": 0}
    day = bars.frame[bars.frame["date"] == dt.date(2019, 1, 3)]
    assert day["slot"].tolist() == list(range(240))
    # 11:29 -> 13:00 are consecutive slots, no filled lunch minutes in between.
    assert day.iloc[119]["price"] == pytest.approx(11.19)
    assert day.iloc[120]["price"] == pytest.approx(11.20)
    assert not day["filled"].any()


def test_us_session_slots_and_391_minute_days(tmp_path):
    rows = [f"2019-02-11 {t},100,10" for t in _times("09:31", 390)]
    # Another day that also has a 09:30 bar: the grid becomes 391 slots.
    rows += [f"2019-02-12 {t},100,10" for t in _times("09:30", 391)]
    bars = load_minute_bars(_write(tmp_path / "AAPL.csv", rows))
    assert bars.n_slots == 391
    assert bars.slot_times[0] == dt.time(9, 30) and bars.slot_times[-1] == dt.time(16, 0)
    # The first day lacked 09:30: filled from its first real bar, and counted.
    assert bars.report.filled_slots == {"AAPL": 1}
    first = bars.frame.iloc[0]
    assert first["filled"] and first["datetime"] == pd.Timestamp("2019-02-11 09:30")


def test_descending_input_is_sorted(tmp_path):
    rows = list(reversed(_good_rows(n=5)))
    bars = load_minute_bars(_write(tmp_path / "AAA.csv", rows), min_bars_per_day=1)
    f = bars.frame
    assert f["datetime"].is_monotonic_increasing
    assert f["price"].tolist() == pytest.approx([10.0, 10.1, 10.2, 10.3, 10.4])
    assert f["volume"].tolist() == [100, 101, 102, 103, 104]


def test_missing_minutes_are_filled_and_counted(tmp_path):
    header = "datetime,high,low,close,volume"
    full = [f"2019-01-02 {t},11,9,{10 + i},{i + 1}" for i, t in enumerate(_times("09:30", 6))]
    # Day 2 lacks its first minute (back-fill) and its fourth (forward-fill).
    day2 = [f"2019-01-03 {t},21,19,{20 + i},{i + 1}" for i, t in enumerate(_times("09:30", 6))]
    del day2[3], day2[0]
    bars = load_minute_bars(
        _write(tmp_path / "AAA.csv", full + day2, header=header), min_bars_per_day=1
    )
    assert bars.report.filled_slots == {"AAA": 2}
    d2 = bars.frame[bars.frame["date"] == dt.date(2019, 1, 3)].reset_index(drop=True)
    assert d2["filled"].tolist() == [True, False, False, True, False, False]
    assert d2["price"].tolist() == [21, 21, 22, 22, 24, 25]
    assert d2["volume"].tolist() == [0, 2, 3, 0, 5, 6]
    assert d2["high"].isna().tolist() == [True, False, False, True, False, False]
    assert d2.loc[3, "datetime"] == pd.Timestamp("2019-01-03 09:33")


def test_symbol_column_case_insensitive_names_and_gzip(tmp_path):
    header = "Symbol,DateTime,CLOSE,Volume"
    rows = [f"AAA,2019-01-02 {t},10,1" for t in _times("09:30", 3)]
    rows += [f"BBB,2019-01-02 {t},20,2" for t in _times("09:30", 3)]
    f = tmp_path / "mixed.csv.gz"
    with gzip.open(f, "wt") as fh:
        fh.write("\n".join([header, *rows]) + "\n")
    bars = load_minute_bars(f, min_bars_per_day=1)
    assert bars.symbols == ("AAA", "BBB") and bars.name == "mixed"
    assert bars.frame.groupby("symbol")["price"].first().to_dict() == {"AAA": 10, "BBB": 20}


def test_parquet_matches_csv(tmp_path):
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    header = "datetime,open,high,low,close,volume"
    frames = []
    for sym, base in (("AAA", 10.0), ("BBB", 50.0)):
        rows = [
            f"2019-02-1{d} {t},{base},{base + 1},{base - 1},{base + 0.01 * i:.2f},{i}"
            for d in (1, 2)
            for i, t in enumerate(_times("09:31", 8))
            if not (d == 2 and i == 3)  # one missing minute
        ]
        _write(csv_dir / f"{sym}.csv", rows, header=header)
        df = pd.read_csv(csv_dir / f"{sym}.csv")
        df.insert(0, "symbol", sym)
        frames.append(df)
    pq_file = tmp_path / "all.parquet"
    pd.concat(frames).to_parquet(pq_file)

    a = load_minute_bars(csv_dir, min_bars_per_day=1)
    b = load_minute_bars(pq_file, min_bars_per_day=1)
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert a.slot_times == b.slot_times
    assert a.report.filled_slots == b.report.filled_slots == {"AAA": 1, "BBB": 1}
    assert b.report.rows_read == {str(pq_file): 30}

    # Parquet errors name the file and row just like CSV ones.
    bad = pd.concat(frames).reset_index(drop=True)
    bad.loc[6, "close"] = np.nan
    bad.to_parquet(tmp_path / "bad.parquet")
    msg = _error(tmp_path / "bad.parquet")
    assert "bad.parquet: row 7: close is missing (NaN/null)" in msg


def test_utc_offsets_keep_wall_time_across_dst(tmp_path):
    rows = [
        "2019-03-08 09:31:00-05:00,10,1",
        "2019-03-08 09:32:00-05:00,10,1",
        "2019-03-11 09:31:00-04:00,10,1",  # after the US DST switch
        "2019-03-11 09:32:00-04:00,10,1",
    ]
    bars = load_minute_bars(_write(tmp_path / "AAA.csv", rows), min_bars_per_day=1)
    assert bars.slot_times == (dt.time(9, 31), dt.time(9, 32))
    assert bars.report.total_filled == 0


def test_unreadable_files_give_one_line_errors(tmp_path):
    (tmp_path / "AAA.csv.gz").write_bytes(b"not gzip")
    assert "AAA.csv.gz: cannot read as csv" in _error(tmp_path / "AAA.csv.gz")
    (tmp_path / "BBB.parquet").write_bytes(b"junk")
    assert "BBB.parquet: cannot read as parquet" in _error(tmp_path / "BBB.parquet")
    _write(tmp_path / "CCC.csv", ["2019-01-02 09:30:00,1,2", "2019-01-02 09:31:00,1,2,3"])
    assert "CCC.csv: cannot read as csv: Error tokenizing data" in _error(tmp_path / "CCC.csv")


def test_bars_from_frame_needs_a_symbol():
    df = pd.DataFrame({"datetime": ["2019-01-02 09:30"], "price": [1.0], "volume": [1.0]})
    with pytest.raises(DataError, match="missing required column 'symbol'"):
        bars_from_frame(df, min_bars_per_day=1)
    bars = bars_from_frame(df, symbol="X", min_bars_per_day=1)
    assert isinstance(bars, MinuteBars) and bars.symbols == ("X",)


# ---------------------------------------------------------------- the shipped samples


def test_sample_files_are_shipped_with_provenance():
    for market, n in (("cn_1min", 4), ("us_1min", 4)):
        files = sorted(sample_path(market).glob("*.csv.gz"))
        assert len(files) == n
    text = (sample_path("cn_1min").parent / "PROVENANCE.md").read_text()
    for needle in (
        "fasiondog/hikyuu",
        "3dce3974",
        "Apache-2.0",
        "masonblier/eqker",
        "61801aac",
        "ISC",
        "lots of 100 shares",
        "not the paper's CSI100/NASDAQ100 study",
    ):
        assert needle in text
    with pytest.raises(ValueError, match="unknown sample market"):
        sample_path("moon_1min")


def test_cn_sample_loads(cn_bars):
    assert cn_bars.symbols == ("SH600000", "SZ000001", "SZ000002", "SZ000004")
    assert cn_bars.n_slots == 240
    assert all(len(cn_bars.dates(s)) == 43 for s in cn_bars.symbols)
    assert len(cn_bars.frame) == 4 * 43 * 240
    assert cn_bars.slot_times[0] == dt.time(9, 30) and cn_bars.slot_times[-1] == dt.time(14, 59)
    assert cn_bars.slot_times[119:121] == (dt.time(11, 29), dt.time(13, 0))
    assert cn_bars.report.total_filled == 0 and cn_bars.report.dropped == ()
    assert cn_bars.frame["high"].isna().all()  # price-only data
    assert cn_bars.dates("SZ000004")[0] == dt.date(2018, 12, 3)
    assert cn_bars.dates("SZ000004")[-1] == dt.date(2019, 2, 1)


def test_us_sample_loads(us_bars):
    assert us_bars.symbols == ("AAPL", "AMZN", "MSFT", "QQQ")
    assert us_bars.n_slots == 390
    assert us_bars.slot_times[0] == dt.time(9, 31) and us_bars.slot_times[-1] == dt.time(16, 0)
    assert all(len(us_bars.dates(s)) == 5 for s in us_bars.symbols)
    assert us_bars.report.filled_slots == {"AAPL": 2, "AMZN": 6, "MSFT": 2, "QQQ": 2}
    assert sum(us_bars.report.rows_read.values()) == 4 * 5 * 390 - 12
    f = us_bars.frame
    # Published newest first; loaded oldest first within each symbol.
    assert f.groupby("symbol")["datetime"].apply(lambda s: s.is_monotonic_increasing).all()
    aapl_open = f[(f["symbol"] == "AAPL")].iloc[0]
    assert aapl_open["datetime"] == pd.Timestamp("2019-02-11 09:31")
    assert aapl_open["price"] == pytest.approx(170.97)
    assert aapl_open["volume"] == 619925
