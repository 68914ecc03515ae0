"""``benchmarks/bench_int8_matmul.py``: the int8 product it times is the float product of
the same integers, scaled per row (exact: every partial sum fits in int32 and float32)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")  # the script reads the CPU probes of llm.backends.hf

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_int8_matmul  # noqa: E402


def test_the_int8_product_is_the_scaled_integer_product():
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(-128, 128, (32, 64), dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (64, 48), dtype=torch.int8, generator=gen)
    scales = torch.tensor([[0.5], [2.0]]).repeat(16, 1)
    got = bench_int8_matmul.int8_product()(a, b, scales)
    want = (a.double() @ b.double()) * scales.double()
    assert torch.equal(got.double(), want)


def test_it_prints_a_row_per_shape(monkeypatch, capsys):
    monkeypatch.setattr(bench_int8_matmul, "SHAPES", ((32, 64, 48),))
    assert bench_int8_matmul.main(["--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "int8 instructions" in out
    assert out.strip().splitlines()[-1].startswith("| 32 x 64 x 48 | ")
    with pytest.raises(SystemExit):
        bench_int8_matmul.main(["--repeats", "0"])
