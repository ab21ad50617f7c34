import pytest

from dream_assets.names import InvalidName, validate_session_id, validate_skill_name


@pytest.mark.parametrize("name", ["mcp/email", "research/papers/arxiv", "summarize-emails", "a", "mcp/guide_v2"])
def test_valid_skill_names(name):
    assert validate_skill_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "  ",
        "../etc/passwd",
        "mcp/../x",
        "/abs/path",
        "mcp//email",
        "C:\\x",
        "a\\b",
        "bad\x00name",
        "tab\tname",
        "mcp/./x",
        " padded",
        "x" * 201,
    ],
)
def test_invalid_skill_names_are_refused(name):
    with pytest.raises(InvalidName):
        validate_skill_name(name)


@pytest.mark.parametrize("sid", ["blazor-session", "cli-session", "2026-11-30T10_00", "abc.def", "user@host"])
def test_valid_session_ids(sid):
    assert validate_session_id(sid) == sid


@pytest.mark.parametrize("sid", ["", "../x", "a/b", ".hidden", "a..b", "x\ny", "-dash"])
def test_invalid_session_ids_are_refused(sid):
    with pytest.raises(InvalidName):
        validate_session_id(sid)
