"""Progress on long model calls: each call says which of how many it is, its tokens, the time so far and what the
measured speed allows, to ``dream run`` (a line rewritten on a terminal, plain lines otherwise), to the Dagster run
log and to ``dream status`` while a pass waits on the model. Real stores, real HTTP against the test server."""

from __future__ import annotations

import io
import json
import re
import threading
import time

import dagster as dg
import pytest

from dream_assets.cli import main
from dream_assets.llm.client import build_model_client
from dream_assets.llm.endpoint_profile import EndpointProfile, endpoint_key
from dream_assets.llm.progress import CallProgress, ProgressFile, ProgressPrinter
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import model_call
from dream_assets.profile import AgentProfile
from dream_assets_tests.openai_server import NOTHING_TO_CHANGE, OpenAITestServer, Reply, reply

NOW = "2026-11-30T12:00:00Z"
ANSWER = json.dumps({"findings": [], "failurePatterns": [], "skillAnnotations": [], "promotionNotes": {}})


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _options(server: OpenAITestServer, **kw) -> DreamOptions:
    return dream_options(LlmBaseUrl=server.base_url, LlmModel="qwen", LlmMaxRetries=0, **kw)


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_a_call_reports_its_progress_to_listeners_and_the_profile(tmp_path):
    profile = AgentProfile(tmp_path / "a").ensure()
    with OpenAITestServer(default=reply(ANSWER, completion_tokens=9)) as server:
        EndpointProfile(profile.endpoint_profile_path).update(
            endpoint_key(server.base_url, "qwen"), prompt_tps=100.0, gen_tps=10.0
        )
        client = build_model_client(_options(server, LlmMaxTokens=100), profile)
        events: list[CallProgress] = []
        client.progress_listeners.append(events.append)
        request = client.request(model_call("tier_routing_review"), "stats")
        request.part = (2, 3)
        assert client.call(request).ok
    assert [e.phase for e in events] == ["start", "done"]
    start, done = events
    assert (start.index, start.total, start.pass_name) == (2, 3, "tier_routing_review")
    assert start.prompt_tokens > 0 and start.estimate_s == start.prompt_tokens / 100.0 + 100 / 10.0
    assert done.completion_tokens == 9 and "model call 2 of 3" in done.line() and "answered in" in done.line()
    assert "up to" in start.line() and "measured speed" in start.line()
    current, recent = ProgressFile(profile.model_progress_path).read()
    assert current is None and [r.seq for r in recent] == [done.seq] and done.seq == 1


def test_a_pass_waiting_on_the_model_shows_in_dream_status_and_on_a_terminal(tmp_path, capsys):
    profile = AgentProfile(tmp_path / "agents" / "a1").ensure()
    terminal = _Terminal()
    with OpenAITestServer(default=reply(ANSWER, delay_s=2.0)) as server:
        client = build_model_client(_options(server), profile)
        results = []
        with ProgressPrinter(profile.model_progress_path, terminal, poll_s=0.05):
            worker = threading.Thread(
                target=lambda: results.append(client.call(client.request(model_call("tier_routing_review"), "stats")))
            )
            worker.start()
            _wait_for(lambda: ProgressFile(profile.model_progress_path).read()[0] is not None)
            assert main(["status", "--profile", str(profile.root)]) == 0
            worker.join()
    assert results[0].ok
    out = capsys.readouterr().out
    assert re.search(r"running now: tier_routing_review: model call 1, \d+ prompt tokens, waiting on the model", out)
    assert "speed not measured: dream check-model" in out
    shown = terminal.getvalue()
    assert "\r  tier_routing_review: model call 1, " in shown and "waiting on the model" in shown  # rewritten in place
    assert re.search(r"tier_routing_review: model call 1, \d+ prompt tokens \+ 7 answer tokens, answered in", shown)
    capsys.readouterr()
    assert main(["status", "--profile", str(profile.root)]) == 0
    assert "running now" not in capsys.readouterr().out  # nothing waits any more


def test_a_hostile_or_stale_progress_file_shows_nothing(tmp_path):
    path = tmp_path / "model-progress.json"
    for text in ("{not json", "[]", json.dumps({"current": {"pass_name": "x"}}), json.dumps({"current": 5})):
        path.write_text(text)
        assert ProgressFile(path).read() == (None, [])
    stale = CallProgress("memory_consolidation", 1, 2, 10, 10, 0.0, 0.0, None, 0.0, "start", pid=2**22 + 12345)
    path.write_text(json.dumps({"seq": 1, "current": stale.to_json(), "recent": []}))
    assert ProgressFile(path).read()[0] is None  # the process that made the call is gone


@pytest.mark.slow  # a whole cycle of the demo through Dagster and HTTP
def test_dream_run_shows_every_model_call_and_the_dagster_log_says_the_same(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    profile = tmp_path / "agents" / "demo"
    assert main(["init", "--profile", str(profile), "--demo", "--now", NOW]) == 0
    capsys.readouterr()
    with OpenAITestServer(default=Reply(decide=lambda body: reply(NOTHING_TO_CHANGE))) as server:
        monkeypatch.setenv("DREAM__LlmBaseUrl", server.base_url)
        monkeypatch.setenv("DREAM__LlmModel", "test-model")
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        assert main(["run", "--profile", str(profile), "--now", NOW]) == 0
        calls = len(server.requests)
    out = capsys.readouterr().out
    assert calls >= 4
    assert "the endpoint's speed is not measured: each model call waits at most LlmTimeout (120s)" in out
    answered = [line for line in out.splitlines() if re.search(r"model call \d+.*, answered in", line)]
    assert len(answered) == calls, out  # not a terminal: a plain line per call
    run_id = re.search(r"run (\S+) succeeded", out).group(1)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        logged = [e.user_message for e in instance.all_logs(run_id) if "answered in" in (e.user_message or "")]
    assert len(logged) == calls


def test_a_failing_progress_listener_or_an_unwritable_progress_file_never_fails_the_call(tmp_path):
    profile = AgentProfile(tmp_path / "a").ensure()
    profile.model_progress_path.mkdir()  # a folder where the file should be: every write fails
    with OpenAITestServer(default=reply(ANSWER)) as server:
        client = build_model_client(_options(server), profile)

        def broken(progress):
            raise RuntimeError("listener bug")

        client.progress_listeners.append(broken)
        assert client.call(client.request(model_call("tier_routing_review"), "stats")).ok
