"""The models benchmark's CI-sized run: every figure for every window, no prompt over its window, and the schema
keeps a corrupting small model's answers parseable."""

import pytest

from dream_assets_tests.benchmark_run import run_benchmark


@pytest.mark.slow  # four first reviews of 1,000 entries through HTTP (about a minute)
def test_quick_models_run_reports_every_figure_with_no_prompt_over_the_window():
    lines = run_benchmark("models.py", "--quick").lines
    over = {m["window"]: m["value"] for m in lines if m["name"] == "models.prompts_over_window"}
    assert over == {4096: 0, 8192: 0, 32768: 0, 131072: 0}
    calls = {m["window"]: m["value"] for m in lines if m["name"] == "models.first_review_calls"}
    assert calls[4096] > calls[8192] > calls[32768] >= 1  # a smaller window takes more, smaller calls
    assert all(m["value"] <= 1 for m in lines if m["name"] == "models.largest_prompt_share")
    rates = {m["name"]: m["value"] for m in lines if m["name"].startswith("models.parse_failure_rate")}
    assert rates["models.parse_failure_rate.json_schema"] == 0
    assert rates["models.parse_failure_rate.free_form"] > 0
    dense = {m["counted"]: m["value"] for m in lines if m["name"] == "models.dense_tokenizer.prompts_over_window"}
    assert dense["tokenize"] == 0  # counted by the endpoint's own tokenizer, nothing goes over the window
