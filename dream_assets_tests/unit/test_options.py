from datetime import timedelta

import pytest

from dream_assets.options import OptionsError, parse_duration
from dream_assets.options_loader import dream_options, load_options


def test_defaults_match_the_spec():
    o = dream_options()
    assert o.InitialDelay == timedelta(minutes=5) and o.Interval == timedelta(hours=4)
    assert o.ConsolidationSimilarityThreshold == 0.88 == o.DedupeSimilarityThreshold
    assert o.ConsolidationMaxClusterSize == 3
    assert (o.PruningProtectionImportance, o.PruningProtectionReinforcementCount) == (0.80, 5)
    assert o.MemoryArchiveRetention == timedelta(days=90)
    assert (o.ImportanceDecayGraceDays, o.ImportanceDecayHalfLifeDays, o.ImportanceDecayFloor) == (
        30,
        45,
        0.10,
    )
    assert (o.FeedbackWindow, o.FeedbackMaxSignals) == (timedelta(days=7), 50)
    assert o.SkillUsageWindow == timedelta(days=30)
    assert (o.SparseSkillMaxChars, o.SparseSkillMinAge) == (200, timedelta(days=7))
    assert o.WispAnalysisWindow == timedelta(days=14) == o.TierRoutingReviewWindow
    assert o.BusyPollInterval == timedelta(seconds=5)
    assert (o.MergeRepairEnabled, o.MergeRepairMaxPerCycle) == (True, 10)
    assert o.ConsolidationMinInterval == timedelta(hours=6)
    assert (o.DreamPassChangeGateEnabled, o.DreamPassMaxSkipInterval) == (True, timedelta(days=7))
    assert (o.LogRetentionEnabled, o.LogRetentionMaxFileAge) == (True, timedelta(days=30))
    assert (o.LogRetentionMaxFilesPerDirectory, o.LogRetentionMaxLinesPerFile) == (1000, 50_000)
    assert all(getattr(o, n) for n in ("PreferenceInferenceEnabled", "SkillGapEnabled", "WispFailureAnalysisEnabled"))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("PT6H", timedelta(hours=6)),
        ("P7D", timedelta(days=7)),
        ("P1DT2H30M", timedelta(days=1, hours=2, minutes=30)),
        ("06:00:00", timedelta(hours=6)),
        ("7.00:00:00", timedelta(days=7)),
        ("00:00:05", timedelta(seconds=5)),
        ("-01:00:00", timedelta(hours=-1)),
        ("90", timedelta(seconds=90)),
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("1h", timedelta(hours=1)),
        ("4H", timedelta(hours=4)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d 12h", timedelta(days=1, hours=12)),
        ("1.5h", timedelta(minutes=90)),
        ("-30m", timedelta(minutes=-30)),
    ],
)
def test_durations_accept_iso_timespan_and_unit_forms(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["m", "30x", "1m1h", "h30", "1e30", "nan", "inf", "9" * 20 + "d", ""])
def test_a_duration_that_is_not_one_is_refused_as_a_value_error(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_an_interval_typed_as_people_type_it_is_taken_and_a_huge_one_is_refused_by_name():
    assert load_options(env={"DREAM__Interval": "1h"}).Interval == timedelta(hours=1)
    assert load_options(env={"DREAM__Interval": "30m"}).Interval == timedelta(minutes=30)
    with pytest.raises(OptionsError, match="Interval.*expected a duration"):
        load_options(env={"DREAM__Interval": "1e30"})


def test_environment_binding_with_and_without_sections():
    o = load_options(
        env={
            "DREAM__ConsolidationMinInterval": "PT3H",
            "DREAM__Memory__DedupeSimilarityThreshold": "0.9",
            "DREAM__Llm__BaseUrl": "http://127.0.0.1:8000/v1",
            "DREAM__Dream__LogRetentionEnabled": "false",
            "UNRELATED": "x",
        }
    )
    assert o.ConsolidationMinInterval == timedelta(hours=3)
    assert o.DedupeSimilarityThreshold == 0.9
    assert o.LlmBaseUrl == "http://127.0.0.1:8000/v1"
    assert o.LogRetentionEnabled is False


def test_toml_file_then_environment_wins(tmp_path):
    f = tmp_path / "dream.toml"
    f.write_text('Interval = "PT2H"\nSkillGapEnabled = false\n[memory]\nDedupeSimilarityThreshold = 0.95\n')
    o = load_options(env={"DREAM__Interval": "PT1H"}, toml_path=f)
    assert o.Interval == timedelta(hours=1)
    assert o.SkillGapEnabled is False
    assert o.DedupeSimilarityThreshold == 0.95


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("DREAM__Interval", "soon", "expected a duration"),
        ("DREAM__MergeRepairMaxPerCycle", "ten", "expected a whole number"),
        ("DREAM__ConsolidationSimilarityThreshold", "1.5", "at most 1.0"),
        ("DREAM__LogRetentionEnabled", "maybe", "true or false"),
        ("DREAM__LlmBackend", "magic", "one of auto, offline, openai"),
        ("DREAM__ConsolidationMaxClusterSize", "1", "at least 2"),
    ],
)
def test_invalid_values_name_the_option_the_value_and_what_is_accepted(key, value, fragment):
    with pytest.raises(OptionsError) as err:
        load_options(env={key: value})
    msg = str(err.value)
    assert key.split("__")[-1] in msg and repr(value) in msg and fragment in msg


def test_unknown_option_is_refused_with_the_closest_name_and_where_every_option_is_listed():
    with pytest.raises(OptionsError, match="unknown dream option 'Intervall'") as err:
        load_options(env={"DREAM__Intervall": "PT1H"})
    assert "did you mean Interval?" in str(err.value)


def test_a_mistyped_option_in_dream_toml_names_the_file_the_closest_option_and_the_list_in_one_short_line(tmp_path):
    toml = tmp_path / "dream.toml"
    toml.write_text('ConsolidationMinIntervall = "PT2H"\n')
    with pytest.raises(OptionsError) as err:
        load_options(env={}, profile_toml=toml)
    message = str(err.value)
    assert "\n" not in message and len(message) < 300, message
    assert f"unknown dream option 'ConsolidationMinIntervall' (from {toml})" in message
    assert "did you mean ConsolidationMinInterval?" in message
    assert "dream_assets/options.py" in message
    # nothing near: no guess, still the list's place
    toml.write_text("Zzzz = 1\n")
    with pytest.raises(OptionsError) as err:
        load_options(env={}, profile_toml=toml)
    assert "did you mean" not in str(err.value) and "dream_assets/options.py" in str(err.value)


def test_malformed_toml_names_the_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("Interval = \n")
    with pytest.raises(OptionsError, match="bad.toml"):
        load_options(env={}, toml_path=f)


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b'Interval = "PT2H"\n# caf\xe9 in Latin-1\n', "is not UTF-8 text: byte 0xe9 on line 2"),
        (b"\xff\xfeI\x00n\x00t\x00", "is not UTF-8 text: byte 0xff on line 1"),  # UTF-16
    ],
)
def test_an_options_file_that_is_not_utf8_is_a_configuration_error_naming_it(tmp_path, content, fragment):
    f = tmp_path / "dream.toml"
    f.write_bytes(content)
    with pytest.raises(OptionsError, match=fragment) as caught:
        load_options(env={}, profile_toml=f)
    assert str(f) in str(caught.value) and "save the file as UTF-8" in str(caught.value)


def test_an_unreadable_options_file_is_a_configuration_error_naming_it(tmp_path):
    folder = tmp_path / "dream.toml"
    folder.mkdir()
    with pytest.raises(OptionsError, match="is a directory") as caught:
        load_options(env={}, profile_toml=folder)
    assert str(folder) in str(caught.value)


def test_a_utf8_options_file_with_a_byte_order_mark_is_read(tmp_path):
    f = tmp_path / "dream.toml"
    f.write_bytes('\ufeffInterval = "PT2H"\n'.encode())
    assert load_options(env={}, profile_toml=f).Interval == timedelta(hours=2)


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("DREAM__ConsolidationMinInterval", "-PT1H", "a duration of zero or more"),
        ("DREAM__ConsolidationMinInterval", "-01:00:00", "a duration of zero or more"),
        ("DREAM__Dream__ConsolidationMinInterval", "-1.02:00:00", "a duration of zero or more"),
        ("DREAM__FeedbackWindow", "-P7D", "a duration of zero or more"),
        ("DREAM__Interval", "PT0S", "a positive duration"),
        ("DREAM__Interval", "-PT4H", "a positive duration"),
        ("DREAM__LlmTimeout", "0", "a positive duration"),
    ],
)
def test_a_negative_duration_is_refused_where_it_means_nothing(key, value, fragment):
    with pytest.raises(OptionsError) as err:
        load_options(env={key: value})
    msg = str(err.value)
    name = key.split("__")[-1]
    assert f"option {name}" in msg and repr(value) in msg and fragment in msg and "has no meaning" in msg


def test_a_negative_duration_in_a_toml_file_is_refused_naming_the_file(tmp_path):
    f = tmp_path / "dream.toml"
    f.write_text('ConsolidationMinInterval = "-PT1H"\n')
    with pytest.raises(OptionsError, match="ConsolidationMinInterval") as err:
        load_options(env={}, profile_toml=f)
    assert str(f) in str(err.value) and "zero disables" in str(err.value)


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("DREAM__ConsolidationMinInterval", "0", timedelta(0)),  # zero disables the floor
        ("DREAM__MemoryArchiveRetention", "-P1D", timedelta(days=-1)),  # non-positive keeps archives forever
        ("DREAM__LogRetentionMaxFileAge", "0", timedelta(0)),  # non-positive disables age pruning
        ("DREAM__DreamPassMaxSkipInterval", "-00:00:01", timedelta(seconds=-1)),  # non-positive: never forced
        ("DREAM__BusyMaxWait", "0", timedelta(0)),
    ],
)
def test_durations_whose_non_positive_value_has_a_meaning_are_kept(key, value, expected):
    assert getattr(load_options(env={key: value}), key.split("__")[-1]) == expected


def test_a_non_positive_half_life_still_disables_decay():
    assert load_options(env={"DREAM__ImportanceDecayHalfLifeDays": "-1"}).ImportanceDecayHalfLifeDays == -1


@pytest.mark.parametrize(
    "value",
    [
        "localhost:11434",
        "127.0.0.1:11434/v1",
        "ftp://host/v1",
        "http://",
        "not a url",
        "http://host:99999/v1",
        "http://ho st/v1",
    ],
)
def test_a_base_url_that_is_not_an_http_url_is_refused(value):
    with pytest.raises(OptionsError) as err:
        load_options(env={"DREAM__Llm__BaseUrl": value})
    msg = str(err.value)
    assert "option LlmBaseUrl" in msg and repr(value) in msg and "http:// or https:// URL" in msg


@pytest.mark.parametrize(
    "value,expected",
    [
        ("https://api.example.com/v1", "https://api.example.com/v1"),
        (" http://[::1]:8000/v1 ", "http://[::1]:8000/v1"),
        ("", ""),
    ],
)
def test_http_urls_and_an_empty_base_url_are_accepted(value, expected):
    assert load_options(env={"DREAM__LlmBaseUrl": value}).LlmBaseUrl == expected
