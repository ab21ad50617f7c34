"""The scripted year: what an agent is told, day by day, built by rules with fixed seeds from public data only (read
in place from the shared evaluation data, never copied).

* LoCoMo (``locomo/locomo10.json``): every observation fact of a conversation, saved on the day its session falls
  on once the conversation's sessions are spread over the year; about a quarter re-observed at later sessions in
  other words (synonyms, clauses reordered, "On 25 May 2023, Caroline mentioned again that ..."): a fact and its
  re-observations are one duplicate group; about one in ten restated as two or three distinct events that read
  alike (another date, number or person): a look-alike group; the QA items (categories 1 to 4) whose evidence turns
  have facts are the questions.
* HaluMem profiles (``halumem-profiles/stage2_1_extend_dynamic.jsonl``): per person, birth date, home, job and
  income, savings, parents, friends, likes and dislikes, each with a question; later in the year a raise or a job
  change, a move to another city, and the person's correction of a wrong savings figure noted first (corrections:
  the old version is stale, the question must find the new one first); dinners with a friend on different dates
  (distinct events that read alike).
* MSC personas (``msc-personas-locomo/msc_personas_all.json``): first-person small talk as noise on random days,
  never scored.

The last part of the year has no saves: its cycles are idle. Every fact keeps its specifics (names, numbers, dates);
the scoring (``scoring.py``) follows them through whatever the adapter keeps.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .textmatch import MONTHS

START = datetime(2025, 1, 6, tzinfo=UTC)
DAYS = 365
SAVE_SHARE = 0.85  # saves stop after this share of the year; the rest is idle cycles
#: Of the LoCoMo observations not re-observed, the share followed by distinct look-alike events.
LOOKALIKE_SHARE = 0.1
NOISE_PER_DAY = 0.4  # the chance of a line of small talk on a day


@dataclass(frozen=True)
class Save:
    at: datetime
    text: str
    key: str  # the fact this save carries ("noise-<n>" for noise)


@dataclass
class Question:
    text: str
    evidence: list[list[str]]  # per evidence item, the fact keys any of which answers it


@dataclass
class Correction:
    question: str
    old_key: str
    new_key: str
    at: datetime  # when the new version is saved


@dataclass
class Scenario:
    """The year: saves in time order, consolidations, and what the scoring knows about each fact."""

    saves: list[Save]
    consolidations: list[datetime]
    facts: dict[str, str]  # key -> text of every scored fact (noise is not one)
    kinds: dict[str, str]  # key -> observation | reobservation | lookalike | profile | stale | current
    dup_groups: list[list[str]]
    lookalike_groups: list[list[str]]
    questions: list[Question]
    corrections: list[Correction]
    sources: dict[str, str] = field(default_factory=dict)  # what was read, for the results page

    def summary(self) -> dict[str, int]:
        kinds = defaultdict(int)
        for k in self.kinds.values():
            kinds[k] += 1
        return {
            "saves": len(self.saves),
            "noise": sum(1 for s in self.saves if s.key.startswith("noise-")),
            "facts": len(self.facts),
            "dup_groups": len(self.dup_groups),
            "lookalike_groups": len(self.lookalike_groups),
            "questions": len(self.questions),
            "corrections": len(self.corrections),
            "consolidations": len(self.consolidations),
            **{f"kind.{k}": v for k, v in sorted(kinds.items())},
        }


# ---------------------------------------------------------------------------------------------- rewording rules
SYNONYMS = [
    ("attended", "went to"),
    ("is planning to", "plans to"),
    ("excited", "thrilled"),
    ("kids", "children"),
    ("loves", "really enjoys"),
    ("recently", "lately"),
    ("started", "began"),
    ("bought", "purchased"),
    ("happy", "glad"),
    ("important", "significant"),
    ("favorite", "favourite"),
    ("wants to", "would like to"),
    ("helps", "assists"),
    ("enjoys", "likes"),
    ("friends", "pals"),
    ("finds", "considers"),
    ("big", "large"),
    ("decided to", "chose to"),
    ("received", "got"),
    ("amazing", "wonderful"),
    ("trip", "journey"),
    ("picture", "photo"),
    ("hopes to", "wishes to"),
    ("works as", "is employed as"),
    ("lives in", "resides in"),
]
_SYN = [(re.compile(rf"\b{re.escape(a)}\b", re.IGNORECASE), b) for a, b in SYNONYMS]
_NUMBER = re.compile(r"\b\d+\b")
_REPORTING = re.compile(r"\b(?:mention\w*|sa(?:y|ys|id)|shar(?:e|es|ed) that|t(?:ell|ells|old)|express\w*)\b", re.I)
_SESSION_TIME = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$")


def day_text(at: datetime) -> str:
    return f"{at.day} {MONTHS[at.month - 1]} {at.year}"


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


def _lower_first(text: str, names: set[str]) -> str:
    first = text.split(" ", 1)[0].strip("'’s,")
    if first in names or first[1:2].isupper():
        return text
    return text[:1].lower() + text[1:]


def reword(rng: random.Random, text: str, who: str, other: str, on: datetime, names: set[str]) -> str:
    """``text`` said again on ``on``, in other words: synonyms swapped, and framed ("On <date>, <who> mentioned again
    that ...") or followed by context. Its specifics stay (the framing adds the date it was said again)."""
    body = text.strip().rstrip(".")
    swaps = [(rx, b) for rx, b in _SYN if rx.search(body)]
    for rx, b in rng.sample(swaps, min(len(swaps), 2)):
        body = rx.sub(lambda m, b=b: b[:1].upper() + b[1:] if m.group()[:1].isupper() else b, body, count=1)
    roll = rng.random()
    if roll < 0.45:
        body = f"On {day_text(on)}, {who} mentioned again that {_lower_first(body, names)}"
    elif roll < 0.8:
        body = f"{body}. {who} brought this up again while talking with {other} on {day_text(on)}"
    else:
        body = f"{who} said again that {_lower_first(body, names)}"
    return _sentence(body)


def lookalikes(rng: random.Random, text: str, who: str, other: str, on: datetime) -> list[str]:
    """Two or three distinct events restating ``text``: always another date, sometimes another number or person."""
    body = text.strip().rstrip(".")
    out = []
    when = on
    for i in range(rng.choice((2, 2, 3))):
        when = when + timedelta(days=rng.randint(20, 60))
        event = body
        if i == 1 and _NUMBER.search(body):
            event = _NUMBER.sub(lambda m: str(int(m.group()) + rng.randint(1, 9)), body, count=1)
        elif i == 2:
            event = re.sub(rf"\b{re.escape(who)}\b", other, body)
            if event == body:
                event = f"{other} too: {event[:1].lower() + event[1:]}"
        out.append(_sentence(f"On {day_text(when)}, {_lower_first(event, {who, other})}"))
    return out


def session_time(text: str) -> datetime:
    m = _SESSION_TIME.match(text)
    if not m:
        raise ValueError(f"locomo10.json: session date_time {text!r} is not like '1:56 pm on 8 May, 2023'")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime(int(year), MONTHS.index(month.capitalize()) + 1, int(day), h, int(minute), tzinfo=UTC)


# ---------------------------------------------------------------------------------------------- building
class _Builder:
    def __init__(self, seed: int, save_share: float = SAVE_SHARE, lookalike_share: float = LOOKALIKE_SHARE) -> None:
        self.seed = seed
        self.lookalike_share = lookalike_share
        self.saves: list[Save] = []
        self.facts: dict[str, str] = {}
        self.kinds: dict[str, str] = {}
        self.dup_groups: list[list[str]] = []
        self.lookalike_groups: list[list[str]] = []
        self.questions: list[Question] = []
        self.corrections: list[Correction] = []
        self.last_save_day = int(DAYS * save_share)

    def at(self, day: int, seq: int) -> datetime:
        return START + timedelta(days=min(day, self.last_save_day), hours=9, seconds=seq)

    def fact(self, key: str, text: str, kind: str, day: int, seq: int) -> str:
        self.facts[key] = text
        self.kinds[key] = kind
        self.saves.append(Save(self.at(day, seq), text, key))
        return key

    # -- LoCoMo ------------------------------------------------------------------------------------------------
    def locomo(self, conv: dict[str, Any], per_speaker: int | None = None) -> None:
        """The observation facts of ``conv`` (the first ``per_speaker`` of each speaker a session, when given; then
        only the questions whose every evidence turn has a fact)."""
        sample = conv["sample_id"]
        rng = random.Random(f"{self.seed}:locomo:{sample}")
        look = random.Random(f"{self.seed}:lookalike:{sample}")  # its own stream: the share moves nothing else
        talk = conv["conversation"]
        speakers = [talk["speaker_a"], talk["speaker_b"]]
        names = set(speakers)
        sessions = sorted(int(k.split("_")[1]) for k in talk if re.fullmatch(r"session_\d+", k))
        when = {s: session_time(talk[f"session_{s}_date_time"]) for s in sessions}
        first, last = min(when.values()), max(when.values())
        span = max((last - first).total_seconds(), 1.0)
        day = {s: int((when[s] - first).total_seconds() / span * (self.last_save_day - 1)) for s in sessions}
        by_dia: dict[str, list[str]] = defaultdict(list)
        for s in sessions:
            observed = conv["observation"].get(f"session_{s}_observation", {})
            for speaker in sorted(observed):
                other = speakers[1] if speaker == speakers[0] else speakers[0]
                for i, (text, dia) in enumerate(observed[speaker][:per_speaker]):
                    key = f"{sample}-s{s}-{speaker.lower()}-{i}"
                    self.fact(key, _sentence(text), "observation", day[s], i)
                    dias = dia if isinstance(dia, list) else [dia]
                    for d in dias:
                        by_dia[d].append(key)
                    later = [t for t in sessions if t > s]
                    if later and rng.random() < 0.25:
                        group = [key]
                        for r, t in enumerate(sorted(rng.sample(later, min(len(later), rng.choice((1, 1, 2)))))):
                            rk = f"{key}-re{r}"
                            self.fact(
                                rk, reword(rng, text, speaker, other, when[t], names), "reobservation", day[t], 500 + i
                            )
                            group.append(rk)
                            for d in dias:
                                by_dia[d].append(rk)
                        self.dup_groups.append(group)
                    elif look.random() < self.lookalike_share and not _REPORTING.search(text):
                        group = []
                        for r, variant in enumerate(lookalikes(look, text, speaker, other, when[s])):
                            lk = f"{key}-la{r}"
                            offset = look.randint(3, 40) * (r + 1)
                            self.fact(lk, variant, "lookalike", day[s] + offset, 800 + i)
                            group.append(lk)
                        self.lookalike_groups.append(group)
        for item in conv["qa"]:
            if item.get("category") == 5 or "answer" not in item:
                continue
            evidence = [by_dia[d] for d in item.get("evidence") or [] if by_dia.get(d)]
            if per_speaker is not None and len(evidence) < len(item.get("evidence") or []):
                continue  # a question about facts left out of the year
            if evidence:
                self.questions.append(Question(item["question"], evidence))

    # -- HaluMem -----------------------------------------------------------------------------------------------
    def halumem(self, record: dict[str, Any], others: list[dict[str, Any]], n: int) -> None:
        rng = random.Random(f"{self.seed}:halumem:{record['uuid']}")
        fixed = record["profile"]["fixed"]
        info = fixed["basic_info"]
        name = info["name"]
        pid = f"hm{n}"
        pronoun = "She" if info.get("gender") == "Female" else "He"
        day0 = rng.randint(0, self.last_save_day // 5)
        seq = iter(range(10_000))

        def add(suffix: str, text: str, question: str | None, day: int = day0, kind: str = "profile") -> str:
            key = self.fact(f"{pid}-{suffix}", text, kind, day, next(seq))
            answers = [key]
            if kind == "profile" and rng.random() < 0.3:
                again = day + rng.randint(15, 120)
                said = reword(rng, text, name, "the agent", self.at(again, 0), {name})
                answers.append(self.fact(f"{key}-re0", said, "reobservation", again, next(seq)))
                self.dup_groups.append(answers)
            if question:
                self.questions.append(Question(question, [answers]))
            return key

        add("born", f"{name} was born on {info['birth_date']}.", f"When was {name} born?")
        career = record["profile"]["dynamic"]["career_status"]["init"]
        income, company, title = (
            career.get("monthly_income") or 0,
            career.get("company_name") or "",
            career.get("job_title") or "",
        )
        for m in fixed.get("family_life", {}).get("parent_members") or []:
            member = m["member_type"].lower()
            add(
                f"{member}",
                f"{name}'s {member} was born on {m['birth_date']}. {m['description']}",
                f"When was {name}'s {member} born?",
            )
        for rel, about in list((record["profile"]["dynamic"]["social_relationships"].get("init") or {}).items())[:2]:
            parts = re.findall(r"[A-Z][a-z]+", rel)
            friend = " ".join(reversed(parts)) if len(parts) == 2 else rel
            add(
                f"rel-{friend.lower().replace(' ', '-')}",
                f"{friend} is {name}'s {about['relationship_type'].lower()}. {about['description']}",
                f"Who is {friend} to {name}?",
            )
        points = [
            (cat.split()[0].lower(), p)
            for cat, body in sorted(record["profile"].get("preferences", {}).items())
            for p in body.get("memory_points") or []
        ]
        for i, (noun, p) in enumerate(rng.sample(points, min(3, len(points)))):
            verb = "likes" if p["type"] == "like" else "dislikes"
            add(
                f"pref{i}",
                f"{name} {verb} {p['specific_item']}: {p['reason']}",
                f"What {noun} does {name} {verb[:-1]}?",
            )
        # Home, then a move: the old home is stale from the move on.
        moved_to = rng.choice([o["profile"]["fixed"]["basic_info"]["location"] for o in others])
        home = add("home", f"{name} lives in {info['location']}.", None)
        move_day = rng.randint(self.last_save_day // 3, self.last_save_day - 20)
        new_home = add(
            "home-new", f"{name} has moved to {moved_to}. {pronoun} lives in {moved_to} now.", None, move_day, "current"
        )
        self._correction(f"Where does {name} live?", home, new_home, move_day)
        # Job and income, then a raise or a new job.
        if income and company:
            job = add("job", f"{name} works as {title} at {company}, earning {income} a month.", None)
            raise_day = rng.randint(self.last_save_day // 3, self.last_save_day - 20)
            new_income = int(round(income * rng.uniform(1.08, 1.3), -1))
            new_company = rng.choice(
                [o["profile"]["dynamic"]["career_status"]["init"].get("company_name") or company for o in others]
            )
            if new_company != company and rng.random() < 0.5:
                text = f"{name} changed jobs: {name} now works at {new_company}, earning {new_income} a month."
            else:
                text = f"{name} got a raise at {company} and now earns {new_income} a month."
            new_job = add("job-new", text, None, raise_day, "current")
            self._correction(f"How much does {name} earn a month?", job, new_job, raise_day)
        # A wrong savings figure noted first, then the person's correction.
        savings = career.get("savings_amount") or 0
        if savings:
            wrong = int(round(savings * rng.choice((0.5, 0.8, 1.25, 2.0)), -2))
            noted = add("savings", f"{name} has {wrong} in savings.", None)
            fix_day = day0 + rng.randint(10, 90)
            fixed_key = add(
                "savings-fix",
                f"Correction from {name}: {name} has {savings} in savings, not {wrong}.",
                None,
                fix_day,
                "current",
            )
            self._correction(f"How much does {name} have in savings?", noted, fixed_key, fix_day)
        # Dinners with a friend on different dates: distinct events that read alike.
        friend = rng.choice(others)["profile"]["fixed"]["basic_info"]["name"]
        group = []
        dinner = day0 + rng.randint(5, 40)
        for i in range(rng.choice((2, 3))):
            dinner += rng.randint(20, 70)
            on = START + timedelta(days=dinner)
            group.append(
                add(
                    f"dinner{i}",
                    f"On {day_text(on)}, {name} had dinner with {friend} at Luigi's.",
                    None,
                    dinner,
                    "lookalike",
                )
            )
        self.lookalike_groups.append(group)

    def _correction(self, question: str, old: str, new: str, day: int) -> None:
        for key in self.kinds:  # the old version and its re-observations
            if key == old or key.startswith(f"{old}-re"):
                self.kinds[key] = "stale"
        self.corrections.append(Correction(question, old, new, self.at(day, 0)))
        self.questions.append(Question(question, [[new]]))

    # -- MSC noise ---------------------------------------------------------------------------------------------
    def noise(self, personas: dict[str, Any], per_day: float) -> None:
        rng = random.Random(f"{self.seed}:msc")
        pool = [s for item in personas["valid"] for side in ("Speaker 1", "Speaker 2") for s in item.get(side, [])]
        n = 0
        for day in range(self.last_save_day):
            for chance in (per_day, per_day / 4):  # now and then two lines a day
                if rng.random() < chance:
                    self.saves.append(Save(self.at(day, 9000 + n), _sentence(rng.choice(pool)), f"noise-{n}"))
                    n += 1


def eval_data(arg: str | None) -> Path:
    """``--data``, else ``DREAM_EVAL_DATA``, else ``../shared/eval-data`` beside the repository."""
    import os

    if arg:
        return Path(arg)
    if os.environ.get("DREAM_EVAL_DATA"):
        return Path(os.environ["DREAM_EVAL_DATA"])
    return Path(__file__).resolve().parents[3] / "shared" / "eval-data"


def _read(path: Path) -> str:
    if not path.exists():
        raise SystemExit(f"{path}: not found (give --data or DREAM_EVAL_DATA: the shared eval-data folder)")
    return path.read_text(encoding="utf-8")


def build(
    data: Path,
    *,
    conversations: list[str],
    profiles: int,
    every: int,
    noise_per_day: float = NOISE_PER_DAY,
    per_speaker: int | None = None,
    save_share: float = SAVE_SHARE,
    lookalike_share: float = LOOKALIKE_SHARE,
    seed: int = 20240809,
) -> Scenario:
    """The year for ``conversations`` (LoCoMo sample ids; of each session, the first ``per_speaker`` observations of
    each speaker when given, else all) and the first ``profiles`` HaluMem people, with a consolidation every
    ``every`` days; ``noise_per_day`` is the chance of a line of small talk on a day (and a quarter of it of a
    second line). Saves stop after ``save_share`` of the year; the consolidations after that are idle. Of the
    observations not re-observed, ``lookalike_share`` are followed by two or three distinct events that read alike."""
    if every < 1:
        raise ValueError(f"every {every!r}: consolidate every 1 day or more")
    if not 0 < save_share <= 1:
        raise ValueError(f"save_share {save_share!r}: a share of the year, above 0 and at most 1")
    if not 0 <= lookalike_share <= 1:
        raise ValueError(f"lookalike_share {lookalike_share!r}: a share, from 0 to 1")
    b = _Builder(seed, save_share, lookalike_share)
    convs = {c["sample_id"]: c for c in json.loads(_read(data / "locomo" / "locomo10.json"))}
    unknown = [c for c in conversations if c not in convs]
    if unknown:
        raise SystemExit(f"--conversations: no {', '.join(unknown)} in locomo10.json (there are {', '.join(convs)})")
    for sample in conversations:
        b.locomo(convs[sample], per_speaker)
    people = [
        json.loads(line)
        for line in _read(data / "halumem-profiles" / "stage2_1_extend_dynamic.jsonl").splitlines()
        if line.strip()
    ]
    for n, record in enumerate(people[:profiles]):
        b.halumem(record, [p for p in people if p is not record], n)
    b.noise(json.loads(_read(data / "msc-personas-locomo" / "msc_personas_all.json")), noise_per_day)
    b.saves.sort(key=lambda s: (s.at, s.key))
    cycles = [START + timedelta(days=d, hours=3) for d in range(every, DAYS + 1, every)]
    return Scenario(
        saves=b.saves,
        consolidations=cycles,
        facts=b.facts,
        kinds=b.kinds,
        dup_groups=b.dup_groups,
        lookalike_groups=b.lookalike_groups,
        questions=b.questions,
        corrections=b.corrections,
        sources={
            "locomo": f"`locomo/locomo10.json` ({', '.join(conversations)}"
            + (f"; the first {per_speaker} observation(s) of each speaker a session" if per_speaker else "")
            + ")",
            "halumem": f"`halumem-profiles/stage2_1_extend_dynamic.jsonl` (the first {profiles} people)",
            "msc": "`msc-personas-locomo/msc_personas_all.json` (valid split, as noise)",
        },
    )
