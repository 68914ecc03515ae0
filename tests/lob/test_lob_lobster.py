"""LOBSTER readers: the shipped samples parse to known values; malformed files fail clearly."""

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

import serl_jax
from serl_jax.lob.book import CANCEL, EXECUTE, LIMIT
from serl_jax.lob.lobster import (
    LobsterFormatError,
    read_lobster,
    read_messages,
    read_orderbook,
)

SAMPLE = Path(serl_jax.__file__).parent / "data" / "sample" / "lobster"
AMZN_MSG = SAMPLE / "AMZN_2012-06-21_34200000_57600000_message_1.csv.gz"
AMZN_OB = SAMPLE / "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv.gz"
AAPL_MSG = SAMPLE / "AAPL_2012-06-21_34200000_57600000_message_10_first999.csv.gz"
AAPL_OB = SAMPLE / "AAPL_2012-06-21_34200000_57600000_orderbook_10_first999.csv.gz"


def test_shipped_samples_and_provenance_exist():
    for path in (AMZN_MSG, AMZN_OB, AAPL_MSG, AAPL_OB):
        assert path.is_file()
    provenance = (SAMPLE / "PROVENANCE.md").read_text()
    assert "LOBSTER" in provenance and "lobsterdata.com" in provenance
    assert (SAMPLE / "LOBSTER_SampleFiles_ReadMe.txt").is_file()


def test_aapl_values_match_the_raw_text():
    msgs, book = read_lobster(AAPL_MSG, AAPL_OB)
    assert len(msgs) == len(book) == 999
    assert book.levels == 10
    # first line: 34200.004241176,1,16113575,18,5853300,1
    assert msgs.time[0] == pytest.approx(34200.004241176)
    assert (msgs.event_type[0], msgs.order_id[0], msgs.size[0]) == (1, 16113575, 18)
    assert (msgs.price[0], msgs.direction[0]) == (5853300, 1)
    # first orderbook row starts 5859400,200,5853300,18,5859800,200,5853000,150
    assert book.ask_price[0, :2].tolist() == [5859400, 5859800]
    assert book.ask_size[0, :2].tolist() == [200, 200]
    assert book.bid_price[0, :2].tolist() == [5853300, 5853000]
    assert book.bid_size[0, :2].tolist() == [18, 150]
    assert msgs.price.dtype == np.int32 and book.ask_price.dtype == np.int32


def test_amzn_event_mix_and_book_message_mapping():
    msgs = read_messages(AMZN_MSG)
    counts = {t: int((msgs.event_type == t).sum()) for t in (1, 2, 3, 4, 5)}
    assert counts == {1: 27845, 2: 16, 3: 18235, 4: 8974, 5: 2445}
    kinds = np.asarray(msgs.to_book_messages().kind)
    assert (kinds == LIMIT).sum() == 27845
    assert (kinds == CANCEL).sum() == 16 + 18235
    assert (kinds == EXECUTE).sum() == 8974
    assert (kinds == 0).sum() == 2445


def test_plain_csv_reads_like_gzip(tmp_path):
    plain = tmp_path / "AAPL_message.csv"
    with gzip.open(AAPL_MSG, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    a, b = read_messages(plain), read_messages(AAPL_MSG)
    for name in ("time", "event_type", "order_id", "size", "price", "direction"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_dummy_levels_become_empty(tmp_path):
    path = tmp_path / "ob.csv"
    path.write_text(
        "101,5,99,7,102,3,-9999999999,0\n9999999999,0,99,7,9999999999,0,-9999999999,0\n"
    )
    book = read_orderbook(path)
    assert book.ask_price.tolist() == [[101, 102], [0, 0]]
    assert book.ask_size.tolist() == [[5, 3], [0, 0]]
    assert book.bid_price.tolist() == [[99, 0], [99, 0]]


GOOD_MSG = "34200.1,1,11,100,2238100,1\n34200.2,3,11,100,2238100,1\n"


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("34200.1,1,11,100,2238100\n", r"bad\.csv, row 1: a message file has 6 columns, found 5"),
        (GOOD_MSG + "34200.3,1,12,100,2238100,1,9\n", r"bad\.csv, row 3: .*columns"),
        (GOOD_MSG + "34200.3,1,12,abc,2238100,1\n", r"row 3: column 4 is not a number"),
        (GOOD_MSG + "34200.3,9,12,10,2238100,1\n", r"row 3: unknown event type 9"),
        (GOOD_MSG + "34200.3,1,12,10,2238100,0\n", r"row 3: direction must be 1 or -1"),
        (GOOD_MSG + "34200.3,1,12,-5,2238100,1\n", r"row 3: negative size"),
        (GOOD_MSG + "34200.3,1,12,1.5,2238100,1\n", r"row 3: size is not an integer"),
        (GOOD_MSG + "34200.0,1,12,10,2238100,1\n", r"row 3: time goes backwards"),
        ("", r"bad\.csv: file is empty"),
        (GOOD_MSG + "34200.3,1,12\n", r"row 3: column 4 is missing"),
        ("34200.1,1,11,100,2238100,1\n\n" + GOOD_MSG, r"row 2: column 1 is missing"),
    ],
)
def test_malformed_message_files(tmp_path, text, pattern):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(LobsterFormatError, match=pattern) as info:
        read_messages(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("101,5,99\n", r"ob\.csv, row 1: an orderbook file has 4 columns per level, found 3"),
        ("101,5,99,7\n101,0,99,7\n", r"row 2: bad ask size"),
        (
            "101,5,99,7,9999999999,0,98,1\n102,5,99,7,9999999999,0,98,2\n"
            "9999999999,0,99,7,103,4,98,1\n",
            r"row 3: a real ask level follows an absent one",
        ),
        ("101,5,99,7,100,5,98,1\n", r"row 1: levels are not in price order"),
        ("101,5,102,7\n", r"row 1: .*crossed"),
    ],
)
def test_malformed_orderbook_files(tmp_path, text, pattern):
    path = tmp_path / "ob.csv"
    path.write_text(text)
    with pytest.raises(LobsterFormatError, match=pattern):
        read_orderbook(path)


def test_length_mismatch_and_missing_file(tmp_path):
    msg = tmp_path / "m.csv"
    msg.write_text(GOOD_MSG)
    ob = tmp_path / "o.csv"
    ob.write_text("2239500,100,2238100,100\n")
    with pytest.raises(LobsterFormatError, match=r"m\.csv has 2 rows but o\.csv has 1"):
        read_lobster(msg, ob)
    with pytest.raises(LobsterFormatError, match=r"nope\.csv: file not found"):
        read_messages(tmp_path / "nope.csv")
