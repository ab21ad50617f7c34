"""The Dagster UI in a real browser: dagster-webserver on 127.0.0.1 serves the definitions, headless Chromium opens
each pass group's asset graph, and every pass asset and every lineage edge of the pass registry is drawn.

The webserver's GraphQL API gives the exact lineage (compared with the registry); the browser check proves the asset
graph displays it. Chromium is driven over the DevTools protocol so the test waits for the graph to render instead of
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
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from websockets.sync.client import ClientConnection, connect

from dream_assets.passes.registry import PASSES

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
SERVER_WAIT_S = 90      # the webserver imports dagster and loads the code location: slow on a busy 2-core machine
RENDER_WAIT_S = 60      # upper bound only: the test goes on as soon as the graph shows what it must
WINDOW = (2900, 2300)   # large enough that a group graph fits at scale 1 (the UI only draws what is on screen)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PASS_GROUPS = sorted({spec.group for spec in PASSES})

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
    req = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
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
    pytest.fail(f"dagster-webserver did not serve a loaded workspace within {SERVER_WAIT_S}s ({last}); "
                f"log {log}:\n{_tail(log)}")


@pytest.fixture(scope="module")
def webserver(tmp_path_factory) -> Iterator[Webserver]:
    tmp = tmp_path_factory.mktemp("dagster-ui")
    home = tmp / "dagster_home"
    home.mkdir()
    # nux off: the first-visit "join the community" dialog would cover the graph
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\nnux:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "DREAM__ProfileRoot": str(tmp / "agents")}
    exe = Path(sys.executable).parent / "dagster-webserver"
    cmd = [str(exe if exe.exists() else shutil.which("dagster-webserver") or exe), "-h", HOST]
    for attempt in itertools.count(1):
        port = _free_port()
        log = tmp / f"webserver-{attempt}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([*cmd, "-p", str(port), "-w", str(ROOT / "workspace.yaml")], cwd=ROOT, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
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
    return {"/".join(n["assetKey"]["path"]): (n["groupName"], {"/".join(d["path"]) for d in n["dependencyKeys"]})
            for n in nodes}


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
        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-extensions", "--disable-default-apps", "--no-first-run", "--no-default-browser-check",
                "--no-proxy-server", "--hide-scrollbars", "--mute-audio",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
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
        reason = (f"chromium not installed: none of {', '.join(CHROMIUM_NAMES)} is on PATH; install Debian's "
                  "`chromium` package (`.ci/run` does when run as root with CI=true) to run the browser test")
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


def _open_graph(chromium: Chromium, url: str, asset_names: set[str],
                done: Callable[[DrawnGraph], bool]) -> DrawnGraph:
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
                chromium.call("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False,
                              width=int(raw["windowWidth"] + max(0, raw["width"] - raw["boxWidth"]) + 100),
                              height=int(raw["windowHeight"] + max(0, raw["height"] - raw["boxHeight"]) + 100))
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


# --- tests -------------------------------------------------------------------------------------------------------

def test_webserver_serves_the_lineage_of_the_pass_registry(webserver):
    served = _served_lineage(webserver)
    for spec in PASSES:
        assert spec.name in served, f"pass asset {spec.name} is not served; served assets: {sorted(served)}"
        group, deps = served[spec.name]
        assert group == spec.group, f"{spec.name} is in group {group!r}, the registry says {spec.group!r}"
        assert deps == {*spec.after, *spec.reads}, (
            f"{spec.name} depends on {sorted(deps)} in the UI; the registry (dream_assets/passes/registry.py) "
            f"says after={list(spec.after)} reads={list(spec.reads)}")


@pytest.mark.parametrize("group", PASS_GROUPS)
def test_asset_graph_draws_every_pass_of_the_group_with_its_lineage_edges(webserver, browser, group, tmp_path):
    served = _served_lineage(webserver)
    served_edges = {(dep, name) for name, (_, deps) in served.items() for dep in deps}
    passes = {spec.name for spec in PASSES if spec.group == group}
    # every registry edge into a pass of the group, and out of one (its downstream passes show as linked nodes)
    expected = {(dep, spec.name) for spec in PASSES for dep in (*spec.after, *spec.reads)
                if spec.group == group or dep in passes}
    repo = quote(webserver.location) if webserver.repository == "__repository__" else \
        f"{quote(webserver.repository)}@{quote(webserver.location)}"
    url = f"{webserver.base}/locations/{repo}/asset-groups/{quote(group)}"

    graph = _open_graph(browser, url, set(served), lambda g: passes <= g.nodes and expected <= g.edges and not g.unmatched_edges)
    shot = browser.screenshot(tmp_path / f"asset-graph-{group}.png")
    print(f"asset graph of group {group}: {url} -> {shot}")

    assert passes <= graph.nodes, f"{url} does not show pass assets {sorted(passes - graph.nodes)} (see {shot})"
    pass_edges = {(a, b) for a, b in expected if a in passes and b in passes}
    drawn_pass_edges = {(a, b) for a, b in graph.edges if a in passes and b in passes}
    assert len(drawn_pass_edges) >= len(pass_edges)
    assert expected <= graph.edges, (
        f"{url} does not draw lineage edges {sorted(expected - graph.edges)}; drawn: {sorted(graph.edges)}; "
        f"edges not attached to a node: {graph.unmatched_edges} (see {shot})")
    assert graph.edges <= served_edges, f"{url} draws edges the definitions do not have: " \
                                        f"{sorted(graph.edges - served_edges)}"
    assert not graph.unmatched_edges, f"{url} draws edges not attached to asset nodes: {graph.unmatched_edges}"
