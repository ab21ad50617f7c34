"""An agent on `dream serve` (its warm handle kept between calls) finds a note a person just wrote in its linked
folder, and its own save reaches the folder at the next write-back: one memory across the folder and the agent."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from dream_assets.folders import link_folder, read_folder, write_back
from dream_assets.profile import AgentProfile
from dream_assets_tests.mcp_harness import ok, stdio_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "folders"


@pytest.mark.slow  # starts `dream serve` as a subprocess
def test_an_agent_on_dream_serve_and_a_person_share_one_memory_through_the_linked_folder(tmp_path: Path) -> None:
    profile = AgentProfile(tmp_path / "agents" / "a").ensure()
    folder = tmp_path / "memory"
    shutil.copytree(FIXTURES / "claude-code", folder)
    link_folder(profile, folder, "claude-code")
    assert read_folder(profile).status == "completed"
    topic = folder / "user_role.md"

    async def main() -> None:
        async with stdio_session(profile.root) as session:
            hits = ok(await session.call_tool("memory_search", {"query": "Helix editor quick edits"}))["hits"]
            assert not any("Helix" in h["content"] for h in hits)
            # a person writes a note while the server holds the agent warm
            topic.write_text(topic.read_text(encoding="utf-8") + "\n- Prefers Helix over Vim for quick edits.\n")
            hits = ok(await session.call_tool("memory_search", {"query": "Helix editor quick edits"}))["hits"]
            assert any("Helix" in h["content"] for h in hits)
            saved = ok(
                await session.call_tool(
                    "memory_save", {"content": "Deploys go out on Tuesdays after standup.", "category": "process"}
                )
            )
            assert saved["outcome"] == "created"

    anyio.run(main)
    assert write_back(profile).status == "completed"
    assert "- Deploys go out on Tuesdays after standup.\n" in (folder / "process.md").read_text(encoding="utf-8")
