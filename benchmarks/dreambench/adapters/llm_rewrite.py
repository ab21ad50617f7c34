"""The common "dreaming" of a markdown memory file, as Claude Code's auto-dream and OpenClaw's dreaming do it: every
save appends a line to ``MEMORY.md``; every consolidation sends the whole file to the model, which returns the tidied
file, and the answer replaces the file. Nothing is kept aside, so what the rewrite drops is gone. Search is BM25
over the file's lines. The endpoint is the one ``DREAM__LlmBaseUrl`` names (``DREAM__LlmModel``,
``DREAM__LlmTimeout`` per call, as for ``dream run``); with none set the adapter is unavailable. The answer, the
whole file again, may take what the window (``DREAM__LlmContextTokens``) leaves after the prompt, up to twice the
file, and never less than ``DREAM__LlmMaxTokens`` (``answer_limit``): the per-call reserve the project's own
passes use would cut a long file off where a whole-file dreamer sets no such limit.

A call that fails (the endpoint refuses, times out, or the file is past the model's window) or whose answer is cut
off at the token limit leaves the file as it was and is counted in ``failed_calls``; any other answer, an empty
one included, becomes the file."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from .base import Endpoint, Kept, Unavailable, workdir
from .bm25 import BM25

PROMPT = (
    "You maintain an AI agent's long-term memory file, MEMORY.md: one fact per line, each line starting with '- '. "
    "Tidy it: merge lines that say the same thing, drop facts that a later line shows are outdated, remove "
    "chit-chat that is not worth remembering, and keep every other fact with its names, numbers and dates. Answer "
    "with the complete new file only, one fact per line starting with '- ', and nothing else."
)
_FENCE = re.compile(r"^```\w*\s*$")
#: Bytes a token at least (a conservative estimate: English text runs to about four).
BYTES_PER_TOKEN = 3
#: Tokens a chat template adds around the two messages, at most.
TEMPLATE_TOKENS = 64


def answer_limit(file_text: str, reserve: int, window: int) -> int:
    """The answer limit of a rewrite of ``file_text``: up to twice the file (a model may reword at length), within
    what the ``window`` leaves after the prompt (0: no window known), and never below ``reserve``."""
    file_tokens = len(file_text.encode("utf-8")) // BYTES_PER_TOKEN + 1
    wanted = 2 * file_tokens + 256
    if window > 0:
        prompt = file_tokens + len(PROMPT.encode()) // BYTES_PER_TOKEN + TEMPLATE_TOKENS
        wanted = min(wanted, window - prompt)
    return max(reserve, wanted)


class LlmRewrite:
    name = "llm_rewrite"

    def __init__(self, *, root: Path, env: dict[str, str] | None = None, **_: object) -> None:
        self.endpoint = Endpoint.from_env(env)
        if self.endpoint is None:
            raise Unavailable(
                "llm_rewrite needs a model: set DREAM__LlmBaseUrl to an OpenAI-compatible endpoint "
                "(and DREAM__LlmModel)"
            )
        import openai

        from dream_assets.options_loader import load_options  # the same DREAM__* options, read the same way

        options = load_options(env={k: v for k, v in (os.environ if env is None else env).items()})
        self.max_tokens, self.window = options.LlmMaxTokens, options.LlmContextTokens
        self.client = openai.OpenAI(
            base_url=self.endpoint.base_url,
            api_key=self.endpoint.api_key,
            timeout=options.LlmTimeout.total_seconds(),
            max_retries=1,
        )
        self.file = workdir(root, "llm_rewrite") / "MEMORY.md"
        self.lines: list[str] = []
        self.index = BM25()
        self.tokens = 0
        self.failed_calls: list[str] = []

    def describe(self) -> str:
        return f"openai endpoint {self.endpoint.base_url} model {self.endpoint.model}"

    def _write(self) -> None:
        self.file.write_text("".join(f"- {line}\n" for line in self.lines), encoding="utf-8")
        self.index.reset(self.lines)

    def save(self, text: str, when: datetime) -> None:
        self.lines.append(" ".join(text.split()))
        self.index.add(self.lines[-1])
        with self.file.open("a", encoding="utf-8") as f:
            f.write(f"- {self.lines[-1]}\n")

    def consolidate(self, when: datetime) -> None:
        text = self.file.read_text(encoding="utf-8") if self.file.exists() else ""
        limit = answer_limit(text, self.max_tokens, self.window)
        try:
            answer = self.client.chat.completions.create(
                model=self.endpoint.model,
                messages=[
                    {"role": "system", "content": PROMPT},
                    {"role": "user", "content": text},
                ],
                temperature=0.2,
                max_tokens=limit,
            )
        except Exception as exc:  # noqa: BLE001 — any failure of the call leaves the file as it was
            self.failed_calls.append(f"{when:%Y-%m-%d}: {type(exc).__name__}: {str(exc)[:200]}")
            return
        if answer.usage is not None:
            self.tokens += int(answer.usage.total_tokens or 0)
        if answer.choices[0].finish_reason == "length":  # a cut-off file is not written: the fairest reading
            self.failed_calls.append(f"{when:%Y-%m-%d}: the answer reached the {limit}-token limit")
            return
        text = answer.choices[0].message.content or ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not _FENCE.match(ln.strip())]
        self.lines = [ln[2:].strip() if ln.startswith(("- ", "* ")) else ln for ln in lines]
        self._write()

    def search(self, query: str, k: int) -> list[str]:
        return [self.lines[i] for i in self.index.top(query, k)]

    def dump(self) -> list[Kept]:
        return [Kept(line) for line in self.lines]

    def tokens_used(self) -> int:
        return self.tokens

    def close(self) -> None:
        self.client.close()
