"""Text the widgets show: dollars and tables (:mod:`gpucloud_nb.widgets._format`)."""

from __future__ import annotations

import pandas as pd

from gpucloud_nb.widgets._format import frame_html, money, per_day, per_hour


def test_tables_border_in_a_theme_colour() -> None:
    html = frame_html(pd.DataFrame({"a": [1]}))
    assert "var(--jp-border-color2)" in html and "#ccc" not in html


def test_money() -> None:
    assert money(2.49) == "$2.49" and money(None) == ""
    assert per_hour(2.49) == "$2.49/h"
    assert per_day(2.49) == "$59.76/day"
    assert per_hour(0.00014) == "$0.00014/h"


def test_frame_html_escapes_text_and_formats_prices() -> None:
    frame = pd.DataFrame({"gpuName": ["<script>x</script>"], "hourlyPrice": [2.49],
                          "available": [True], "vRamGB": [80.0]})
    page = frame_html(frame, price_columns=["hourlyPrice"], table_class="t")
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert "$2.49" in page and ">yes<" in page and ">80<" in page and 'class="t"' in page
