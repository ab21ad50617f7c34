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


def test_a_trailing_newline_passes_no_validation(tmp_path):
    """Every validation pattern matches the whole text: ``$`` alone also matches before a final newline, so
    ``"b\\n"`` passed as the agent id ``b`` (and a session id, a temp file name, a log kind)."""
    from dream_assets.file_safety import is_temp_file
    from dream_assets.mcp_server import HttpGate
    from dream_assets.profile import AgentProfile, ProfileError, discover_profiles, validate_agent_id
    from dream_assets.store.warehouse import WarehouseError, _check_kind

    for agent in ("b\n", "b\r\n", "\nb"):
        with pytest.raises(ProfileError):
            validate_agent_id(agent)
    with pytest.raises(InvalidName):
        validate_session_id("s1\n")
    assert is_temp_file(tmp_path / ".notes.md.0123456789ab.tmp")
    assert not is_temp_file(tmp_path / ".notes.md.0123456789ab.tmp\n")
    with pytest.raises(WarehouseError):
        _check_kind("tool-call\n")
    AgentProfile(tmp_path / "b").ensure()
    AgentProfile(tmp_path / "b\n").ensure()
    assert [p.agent_id for p in discover_profiles(tmp_path)] == ["b"]
    gate = HttpGate(profile_root=tmp_path, host="127.0.0.1", port=1)
    headers = {"host": "127.0.0.1:1"}
    assert isinstance(gate.check("/agents/b/mcp", headers), AgentProfile)
    for path in ("/agents/b/mcp\n", "/agents/b\n/mcp"):
        verdict = gate.check(path, headers)
        assert not isinstance(verdict, AgentProfile), path
