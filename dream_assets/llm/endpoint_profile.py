"""What the agent knows of each model endpoint: its speed, its window, whether it takes ``json_schema``, and how many
bytes its tokenizer packs into a token. Kept per endpoint and model in a small JSON file of the agent profile
(``AgentProfile.endpoint_profile_path``)::

    {"version": 1, "endpoints": {"<base url>|<model>": {
        "prompt_tps": 9.5, "gen_tps": 1.8,          # tokens a second, measured by dream check-model
        "window": 8192,                             # the context window the endpoint reports (llama.cpp /props)
        "json_schema": true,                        # whether a json_schema response_format was accepted
        "tokenizer": "llama.cpp /tokenize",         # the endpoint counts tokens itself ("" when it cannot)
        "bytes_per_token": [2.1, 2.3, ...],         # recent prompt bytes / reported prompt tokens, newest last
        "measured_at": "2026-12-06T05:00:00Z"}}}

``dream check-model`` writes the speeds, the window and the json_schema answer; every model call that reports
``usage`` adds one bytes-per-token observation (the running calibration). Every number read from the file or from
an endpoint is checked: a speed or a ratio that is not a finite number in its plausible range is ignored, never
trusted (an absurd ``usage`` must not make the estimate count fewer tokens than a prompt holds). An unreadable file is
as good as none, with a warning; the file is rewritten atomically; a lost update costs one observation.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dream_assets.file_safety import UnreadableFile, atomic_write, read_json_file
from dream_assets.model import iso

log = logging.getLogger("dream_assets.llm.endpoint")

VERSION = 1
#: The estimate before any calibration: one token per three UTF-8 bytes (about right for English prose).
DEFAULT_BYTES_PER_TOKEN = 3.0
#: Plausible bytes per token of a real tokenizer: below one byte a token a prompt would have more tokens than bytes
#: (no byte-level tokenizer does), above six the counts are not of this prompt. Observations outside are ignored.
BYTES_PER_TOKEN_RANGE = (1.0, 6.0)
#: The estimate counts this much more than the densest recent observation (text full of ids packs worse than prose).
CALIBRATION_MARGIN = 0.9
#: How many observations are kept per endpoint; the estimate uses the smallest of them (the most tokens a byte).
CALIBRATION_KEEP = 8
#: A prompt shorter than this says more about the chat template than about the tokenizer: not an observation.
CALIBRATION_MIN_BYTES = 400
#: Plausible tokens a second (prompt or generation): a measured speed outside is ignored.
SPEED_RANGE = (0.01, 1_000_000.0)
#: Plausible context windows.
WINDOW_RANGE = (256, 10_000_000)


def endpoint_key(base_url: str, model: str) -> str:
    """The key of an endpoint and model in the file (the same one the structured-output memory uses)."""
    return f"{base_url.strip() or 'openai'}|{model.strip()}"


def plausible_number(value: Any, low: float, high: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and low <= number <= high else None


@dataclass(frozen=True)
class EndpointFacts:
    """One endpoint's measured facts; None where nothing (plausible) is known."""

    prompt_tps: float | None = None
    gen_tps: float | None = None
    window: int | None = None
    json_schema: bool | None = None
    tokenizer: str = ""
    bytes_per_token: tuple[float, ...] = ()
    measured_at: str = ""

    @property
    def calibrated_bytes_per_token(self) -> float | None:
        """The estimate's ratio: the densest recent observation, less the margin, never below one byte a token."""
        if not self.bytes_per_token:
            return None
        return max(BYTES_PER_TOKEN_RANGE[0], min(self.bytes_per_token) * CALIBRATION_MARGIN)

    @property
    def has_speed(self) -> bool:
        return self.prompt_tps is not None and self.gen_tps is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.prompt_tps is not None:
            out["prompt_tps"] = round(self.prompt_tps, 4)
        if self.gen_tps is not None:
            out["gen_tps"] = round(self.gen_tps, 4)
        if self.window is not None:
            out["window"] = self.window
        if self.json_schema is not None:
            out["json_schema"] = self.json_schema
        if self.tokenizer:
            out["tokenizer"] = self.tokenizer
        if self.bytes_per_token:
            out["bytes_per_token"] = [round(v, 4) for v in self.bytes_per_token]
        if self.measured_at:
            out["measured_at"] = self.measured_at
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> EndpointFacts:
        """The facts in ``data``; a field that is not plausible is dropped with a warning naming it."""
        if not isinstance(data, dict):
            log.warning("%s: not an object; ignored", where)
            return cls()

        def checked(name: str, value: Any, ok: bool) -> Any:
            if value is not None and not ok:
                log.warning("%s: field %r = %r is not plausible; ignored", where, name, value)
                return None
            return value

        prompt = plausible_number(data.get("prompt_tps"), *SPEED_RANGE)
        checked("prompt_tps", data.get("prompt_tps"), prompt is not None)
        gen = plausible_number(data.get("gen_tps"), *SPEED_RANGE)
        checked("gen_tps", data.get("gen_tps"), gen is not None)
        window = plausible_number(data.get("window"), *WINDOW_RANGE)
        checked("window", data.get("window"), window is not None and float(window).is_integer())
        schema = data.get("json_schema")
        schema = checked("json_schema", schema, isinstance(schema, bool))
        ratios_raw = data.get("bytes_per_token")
        ratios = (
            [plausible_number(v, *BYTES_PER_TOKEN_RANGE) for v in ratios_raw] if isinstance(ratios_raw, list) else []
        )
        if ratios_raw is not None and (not isinstance(ratios_raw, list) or None in ratios):
            log.warning("%s: field 'bytes_per_token' holds values that are not plausible; those are ignored", where)
        tokenizer = data.get("tokenizer")
        measured = data.get("measured_at")
        return cls(
            prompt_tps=prompt,
            gen_tps=gen,
            window=int(window) if window is not None and float(window).is_integer() else None,
            json_schema=schema,
            tokenizer=tokenizer if isinstance(tokenizer, str) else "",
            bytes_per_token=tuple(v for v in ratios if v is not None)[-CALIBRATION_KEEP:],
            measured_at=measured if isinstance(measured, str) else "",
        )


def bytes_per_token_observation(prompt_bytes: int, reported_tokens: Any, overhead: int) -> float | None:
    """One calibration observation from a call: its prompt's bytes over the prompt tokens the endpoint reported (less
    the chat framing), or None when the numbers do not make a plausible one (short prompt, absurd or missing count)."""
    tokens = plausible_number(reported_tokens, 1, 100_000_000)
    if tokens is None or prompt_bytes < CALIBRATION_MIN_BYTES:
        return None
    content_tokens = tokens - overhead
    if content_tokens <= 0:
        return None
    return plausible_number(prompt_bytes / content_tokens, *BYTES_PER_TOKEN_RANGE)


@dataclass
class EndpointProfile:
    """The profile file's endpoints (read once, written on each change)."""

    path: Path
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def _read(self) -> dict[str, Any]:
        try:
            data = read_json_file(self.path)
        except FileNotFoundError:
            return {}
        except UnreadableFile as exc:
            log.warning("%s; the endpoint's speed and token calibration are measured again", exc)
            return {}
        endpoints = data.get("endpoints") if isinstance(data, dict) else None
        if not isinstance(endpoints, dict):
            log.warning("%s: field 'endpoints' is not an object; ignored", self.path)
            return {}
        return {k: v for k, v in endpoints.items() if isinstance(k, str)}

    def get(self, key: str) -> EndpointFacts:
        raw = self._read().get(key)
        return EndpointFacts() if raw is None else EndpointFacts.from_json(raw, f"{self.path}: endpoints[{key!r}]")

    def _write(self, key: str, facts: EndpointFacts) -> None:
        endpoints = self._read()
        endpoints[key] = facts.to_json()
        try:
            atomic_write(self.path, json.dumps({"version": VERSION, "endpoints": endpoints}, indent=2, sort_keys=True))
        except OSError as exc:
            log.warning("could not write %s (%s); the endpoint's facts are kept for this process only", self.path, exc)

    def update(self, key: str, **changes: Any) -> EndpointFacts:
        """Set measured facts (``prompt_tps``, ``gen_tps``, ``window``, ``json_schema``, ``tokenizer``); values that are
        not plausible are dropped. Returns the facts as written."""
        merged = {**self.get(key).to_json(), **{k: v for k, v in changes.items() if v is not None}}
        merged["measured_at"] = iso(self.clock()) or ""
        facts = EndpointFacts.from_json(merged, f"measured facts of {key}")
        self._write(key, facts)
        return facts

    def observe_bytes_per_token(self, key: str, ratio: float | None) -> None:
        """Add one calibration observation (a plausible one only), keeping the newest ``CALIBRATION_KEEP``."""
        if ratio is None or plausible_number(ratio, *BYTES_PER_TOKEN_RANGE) is None:
            return
        facts = self.get(key)
        kept = (*facts.bytes_per_token, float(ratio))[-CALIBRATION_KEEP:]
        self._write(key, replace(facts, bytes_per_token=kept))


# --- calls sized to the endpoint's speed ------------------------------------------------------------------------
#: The timeout allows this many times the time the measured speed predicts (a busy machine runs slower than measured).
TIMEOUT_SAFETY = 2.0
#: ... plus this much: the connection, a request queued behind another one on a one-slot server.
TIMEOUT_SLACK_S = 30.0
#: No call's timeout is shorter.
TIMEOUT_FLOOR_S = 30.0
#: With LlmTimeout left at its default, no call's timeout is longer (a call that needs more is mis-sized).
TIMEOUT_CEILING_S = 6 * 3600.0
#: LlmTimeout's default: left at it, LlmTimeout does not bound a measured endpoint's calls; any other value does.
DEFAULT_LLM_TIMEOUT_S = 120.0


def rate(tokens_per_s: float | None) -> str:
    """A speed as a person reads it: 2000, 9.5, 0.83."""
    if tokens_per_s is None:
        return "unknown"
    return f"{tokens_per_s:.0f}" if tokens_per_s >= 100 else f"{tokens_per_s:.3g}"


def llm_timeout_set(timeout_s: float) -> bool:
    """Whether LlmTimeout was set by the user (any value but its default)."""
    return abs(timeout_s - DEFAULT_LLM_TIMEOUT_S) > 1e-9


@dataclass(frozen=True)
class CallTiming:
    """One call's timeout and why. ``worst_s``: the time the measured speed predicts for its prompt and a whole answer
    reserve (None when the speed is not measured)."""

    timeout_s: float
    worst_s: float | None = None
    capped: bool = False  # LlmTimeout cut the timeout below what the speed asks for
    prompt_tps: float | None = None
    gen_tps: float | None = None

    @property
    def explains_timeout(self) -> bool:
        """A timeout of this call is what the measured speed predicts: a retry cannot do better."""
        return self.worst_s is not None and self.worst_s >= self.timeout_s

    def describe(self) -> str:
        if self.worst_s is None:
            return f"{self.timeout_s:g}s (LlmTimeout; the endpoint's speed is not measured: dream check-model)"
        speed = f"{rate(self.prompt_tps)} prompt and {rate(self.gen_tps)} answer tokens/s"
        if self.capped:
            return f"{self.timeout_s:g}s (LlmTimeout; at the measured {speed} the call can take {self.worst_s:.0f}s)"
        return f"{self.timeout_s:.0f}s (from the measured {speed}: up to {self.worst_s:.0f}s for this call)"


def call_timing(prompt_tokens: int, reserve: int, facts: EndpointFacts, llm_timeout_s: float) -> CallTiming:
    """The timeout of a call of ``prompt_tokens`` with an answer reserve of ``reserve`` tokens:

    - speed not measured: LlmTimeout;
    - measured: ``TIMEOUT_SAFETY`` x (prompt / prompt speed + reserve / answer speed) + ``TIMEOUT_SLACK_S``, at least
      ``TIMEOUT_FLOOR_S``, at most LlmTimeout when the user set it, else at most ``TIMEOUT_CEILING_S``."""
    if not facts.has_speed:
        return CallTiming(llm_timeout_s)
    assert facts.prompt_tps is not None and facts.gen_tps is not None
    worst = max(0, prompt_tokens) / facts.prompt_tps + max(0, reserve) / facts.gen_tps
    wanted = max(TIMEOUT_FLOOR_S, TIMEOUT_SAFETY * worst + TIMEOUT_SLACK_S)
    cap = llm_timeout_s if llm_timeout_set(llm_timeout_s) else TIMEOUT_CEILING_S
    return CallTiming(min(wanted, cap), worst, wanted > cap, facts.prompt_tps, facts.gen_tps)
