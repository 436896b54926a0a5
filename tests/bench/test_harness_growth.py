"""The cost-growth rows of the bench report (bench/harness.py): verdicts,
the table, and how a case's rows are split between the two tables."""

import pytest

from bench.harness import MISSED, GrowthRow, Row, growth_table, split_rows, table


def test_ratio_within_meets_and_misses() -> None:
    kept = GrowthRow.ratio_within("bulletins", "page", ["10 live", "10,000 live"], [1e-3, 1.4e-3], "s", 1.5)
    grown = GrowthRow.ratio_within("bulletins", "page", ["10 live", "10,000 live"], [1e-3, 1.6e-3], "s", 1.5)
    assert kept.met
    assert kept.verdict == "met"
    assert not grown.met
    assert grown.verdict == MISSED == "MISSED"
    assert grown.growth == pytest.approx(1.6)
    # A middle size above the factor misses too, even when the last is back under it.
    bump = GrowthRow.ratio_within("c", "m", ["a", "b", "c"], [1.0, 2.0, 1.0], "s", 1.5)
    assert not bump.met


def test_each_at_most() -> None:
    assert GrowthRow.each_at_most("m", "bytes", ["5 items", "1,000,000"], [900.0, 4000.0], "B", 4096).met
    row = GrowthRow.each_at_most("m", "bytes", ["5 items", "1,000,000"], [900.0, 165_000.0], "B", 4096)
    assert not row.met
    assert row.target == "≤4.0 KiB at every size"


def test_one_value_per_size() -> None:
    with pytest.raises(ValueError, match="one value per size"):
        GrowthRow("c", "m", ["a", "b"], [1.0], "s", "t", True)


def test_table_shows_every_size_and_missed() -> None:
    rows = [
        GrowthRow.ratio_within("user ids", "bytes", ["id 1", "id 10^9"], [2048.0, 3e6], "B", 1.5, note="same data"),
        GrowthRow.ratio_within("items", "page", ["10", "100,000"], [2e-4, 2.5e-4], "s", 1.5),
    ]
    text = growth_table(rows)
    assert "| user ids | bytes | id 1: 2.0 KiB · id 10^9: 2.9 MiB | 1,464.84x | ≤1.5x the id 1 cost: MISSED |" in text
    assert "| items | page | 10: 200 µs · 100,000: 250 µs | 1.25x | ≤1.5x the 10 cost: met |" in text
    assert "- user ids / bytes: same data" in text


def test_split_rows_and_row_verdicts() -> None:
    plain = Row("HTTP", "counts requests/s", 900.0, "/s", "ping", 1000.0, better="higher", target=0.95)
    growth = GrowthRow.ratio_within("c", "m", ["a", "b"], [1.0, 1.0], "s", 1.5)
    assert split_rows([plain, growth]) == ([plain], [growth])
    with pytest.raises(TypeError):
        split_rows([plain, "not a row"])
    assert plain.verdict == MISSED
    assert "≥0.95x: MISSED" in table([plain])
    throttled = Row("HTTP", "inbox", 1000.0, "/s", "ping", 1000.0, better="higher", target=0.9, throttled=3)
    assert throttled.target_text == "≥0.9x, no 429s (is 3): MISSED"
