from datetime import timedelta

import pytest

from dream_assets.model import Skill
from dream_assets.names import InvalidName
from dream_assets.store.skills import SkillError

from ..conftest import NOW


def skill(name="mcp/email", content="Send mail with the mcp email tool: compose, confirm, send.", **kw):
    return Skill(name=name, summary=kw.pop("summary", "Email via MCP"), content=content, **kw)


def test_save_get_list_archive_restore(store):
    s = store.skills.save(skill(see_also=("mcp/calendar",)), now=NOW)
    assert s.created_at == NOW and s.updated_at == NOW
    assert store.skills.get("mcp/email").see_also == ("mcp/calendar",)
    assert [x.name for x in store.skills.list()] == ["mcp/email"]
    store.skills.archive("mcp/email", now=NOW + timedelta(days=1))
    assert store.skills.list() == []
    assert store.skills.get("mcp/email").archived_at == NOW + timedelta(days=1)
    assert store.skills.get("mcp/email", include_archived=False) is None
    store.skills.restore("mcp/email", now=NOW + timedelta(days=2))
    assert [x.name for x in store.skills.list()] == ["mcp/email"]


def test_resave_keeps_created_at_and_latest_last_used(store):
    store.skills.save(skill(last_used_at=NOW), now=NOW)
    later = store.skills.save(
        skill(content="Updated steps for email.", last_used_at=NOW - timedelta(days=3)),
        now=NOW + timedelta(days=5),
    )
    assert later.created_at == NOW and later.last_used_at == NOW and later.updated_at == NOW + timedelta(days=5)


@pytest.mark.parametrize("name", ["../escape", "/abs", "bad\x07name"])
def test_invalid_names_are_refused(store, name):
    with pytest.raises(InvalidName):
        store.skills.save(skill(name=name), now=NOW)


def test_empty_content_is_refused(store):
    with pytest.raises(SkillError, match="content"):
        store.skills.save(skill(content="  "), now=NOW)


def test_catalog_fingerprint_ignores_usage_timestamps(store):
    store.skills.save(skill(), now=NOW)
    fp = store.skills.fingerprint()
    store.skills.touch_used("mcp/email", now=NOW + timedelta(days=1))
    assert store.skills.fingerprint() == fp
    store.skills.save(skill(content="New content"), now=NOW)
    assert store.skills.fingerprint() != fp
