"""The Dagster UI in a real browser: dagster-webserver on 127.0.0.1 serves the definitions over an instance that has
run one dream cycle for the demo agent (one pass failing on a model error), and headless Chromium opens what an
operator looks at: each pass group's asset graph with every lineage edge of the pass registry, a pass's
materialization with its summary and counts, the plots of its counts, the ``pass_completed`` checks (passed and
failed, naming the agent) and the automation page with every schedule and sensor.

The webserver's GraphQL API gives the exact lineage (compared with the registry); the browser checks prove the pages
display what the instance recorded. Each page is saved as a PNG under ``test-output/ui/`` (the path is printed).
Chromium is driven over the DevTools protocol so the test waits for the graph to render instead of
guessing a time budget. Without a Chromium binary the browser tests skip and say why (`.ci/run` installs Debian's
`chromium` package when it can).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from websockets.sync.client import ClientConnection, connect

from dream_assets.defs.passes import pass_deps
from dream_assets.gates import GATED_PASSES
from dream_assets.passes.registry import PASSES

pytestmark = pytest.mark.slow  # a webserver, a browser and a whole dream cycle

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
SERVER_WAIT_S = 90  # the webserver imports dagster and loads the code location: slow on a busy 2-core machine
RENDER_WAIT_S = 60  # upper bound only: the test goes on as soon as the graph shows what it must
WINDOW = (2900, 2300)  # large enough that a group graph fits at scale 1 (the UI only draws what is on screen)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PASS_GROUPS = sorted({spec.group for spec in PASSES})
SHOTS = ROOT / "test-output" / "ui"  # screenshots of every page the tests open (gitignored)
PAGE = (1600, 1400)  # the viewport for the asset, check and automation pages
AGENT = "demo"
FAILING_PASS = "skill_gap_detection"  # its model call fails in the cycle the instance ran
SHOWN_PASS = "memory_consolidation"  # the pass whose materialization and plots are opened
MODEL_ERROR = "HTTP 503 from the endpoint: overloaded"

# Never send loopback traffic through a proxy configured in the environment.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --- the webserver -----------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _stop_group(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """Stop a process started with start_new_session=True together with everything it spawned."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            # the leader is gone; make sure no child of the group survives it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _get_json(url: str, timeout: float = 10) -> Any:
    with _HTTP.open(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _graphql(base: str, query: str) -> dict:
    req = urllib.request.Request(
        f"{base}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with _HTTP.open(req, timeout=30) as resp:
        body = json.loads(resp.read())
    assert not body.get("errors"), f"GraphQL errors from {base}/graphql: {body['errors']}"
    return body["data"]


WORKSPACE_QUERY = """{ workspaceOrError { __typename ... on PythonError { message }
  ... on Workspace { locationEntries { name loadStatus locationOrLoadError { __typename
    ... on PythonError { message } ... on RepositoryLocation { name repositories { name } } } } } } }"""

ASSET_NODES_QUERY = "{ assetNodes { assetKey { path } groupName dependencyKeys { path } } }"


@dataclass
class Webserver:
    base: str
    location: str
    repository: str


@dataclass
class CycleInstance:
    """A Dagster instance (DAGSTER_HOME) that has run one dream cycle for the demo agent, and what it recorded."""

    home: Path
    profile_root: Path
    run_id: str
    metadata: dict[str, dict[str, Any]]  # asset -> metadata values of its materialization
    checks: dict[str, tuple[bool, str]]  # asset -> (passed, description) of its pass_completed check


@pytest.fixture(scope="module")
def dream_instance(tmp_path_factory) -> CycleInstance:
    """One dream cycle for the demo agent on a real DAGSTER_HOME instance; the model call of FAILING_PASS fails (a
    scripted HTTP 503), every other model pass gets the offline backend's answers."""
    import dagster as dg

    from dream_assets.definitions import build_definitions
    from dream_assets.demo import build_demo_profile
    from dream_assets.llm.base import ModelCallError
    from dream_assets.llm.offline import OfflineBackend
    from dream_assets.llm.scripted import ScriptedBackend
    from dream_assets.orchestration.deployment import DreamDeployment
    from dream_assets.orchestration.partitions import AGENTS
    from dream_assets.orchestration.resources import ModelResource
    from dream_assets.profile import AgentProfile

    tmp = tmp_path_factory.mktemp("dream-instance")
    home, root = tmp / "dagster_home", tmp / "agents"
    home.mkdir()
    # nux off: the first-visit "join the community" dialog would cover the pages
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\nnux:\n  enabled: false\n")
    build_demo_profile(AgentProfile(root / AGENT), datetime.now(UTC))
    offline = OfflineBackend()
    backend = ScriptedBackend(
        lambda req: ModelCallError(MODEL_ERROR) if req.pass_name == FAILING_PASS else offline.complete(req)
    )
    defs = build_definitions(DreamDeployment(profile_root=str(root)), model=ModelResource.with_backend(backend))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(AGENTS, [AGENT])
        result = defs.resolve_job_def("dream_cycle").execute_in_process(
            instance=instance,
            partition_key=AGENT,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
        )
    metadata = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        metadata[mat.asset_key.to_user_string()] = {k: v.value for k, v in mat.metadata.items()}
    checks = {
        e.event_specific_data.asset_key.to_user_string(): (
            e.event_specific_data.passed,
            e.event_specific_data.description or "",
        )
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert not result.success, "the cycle with a failing model call should have failed its run"
    assert metadata[FAILING_PASS]["status"] == "failed" and metadata[SHOWN_PASS]["status"] == "completed", (
        f"unexpected pass statuses: { ({k: m.get('status') for k, m in metadata.items()}) }"
    )
    return CycleInstance(home, root, result.run_id, metadata, checks)


@pytest.fixture(scope="module")
def shots() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"screenshots of the Dagster UI go to {SHOTS}")
    return SHOTS


def _wait_until_loaded(proc: subprocess.Popen, base: str, log: Path) -> tuple[str, str] | None:
    """(location, repository) once the code location is loaded; None when the process died first."""
    deadline = time.monotonic() + SERVER_WAIT_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        try:
            _get_json(f"{base}/server_info", timeout=5)
            ws = _graphql(base, WORKSPACE_QUERY)["workspaceOrError"]
            assert ws["__typename"] == "Workspace", f"workspace failed to load: {ws}"
            entries = ws["locationEntries"]
            last = json.dumps(entries)
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                loc = entries[0]["locationOrLoadError"]
                assert loc["__typename"] == "RepositoryLocation", f"code location failed to load: {loc}"
                return loc["name"], loc["repositories"][0]["name"]
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = repr(exc)
        time.sleep(0.5)
    pytest.fail(
        f"dagster-webserver did not serve a loaded workspace within {SERVER_WAIT_S}s ({last}); log {log}:\n{_tail(log)}"
    )


@pytest.fixture(scope="module")
def webserver(tmp_path_factory, dream_instance) -> Iterator[Webserver]:
    tmp = tmp_path_factory.mktemp("dagster-ui")
    # the definitions' own defaults: no DREAM__* option of the calling shell (DREAM__Enabled=false, say) leaks in
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DREAM__")},
        "DAGSTER_HOME": str(dream_instance.home),
        "DREAM__ProfileRoot": str(dream_instance.profile_root),
    }
    exe = Path(sys.executable).parent / "dagster-webserver"
    cmd = [str(exe if exe.exists() else shutil.which("dagster-webserver") or exe), "-h", HOST]
    for attempt in itertools.count(1):
        port = _free_port()
        log = tmp / f"webserver-{attempt}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*cmd, "-p", str(port), "-w", str(ROOT / "workspace.yaml")],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        base = f"http://{HOST}:{port}"
        try:
            loaded = _wait_until_loaded(proc, base, log)
        except BaseException:
            _stop_group(proc)
            raise
        if loaded is not None:
            break
        _stop_group(proc)
        # the free port can be taken between probing and binding; anything else is a real failure
        if attempt >= 3 or "address already in use" not in log.read_text(errors="replace").lower():
            pytest.fail(f"dagster-webserver exited with code {proc.returncode}; log {log}:\n{_tail(log)}")
    try:
        yield Webserver(base, *loaded)
    finally:
        _stop_group(proc)


def _served_lineage(server: Webserver) -> dict[str, tuple[str | None, set[str]]]:
    """asset name -> (group, names of the assets it depends on), as the webserver serves them."""
    nodes = _graphql(server.base, ASSET_NODES_QUERY)["assetNodes"]
    return {
        "/".join(n["assetKey"]["path"]): (n["groupName"], {"/".join(d["path"]) for d in n["dependencyKeys"]})
        for n in nodes
    }


# --- the browser -------------------------------------------------------------------------------------------------


def _find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


class Chromium:
    """Headless Chromium driven over the DevTools protocol (one page)."""

    def __init__(self, exe: str, workdir: Path) -> None:
        self.log = workdir / "chromium.log"
        profile = workdir / "chromium-profile"
        args = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--no-first-run",
            "--no-default-browser-check",
            "--no-proxy-server",
            "--hide-scrollbars",
            "--mute-audio",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            "about:blank",
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._ids = itertools.count(1)
        self.ws: ClientConnection | None = None
        try:
            port = self._devtools_port(profile / "DevToolsActivePort")
            page = next(t for t in _get_json(f"http://{HOST}:{port}/json/list") if t["type"] == "page")
            self.page_url: str = page["webSocketDebuggerUrl"]
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, port_file: Path) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"chromium exited with code {self.proc.returncode}; log {self.log}:\n{_tail(self.log)}")
            lines = port_file.read_text().splitlines() if port_file.exists() else []
            if len(lines) >= 2:
                return int(lines[0])
            time.sleep(0.1)
        pytest.fail(f"chromium opened no DevTools port within 30s; log {self.log}:\n{_tail(self.log)}")

    def call(self, method: str, timeout: float = 30, **params: Any) -> dict:
        assert self.ws is not None
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"chromium did not answer {method} within {timeout}s")
            try:
                msg = json.loads(self.ws.recv(timeout=remaining))
            except TimeoutError:
                continue
            if msg.get("id") == msg_id:  # anything else is an event we did not subscribe to on purpose
                if "error" in msg:
                    raise RuntimeError(f"{method} failed: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        # Mark the page being left: until the new document replaces it, reads must not mistake it for the new one.
        self.evaluate("window.__leaving = true")
        self.call("Page.navigate", url=url)

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", timeout=60, format="png")["data"]))
        return path

    def close(self) -> None:
        _stop_group(self.proc, grace_s=10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Chromium]:
    exe = _find_chromium()
    if exe is None:
        reason = (
            f"chromium not installed: none of {', '.join(CHROMIUM_NAMES)} is on PATH; install Debian's "
            "`chromium` package (`.ci/run` does when run as root with CI=true) to run the browser test"
        )
        warnings.warn(reason, stacklevel=1)  # shown in the summary: a bare skip would hide the reason
        pytest.skip(reason)
    chromium = Chromium(exe, tmp_path_factory.mktemp("chromium"))
    try:
        with connect(chromium.page_url, proxy=None, max_size=None, ping_interval=None, open_timeout=30) as ws:
            chromium.ws = ws
            yield chromium
    finally:
        chromium.close()


# What the asset graph has drawn: its size, where its viewport is, every node box with the asset name it shows, and
# the two end points of every edge path (edges are SVG paths ending in an arrow marker).
READ_GRAPH_JS = r"""(() => {
  if (window.__leaving) return null;
  const svg = [...document.querySelectorAll('svg')].find(s => s.querySelector(':scope > foreignObject'));
  if (!svg) return null;
  const box = svg.parentElement.parentElement.getBoundingClientRect();
  const num = a => parseFloat(svg.getAttribute(a));
  const nodes = [...svg.querySelectorAll(':scope > foreignObject')].map(f => ({
    name: [...f.children].map(c => c.innerText).join('\n').trim().split('\n')[0].trim(),
    x: parseFloat(f.getAttribute('x')), y: parseFloat(f.getAttribute('y')),
    w: parseFloat(f.getAttribute('width')), h: parseFloat(f.getAttribute('height'))}));
  const edges = [...svg.querySelectorAll('path[marker-end]')].map(p => {
    const n = (p.getAttribute('d') || '').match(/-?\d+(\.\d+)?(e-?\d+)?/g) || [];
    return n.length >= 4 ? n.slice(0, 2).concat(n.slice(-2)).map(Number) : null; }).filter(Boolean);
  return {width: num('width'), height: num('height'), boxWidth: box.width, boxHeight: box.height,
          windowWidth: window.innerWidth, windowHeight: window.innerHeight, nodes, edges};
})()"""


@dataclass
class DrawnGraph:
    nodes: set[str] = field(default_factory=set)
    edges: set[tuple[str, str]] = field(default_factory=set)
    unmatched_edges: list[list[float]] = field(default_factory=list)


def _match_edges(raw: dict, asset_names: set[str]) -> DrawnGraph:
    """Name both ends of every drawn edge. In the horizontal layout an edge leaves the middle of its upstream node's
    right side and ends 5 px before the middle of its downstream node's left side."""
    nodes = [n for n in raw["nodes"] if n["name"] in asset_names]
    graph = DrawnGraph(nodes={n["name"] for n in nodes})

    def at(x: float, y: float, dx: Callable[[dict], float]) -> str | None:
        hits = [n["name"] for n in nodes if abs(dx(n) - x) < 1 and abs(n["y"] + n["h"] / 2 - y) < 1]
        return hits[0] if len(hits) == 1 else None

    for x0, y0, x1, y1 in raw["edges"]:
        src = at(x0, y0, lambda n: n["x"] + n["w"])
        dst = at(x1, y1, lambda n: n["x"] - 5)
        if src and dst:
            graph.edges.add((src, dst))
        else:
            graph.unmatched_edges.append([x0, y0, x1, y1])
    return graph


def _open_graph(chromium: Chromium, url: str, asset_names: set[str], done: Callable[[DrawnGraph], bool]) -> DrawnGraph:
    """Open the page and wait until the drawn graph satisfies `done` (or RENDER_WAIT_S passes)."""
    chromium.navigate(url)
    deadline = time.monotonic() + RENDER_WAIT_S
    graph: DrawnGraph | None = None
    resized = False
    while True:
        raw = chromium.evaluate(READ_GRAPH_JS)
        if raw and raw["nodes"]:
            if not resized and (raw["width"] > raw["boxWidth"] or raw["height"] > raw["boxHeight"]):
                # Nodes and edges outside the viewport are not drawn at all: grow the window until the whole graph
                # fits at scale 1, and reload so the graph centres itself in the new size.
                chromium.call(
                    "Emulation.setDeviceMetricsOverride",
                    deviceScaleFactor=1,
                    mobile=False,
                    width=int(raw["windowWidth"] + max(0, raw["width"] - raw["boxWidth"]) + 100),
                    height=int(raw["windowHeight"] + max(0, raw["height"] - raw["boxHeight"]) + 100),
                )
                chromium.navigate(url)
                resized = True
                continue
            graph = _match_edges(raw, asset_names)
            if done(graph):
                return graph
        if time.monotonic() > deadline:
            if graph is None:
                text = chromium.evaluate("document.body ? document.body.innerText.slice(0, 2000) : ''")
                pytest.fail(f"no asset graph drawn at {url} within {RENDER_WAIT_S}s; the page shows:\n{text}")
            return graph
        time.sleep(0.25)


# --- pages -------------------------------------------------------------------------------------------------------

PAGE_TEXT_JS = "window.__leaving || !document.body ? null : document.body.innerText"

# Every table row the page shows, as the text of its cells.
TABLE_ROWS_JS = r"""(() => {
  if (window.__leaving) return null;
  return [...document.querySelectorAll('tr')].map(r => [...r.children].map(c => c.innerText.trim()));
})()"""

# The metadata plots: switch the metadata section to "Plots" while it shows the table, then, for every chart canvas,
# its title (the first text above it) and how many of its pixels are the blue of a plotted point or line.
PLOTS_JS = r"""(() => {
  if (window.__leaving || !document.body) return null;
  const canvases = [...document.querySelectorAll('canvas')];
  if (!canvases.length) {
    const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Plots');
    if (button) button.click();
    return {};
  }
  const plots = {};
  for (const canvas of canvases) {
    let el = canvas.parentElement;
    while (el && !el.innerText.trim()) el = el.parentElement;
    if (!el) continue;
    const title = el.innerText.trim().split('\n')[0].trim();
    const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let blue = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 100 && d[i + 2] - d[i] > 80) blue++;
    plots[title] = Math.max(plots[title] || 0, blue);
  }
  return plots;
})()"""


def _page_size(chromium: Chromium, width: int, height: int) -> None:
    chromium.call("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, width=width, height=height)


@pytest.fixture
def page(browser) -> Iterator[Chromium]:
    """The browser at the PAGE viewport; the window size the graph tests use is back afterwards."""
    _page_size(browser, *PAGE)
    try:
        yield browser
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")


def _open_page(chromium: Chromium, url: str, read_js: str, done: Callable[[Any], bool], what: str) -> Any:
    """Open the page and return what ``read_js`` reads once ``done`` accepts it; fail with the page text when it does
    not within RENDER_WAIT_S."""
    chromium.navigate(url)
    deadline = time.monotonic() + RENDER_WAIT_S
    while True:
        value = chromium.evaluate(read_js)
        if value is not None and done(value):
            return value
        if time.monotonic() > deadline:
            text = chromium.evaluate("document.body ? document.body.innerText.slice(0, 3000) : ''")
            pytest.fail(f"{url} did not show {what} within {RENDER_WAIT_S}s; the page shows:\n{text}")
        time.sleep(0.25)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _shown(value: Any) -> str:
    """A metadata value as the UI prints it."""
    return str(value)


# --- tests -------------------------------------------------------------------------------------------------------


def test_webserver_serves_the_lineage_of_the_pass_registry(webserver):
    served = _served_lineage(webserver)
    for spec in PASSES:
        assert spec.name in served, f"pass asset {spec.name} is not served; served assets: {sorted(served)}"
        group, deps = served[spec.name]
        assert group == spec.group, f"{spec.name} is in group {group!r}, the registry says {spec.group!r}"
        assert deps == set(pass_deps(spec)), (
            f"{spec.name} depends on {sorted(deps)} in the UI; the registry (dream_assets/passes/registry.py) "
            f"says after={list(spec.after)} reads={list(spec.reads)} (and the folder read for a first pass)"
        )


@pytest.mark.parametrize("group", PASS_GROUPS)
def test_asset_graph_draws_every_pass_of_the_group_with_its_lineage_edges(webserver, browser, group, shots):
    served = _served_lineage(webserver)
    served_edges = {(dep, name) for name, (_, deps) in served.items() for dep in deps}
    passes = {spec.name for spec in PASSES if spec.group == group}
    # every registry edge into a pass of the group, and out of one (its downstream passes show as linked nodes)
    expected = {
        (dep, spec.name)
        for spec in PASSES
        for dep in (*spec.after, *spec.reads)
        if spec.group == group or dep in passes
    }
    repo = (
        quote(webserver.location)
        if webserver.repository == "__repository__"
        else f"{quote(webserver.repository)}@{quote(webserver.location)}"
    )
    url = f"{webserver.base}/locations/{repo}/asset-groups/{quote(group)}"

    graph = _open_graph(
        browser,
        url,
        set(served),
        lambda g: passes <= g.nodes and expected <= g.edges and not g.unmatched_edges,
    )
    shot = browser.screenshot(shots / f"asset-graph-{group}.png")
    print(f"asset graph of group {group}: {url} -> {shot}")

    assert passes <= graph.nodes, f"{url} does not show pass assets {sorted(passes - graph.nodes)} (see {shot})"
    pass_edges = {(a, b) for a, b in expected if a in passes and b in passes}
    drawn_pass_edges = {(a, b) for a, b in graph.edges if a in passes and b in passes}
    assert len(drawn_pass_edges) >= len(pass_edges)
    assert expected <= graph.edges, (
        f"{url} does not draw lineage edges {sorted(expected - graph.edges)}; drawn: {sorted(graph.edges)}; "
        f"edges not attached to a node: {graph.unmatched_edges} (see {shot})"
    )
    assert graph.edges <= served_edges, (
        f"{url} draws edges the definitions do not have: {sorted(graph.edges - served_edges)}"
    )
    assert not graph.unmatched_edges, f"{url} draws edges not attached to asset nodes: {graph.unmatched_edges}"


def test_a_pass_materialization_shows_its_status_summary_and_counts(webserver, page, dream_instance, shots):
    meta = dream_instance.metadata[SHOWN_PASS]
    counts = {k: v for k, v in meta.items() if isinstance(v, int) and not isinstance(v, bool)}
    assert counts.get("merged", 0) > 0 and "model_calls" in counts, (
        f"the demo cycle should have merged memories with counts to show; {SHOWN_PASS} recorded {meta}"
    )
    expected = {"status": meta["status"], "summary": meta["summary"], **counts}
    url = f"{webserver.base}/assets/{SHOWN_PASS}?view=events&partition={AGENT}"

    def table(rows: list[list[str]]) -> dict[str, list[str]]:
        return {cells[0]: cells[1:] for cells in rows if len(cells) >= 2}

    rows = _open_page(
        page,
        url,
        TABLE_ROWS_JS,
        lambda rows: set(expected) <= set(table(rows)),
        f"the metadata of {SHOWN_PASS}'s materialization",
    )
    text = page.evaluate(PAGE_TEXT_JS)
    shot = page.screenshot(shots / f"materialization-{SHOWN_PASS}.png")
    print(f"materialization of {SHOWN_PASS}: {url} -> {shot}")

    assert f"Partition {AGENT} materialized in run {dream_instance.run_id[:8]}" in text, (
        f"{url} does not say which agent and run materialized {SHOWN_PASS} (see {shot}):\n{text[:2000]}"
    )
    shown = table(rows)
    wrong = {key: (shown[key], _shown(value)) for key, value in expected.items() if _shown(value) not in shown[key]}
    assert not wrong, f"{url} shows metadata values other than the run recorded (shown, recorded): {wrong} (see {shot})"


def test_the_pass_plots_every_numeric_count(webserver, page, dream_instance, shots):
    meta = dream_instance.metadata[SHOWN_PASS]
    numeric = {k for k, v in meta.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    assert {"merged", "archived", "model_calls", "model_total_tokens"} <= numeric, f"recorded metadata: {meta}"
    # every plot on one screen: charts off screen are not guaranteed to be drawn
    _page_size(page, PAGE[0], 600 + 240 * ((len(numeric) + 1) // 2))
    url = f"{webserver.base}/assets/{SHOWN_PASS}"
    plots = _open_page(
        page,
        url,
        PLOTS_JS,
        lambda p: all(p.get(k, 0) > 0 for k in numeric),
        f"a drawn plot for each numeric metadata entry of {SHOWN_PASS} ({sorted(numeric)})",
    )
    shot = page.screenshot(shots / f"plots-{SHOWN_PASS}.png")
    print(f"metadata plots of {SHOWN_PASS}: {url} -> {shot}")
    assert numeric <= set(plots), f"{url} has no plot for {sorted(numeric - set(plots))} (see {shot})"
    assert all(plots[k] > 0 for k in numeric), (
        f"plots with no point drawn: {sorted(k for k in numeric if not plots[k])} (see {shot})"
    )
    assert not set(plots) - numeric, f"{url} plots entries the pass did not record: {sorted(set(plots) - numeric)}"


@pytest.mark.parametrize(("asset", "verdict"), [(FAILING_PASS, "Failed"), (SHOWN_PASS, "Passed")])
def test_the_pass_completed_check_shows_its_verdict_and_names_the_agent(
    webserver, page, dream_instance, shots, asset, verdict
):
    passed, description = dream_instance.checks[asset]
    assert passed == (verdict == "Passed"), f"the cycle recorded pass_completed of {asset} as passed={passed}"
    assert f"for agent {AGENT}" in description, f"the check of {asset} does not name the agent: {description!r}"
    if not passed:
        assert MODEL_ERROR in description, f"the failed check of {asset} does not give the reason: {description!r}"
    url = f"{webserver.base}/assets/{asset}?view=checks"
    listed = "Succeeded" if passed else "Failed"

    def shown(text: str) -> bool:
        lines = _lines(text)
        if description not in text or "Evaluation result" not in lines:
            return False
        at = lines.index("Evaluation result")
        return "agent" in lines and listed in lines[:at] and lines[at + 1] == verdict

    text = _open_page(
        page,
        url,
        PAGE_TEXT_JS,
        shown,
        f"the pass_completed check of {asset} listed {listed}, evaluated {verdict}, with {description!r}",
    )
    shot = page.screenshot(shots / f"check-{asset}.png")
    print(f"pass_completed check of {asset}: {url} -> {shot}")
    lines = _lines(text)
    assert "pass_completed" in lines, f"{url} does not name the check (see {shot})"
    assert lines[lines.index("agent") + 1] == AGENT, f"{url} has no agent = {AGENT} in the check metadata ({shot})"


AUTOMATION_QUERY = """{ repositoriesOrError { ... on RepositoryConnection { nodes {
  schedules { name } sensors { name } } } } }"""


# For each name: the row of the automation page that shows it, as its text lines after the name (the kind: "Scheduled
# ..." or "Standard sensor") and whether its on/off switch is on.
AUTOMATION_JS = r"""((names) => {
  if (window.__leaving || !document.body) return null;
  const rows = {};
  for (const el of document.querySelectorAll('a, span, div')) {
    const name = el.children.length === 0 ? el.innerText.trim() : '';
    if (!names.includes(name)) continue;
    let row = el.parentElement;
    while (row && row.querySelectorAll('input[type=checkbox]').length < 2) row = row.parentElement;
    if (!row) continue;
    const lines = row.innerText.split('\n').map(l => l.trim()).filter(Boolean);
    // a row whose switch is not drawn yet leads up to a box of two rows: read it at a later look
    if (names.filter(n => lines.includes(n)).length !== 1) continue;
    const toggle = [...row.querySelectorAll('input[type=checkbox]')].find(b => b.closest('[class*=formatSwitch]'));
    rows[name] = {kind: lines[lines.indexOf(name) + 1] || '', on: toggle ? toggle.checked : null};
  }
  return rows;
})(NAMES)"""


def test_the_automation_page_lists_the_cycle_schedule_and_every_sensor_switched_on(webserver, page, shots):
    [repo] = _graphql(webserver.base, AUTOMATION_QUERY)["repositoriesOrError"]["nodes"]
    schedules = {s["name"] for s in repo["schedules"]}
    sensors = {s["name"] for s in repo["sensors"]}
    required = (
        {"dream_cycle_schedule"},
        {"agent_discovery_sensor", *(f"{p}_change_gate" for p in GATED_PASSES)},
    )
    assert required[0] <= schedules and required[1] <= sensors, (
        f"the definitions serve schedules {sorted(schedules)} and sensors {sorted(sensors)}; missing "
        f"{sorted((required[0] - schedules) | (required[1] - sensors))}"
    )
    names = schedules | sensors
    url = f"{webserver.base}/automation"
    rows = _open_page(
        page,
        url,
        AUTOMATION_JS.replace("NAMES", json.dumps(sorted(names))),
        lambda rows: names <= set(rows) and all(r["kind"] and r["on"] is not None for r in rows.values()),
        f"a row with its kind and switch for every schedule and sensor ({sorted(names)})",
    )
    shot = page.screenshot(shots / "automation.png")
    print(f"automation page: {url} -> {shot}")
    wrong = {
        name: row["kind"]
        for name, row in rows.items()
        if not row["kind"].startswith("Scheduled" if name in schedules else "Standard sensor")
    }
    assert not wrong, f"{url} shows these with the wrong kind: {wrong} (see {shot})"
    # all on by default (README "Automation"): a fresh instance runs them without anyone switching them on
    off = sorted(name for name, row in rows.items() if not row["on"])
    assert not off, f"{url} shows these switched off on a fresh instance: {off} (see {shot})"
