"""A deterministic demo agent: a realistic profile for the README's main command, tests and benchmarks.

Everything is derived from a seed and ``now`` (no clock reads), so the same call builds the same profile. At its
default size it holds >= 300 memories with near-duplicate clusters, widely separated re-observations of one durable
fact, look-alike entries that are distinct moments (with subject-time metadata), high-importance and heavily
reinforced entries, entries archived more than 90 days ago; >= 40 skills with prefix families, sparse and overlapping
skills; >= 30 conversation sessions with recurring request types; feedback with corrections and poor/fair session
summaries; skill usage; wisp executions with recurring failures and a consistent success pattern; tier-routing
records. ``n_memories`` scales the memory corpus (100,000 for benchmarks) with generated but varied facts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from dream_assets.enrolment import enrol
from dream_assets.model import MemoryEntry, Skill, utc
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.log_records import (
    ConversationTurn,
    FeedbackEvent,
    SkillResourceUsageEvent,
    SkillUsageEvent,
    TierRoutingEvent,
    ToolCallEvent,
    WispExecutionEvent,
)
from dream_assets.store.logs import append_event

PEOPLE = [
    "Ana Ribeiro",
    "Tomasz Nowak",
    "Priya Raman",
    "Kenji Watanabe",
    "Fatima Zahra",
    "Lukas Brandt",
    "Chloe Martin",
    "Diego Alvarez",
    "Ingrid Solberg",
    "Samuel Okafor",
    "Mei Lin",
    "Oscar Lindqvist",
    "Aisha Bello",
    "Rafael Costa",
]
PLACES = [
    "Lisbon",
    "Krakow",
    "Bangalore",
    "Osaka",
    "Marrakesh",
    "Hamburg",
    "Lyon",
    "Valencia",
    "Bergen",
    "Lagos",
    "Taipei",
    "Uppsala",
    "Accra",
    "Porto",
    "Austin",
    "Denver",
]
PROJECTS = [
    "Atlas",
    "Heron",
    "Juniper",
    "Kestrel",
    "Lumen",
    "Meridian",
    "Nimbus",
    "Orchid",
    "Pioneer",
    "Quartz",
]
TOOLS = [
    "Grafana",
    "Terraform",
    "Kubernetes",
    "PostgreSQL",
    "Redis",
    "GitHub Actions",
    "Jira",
    "Notion",
    "Slack",
    "Figma",
]
TOPICS = [
    "budget review",
    "quarterly planning",
    "incident retro",
    "hiring loop",
    "design critique",
    "vendor call",
    "release sync",
    "customer demo",
    "security audit",
    "roadmap workshop",
]


@dataclass(frozen=True)
class DemoSummary:
    memories: int
    archived: int
    skills: int
    sessions: int


def build_demo_profile(
    profile: AgentProfile,
    now: datetime,
    *,
    options: DreamOptions | None = None,
    n_memories: int = 320,
    seed: int = 7,
    with_logs: bool = True,
) -> DemoSummary:
    now = utc(now)
    rng = random.Random(seed)
    profile.ensure()
    store = open_store(profile, options or DreamOptions())
    entries = _memories(rng, now, n_memories)
    store.memories.put_many(entries)
    skills = _skills(now)
    for s in skills:
        store.skills.put(s)
    sessions = 0
    if with_logs:
        sessions = _logs(profile, rng, now, [s.name for s in skills])
    archived = sum(1 for e in entries if e.archived_at is not None)
    enrol(profile, now, by="the demo")  # the demo agent is one make dev dreams for
    return DemoSummary(memories=len(entries), archived=archived, skills=len(skills), sessions=sessions)


# --------------------------------------------------------------------------- memories
def _entry(
    rng: random.Random,
    now: datetime,
    content: str,
    category: str,
    tags: tuple[str, ...],
    *,
    age_days: float,
    seen_days_ago: float | None = None,
    importance: float | None = None,
    reinforced: int = 1,
    metadata: dict[str, str] | None = None,
    archived_days_ago: float | None = None,
    ident: str,
) -> MemoryEntry:
    created = now - timedelta(days=age_days)
    seen = now - timedelta(days=seen_days_ago if seen_days_ago is not None else rng.uniform(0, min(age_days, 60)))
    seen = max(seen, created)
    return MemoryEntry(
        id=ident,
        content=content,
        category=category,
        tags=tags,
        importance=round(importance if importance is not None else rng.uniform(0.2, 0.75), 3),
        created_at=created,
        updated_at=seen,
        last_seen_at=seen,
        reinforcement_count=reinforced,
        metadata=metadata or {},
        archived_at=None if archived_days_ago is None else now - timedelta(days=archived_days_ago),
    )


def _memories(rng: random.Random, now: datetime, n: int) -> list[MemoryEntry]:
    out: list[MemoryEntry] = []
    counter = iter(range(10**9))

    def ident() -> str:
        return f"mem-{next(counter):06d}"

    # 1. Near-duplicate clusters: the same fact saved with small wording changes (save-time dedup missed them).
    dup_facts = [
        ("The user prefers dark mode in VS Code.", "user-preferences/editor", ("editor", "theme")),
        ("The user's standup is at 09:30 CET every weekday.", "work/schedule", ("meetings",)),
        (
            "The user wants weekly reports as bullet points, not prose.",
            "user-preferences/formatting",
            ("reports",),
        ),
        ("Deployments for project Atlas go through GitHub Actions.", "projects/atlas", ("deploy", "ci")),
        ("The user's manager is Priya Raman.", "people/work", ("manager",)),
        ("Use the staging database for Heron load tests.", "projects/heron", ("testing",)),
        ("The user drinks oat milk flat whites.", "user-preferences/food", ("coffee",)),
        ("Expense reports are due on the 25th of each month.", "work/admin", ("expenses",)),
    ]
    variants = [lambda s: s, lambda s: s.rstrip(".") + "!", lambda s: s.replace("The user", "User", 1)]
    for content, category, tags in dup_facts:
        for k in range(rng.choice((2, 3))):
            out.append(
                _entry(
                    rng,
                    now,
                    variants[k](content),
                    category,
                    tags,
                    age_days=rng.uniform(10, 120),
                    ident=ident(),
                )
            )

    # 2. One durable fact re-observed months apart (reinforcement, not novelty).
    for age in (300, 160, 12):
        out.append(
            _entry(
                rng,
                now,
                "The user is allergic to peanuts.",
                "user-profile/health",
                ("allergy",),
                age_days=age,
                seen_days_ago=age - 1,
                importance=0.9,
                ident=ident(),
            )
        )

    # 3. Look-alike entries that are distinct real-world moments.
    for year, start, end, who in (
        (2025, "05-12", "05-16", "Ana Ribeiro"),
        (2026, "05-11", "05-15", "Tomasz Nowak"),
    ):
        out.append(
            _entry(
                rng,
                now,
                f"The user travelled to Lisbon for the Web Summit with {who}.",
                "episodes/travel",
                ("travel", "lisbon"),
                age_days=(now - datetime(year, 5, 20, tzinfo=now.tzinfo)).days,
                metadata={"subjectTimeStart": f"{year}-{start}", "subjectTimeEnd": f"{year}-{end}"},
                ident=ident(),
            )
        )
    for day in ("2026-02-03", "2026-09-14"):
        out.append(
            _entry(
                rng,
                now,
                "Incident retro for the checkout outage with the payments team.",
                "episodes/work",
                ("incident",),
                age_days=max(1, (now - datetime.fromisoformat(day).replace(tzinfo=now.tzinfo)).days),
                metadata={"subjectTime": day},
                ident=ident(),
            )
        )

    # 4. High-value entries: important, or re-observed a great many times.
    for content, reinforced in (
        ("The user's daughter Mia has a violin lesson every Thursday at 17:00.", 214),
        ("Never send messages to the #general Slack channel without approval.", 106),
        ("The user's primary email is handled through the mcp/email skill.", 80),
    ):
        out.append(
            _entry(
                rng,
                now,
                content,
                "user-profile/core",
                ("core",),
                age_days=400,
                seen_days_ago=2,
                importance=0.95,
                reinforced=reinforced,
                ident=ident(),
            )
        )

    # 5. Archived long ago: some ordinary (purgeable), some above the high-value floor (kept past retention).
    for i in range(6):
        out.append(
            _entry(
                rng,
                now,
                f"Old note {i}: the {TOPICS[i]} moved to room {200 + i}.",
                "work/notes",
                ("old",),
                age_days=300,
                importance=0.3,
                archived_days_ago=120 + i,
                ident=ident(),
            )
        )
    out.append(
        _entry(
            rng,
            now,
            "The user's passport number ends in 4471.",
            "user-profile/documents",
            ("passport",),
            age_days=500,
            importance=0.5,
            reinforced=40,
            archived_days_ago=150,
            ident=ident(),
        )
    )
    out.append(
        _entry(
            rng,
            now,
            "Merged note about Atlas sprint goals from March 2026.",
            "projects/atlas",
            ("sprint",),
            age_days=250,
            importance=0.85,
            archived_days_ago=100,
            ident=ident(),
        )
    )
    out.append(
        _entry(
            rng,
            now,
            "Recently archived: the Friday demo moved to 15:00.",
            "work/schedule",
            ("demo",),
            age_days=60,
            importance=0.4,
            archived_days_ago=10,
            ident=ident(),
        )
    )

    # 6. Routing / cost figures (numeric-exempt category) and anti-patterns.
    out.append(
        _entry(
            rng,
            now,
            "Tier high averaged 2.4 s per call over the last 14 days.",
            "anti-patterns/routing",
            ("routing",),
            age_days=20,
            ident=ident(),
        )
    )
    out.append(
        _entry(
            rng,
            now,
            "Do not retry calendar-mcp writes more than twice; it double-books.",
            "anti-patterns/calendar",
            ("calendar",),
            age_days=40,
            importance=0.7,
            ident=ident(),
        )
    )

    # 7. The bulk: varied facts from templates (scales to 100k for benchmarks).
    templates = [
        lambda r: (
            f"{r.choice(PEOPLE)} leads the {r.choice(TOPICS)} for project {r.choice(PROJECTS)} in {r.choice(PLACES)}.",
            "people/work",
        ),
        lambda r: (
            f"Project {r.choice(PROJECTS)} uses {r.choice(TOOLS)} and {r.choice(TOOLS)} for its "
            f"{r.choice(['build', 'alerts', 'tickets', 'dashboards', 'docs'])}.",
            "projects/stack",
        ),
        lambda r: (
            f"The user met {r.choice(PEOPLE)} in {r.choice(PLACES)} to discuss the {r.choice(TOPICS)}.",
            "episodes/meetings",
        ),
        lambda r: (
            f"The {r.choice(TOPICS)} for {r.choice(PROJECTS)} is scheduled for week {r.randint(1, 52)} with budget "
            f"{r.randint(10, 990) * 100} EUR.",
            "work/planning",
        ),
        lambda r: (
            f"The user prefers {r.choice(['short', 'detailed', 'bulleted', 'tabular'])} answers about "
            f"{r.choice(TOOLS)}.",
            "user-preferences/style",
        ),
        lambda r: (
            f"{r.choice(TOOLS)} alert {r.randint(100, 9999)} in {r.choice(PROJECTS)} was caused by "
            f"{r.choice(['disk pressure', 'a bad deploy', 'an expired token', 'rate limiting', 'a schema change'])}.",
            "incidents",
        ),
    ]
    target = max(n, len(out))
    while len(out) < target:
        content, category = rng.choice(templates)(rng)
        serial = len(out)
        content = f"{content} (ref {serial})" if n > 1000 else content
        out.append(
            _entry(
                rng,
                now,
                content,
                category,
                (category.split("/")[0],),
                age_days=rng.uniform(1, 200),
                ident=ident(),
            )
        )
    return out


# --------------------------------------------------------------------------- skills
def _skills(now: datetime) -> list[Skill]:
    def mk(name: str, summary: str, content: str, age: int, used: int | None = 3) -> Skill:
        return Skill(
            name=name,
            summary=summary,
            content=content,
            created_at=now - timedelta(days=age),
            updated_at=now - timedelta(days=age),
            last_used_at=None if used is None else now - timedelta(days=used),
        )

    long = (
        "1. Confirm the goal and the audience with the user.\n2. Gather the inputs listed below and check they are "
        "current.\n"
        "3. Draft, then verify every name, date and number against the source.\n4. Ask before sending anything "
        "external.\n"
        "Edge cases: missing access -> say so and stop; ambiguous recipient -> ask."
    )
    skills = [
        mk(
            "mcp/email",
            "Read, draft and send email through the MCP email server",
            "Use the email MCP tools. " + long,
            200,
            1,
        ),
        mk(
            "mcp/calendar",
            "Create and move calendar events through MCP",
            "Use calendar-mcp. Never retry writes more than twice. " + long,
            190,
            2,
        ),
        mk("mcp/weather", "Look up weather forecasts", "Call the weather tool with a city.", 90, 20),
        mk(
            "mcp/files",
            "Read and write files in the shared drive through MCP",
            "Use the files MCP tools. " + long,
            150,
            5,
        ),
        mk(
            "mcp/slack",
            "Post and read Slack messages through MCP",
            "Use slack-mcp; never post to #general without approval. " + long,
            120,
            3,
        ),
        mk("mcp/contacts", "Look up contact details", "Search contacts by name.", 60, None),
        mk(
            "research/papers",
            "Find and summarise research papers",
            "Search arXiv and Semantic Scholar. " + long,
            160,
            4,
        ),
        mk(
            "research/web",
            "Research a topic on the web",
            "Search, open the top results, cross-check. " + long,
            140,
            2,
        ),
        mk(
            "research/competitors",
            "Compare competitor products",
            "Collect pricing and features into a table.",
            40,
            9,
        ),
        mk("research/citations", "Format citations", "APA by default.", 30, None),
        mk(
            "summarize-emails",
            "Summarise an inbox digest into action items",
            "List senders, asks and deadlines. " + long,
            100,
            1,
        ),
        mk(
            "email-summary",
            "Summarise emails",
            "Summarise the unread emails into bullet points with action items.",
            20,
            6,
        ),
        mk("meeting-notes", "Write meeting notes", "Capture decisions, owners and dates. " + long, 110, 3),
        mk(
            "meeting-minutes",
            "Take minutes of a meeting",
            "Record attendees, decisions, action items with owners.",
            25,
            8,
        ),
        mk(
            "expense-report",
            "Prepare an expense report",
            "Collect receipts, fill the template, submit by the 25th. " + long,
            180,
            15,
        ),
        mk(
            "travel/booking",
            "Book travel",
            "Compare flights and hotels; confirm budget before booking. " + long,
            170,
            30,
        ),
        mk("travel/visa", "Check visa requirements", "Check the embassy site.", 45, None),
        mk(
            "code/review",
            "Review a pull request",
            "Read the diff, run tests, comment on risks. " + long,
            210,
            1,
        ),
        mk(
            "code/deploy",
            "Deploy a service",
            "Use GitHub Actions; watch Grafana after deploy. " + long,
            205,
            2,
        ),
        mk("code/rollback", "Roll back a deploy", "Revert the release tag.", 50, 12),
        mk(
            "ops/incident",
            "Run an incident",
            "Open a channel, assign roles, keep a timeline. " + long,
            190,
            7,
        ),
        mk("ops/oncall-handover", "Write the on-call handover", "List open incidents and alerts.", 35, 14),
        mk(
            "writing/report",
            "Write the weekly report",
            "Bullet points, not prose; metrics first. " + long,
            130,
            6,
        ),
        mk("writing/blog", "Draft a blog post", "Outline, draft, edit.", 15, None),
        mk(
            "data/sql",
            "Write SQL against the analytics warehouse",
            "Use read-only credentials. " + long,
            125,
            4,
        ),
        mk("data/dashboard", "Build a dashboard", "Use Grafana panels.", 28, 16),
        mk("planning/okrs", "Draft OKRs", "Objectives qualitative, key results measurable. " + long, 95, 40),
        mk("planning/roadmap", "Update the roadmap", "Move items between now/next/later.", 22, None),
        mk("hr/interview", "Prepare interview questions", "Role-specific, structured. " + long, 85, 25),
        mk("hr/onboarding", "Onboard a new hire", "Accounts, buddy, first-week plan.", 18, None),
        mk("finance/invoice", "Check an invoice", "Match PO, amounts and VAT. " + long, 75, 11),
        mk("finance/budget", "Track the budget", "Update the sheet monthly.", 12, None),
        mk("support/triage", "Triage support tickets", "Label, prioritise, route. " + long, 65, 3),
        mk("support/macro", "Reply with a support macro", "Pick the macro, personalise the greeting.", 55, 9),
        mk("home/groceries", "Order groceries", "Use the usual list; oat milk.", 48, 5),
        mk("home/recipes", "Suggest recipes", "Vegetarian on weekdays.", 8, None),
        mk("learning/flashcards", "Make flashcards", "One fact per card.", 70, None),
        mk("learning/course-notes", "Summarise course notes", "Headings per lecture. " + long, 58, 21),
        mk("translate/document", "Translate a document", "Keep formatting; flag idioms. " + long, 42, 10),
        mk("translate/quick", "Translate a sentence", "Literal first, then natural.", 9, 2),
        mk("scheduling/room-booking", "Book a meeting room", "Check the room calendar, then book.", 33, 4),
        mk(
            "scheduling/find-slot",
            "Find a meeting slot",
            "Intersect calendars; prefer mornings. " + long,
            77,
            3,
        ),
    ]
    return skills


# --------------------------------------------------------------------------- logs
REQUESTS = [
    ("Can you summarize my emails from this morning?", ["mcp/email", "summarize-emails"]),
    ("Please summarize the unread emails and list action items", ["mcp/email", "email-summary"]),
    ("Book a meeting room for the design critique tomorrow", ["scheduling/room-booking", "mcp/calendar"]),
    ("I need a meeting room for Thursday's vendor call", ["scheduling/room-booking", "mcp/calendar"]),
    ("Draft the weekly report for project Atlas", ["writing/report"]),
    ("Convert this invoice PDF into a spreadsheet row", ["finance/invoice", "mcp/files"]),
    ("Convert the attached invoice into the expenses spreadsheet", ["finance/invoice", "mcp/files"]),
    ("Convert these receipts into the expenses spreadsheet please", ["expense-report", "mcp/files"]),
    ("What's the weather in Lisbon next week?", ["mcp/weather"]),
    ("Find recent papers on retrieval augmented generation", ["research/papers"]),
    ("Review the pull request for the Heron API", ["code/review"]),
    ("Deploy Kestrel to staging", ["code/deploy"]),
]
PREFERENCE_LINES = [
    "No, I told you: bullet points, not paragraphs. Stop writing prose for reports.",
    "Please keep answers short.",
    "Again, shorter please.",
    "Never share my bank details in an email draft.",
    "Could you use 24-hour times?",
]


def _logs(profile: AgentProfile, rng: random.Random, now: datetime, skill_names: list[str]) -> int:
    n_sessions = 34
    for s in range(n_sessions):
        sid = f"session-{s:03d}"
        start = now - timedelta(days=n_sessions - s, hours=rng.randint(0, 10))
        request, used = REQUESTS[s % len(REQUESTS)]
        t = start
        append_event(profile, "conversation", ConversationTurn(t, sid, "user", request))
        t += timedelta(seconds=20)
        append_event(profile, "conversation", ConversationTurn(t, sid, "assistant", f"Done: {request.lower()}"))
        if s % 5 == 0:
            t += timedelta(minutes=1)
            append_event(
                profile,
                "conversation",
                ConversationTurn(t, sid, "user", PREFERENCE_LINES[(s // 5) % len(PREFERENCE_LINES)]),
            )
        for name in used:
            t += timedelta(seconds=5)
            append_event(profile, "skill-usage", SkillUsageEvent(t, sid, name, "invoked"))
            append_event(profile, "skill-resource-usage", SkillResourceUsageEvent(t, sid, name, f"{name}/README.md"))
            ok = not (name == "mcp/calendar" and s % 3 == 0)
            append_event(
                profile,
                "tool-call",
                ToolCallEvent(
                    t,
                    sid,
                    name.split("/")[-1],
                    ok,
                    None if ok else "409 Conflict: slot already booked",
                    float(rng.randint(80, 900)),
                    name,
                ),
            )
        if s % 4 == 1:
            append_event(
                profile,
                "feedback",
                FeedbackEvent(
                    t + timedelta(minutes=2),
                    sid,
                    "Correction",
                    "The meeting was double-booked; check the calendar first.",
                    domain="calendar",
                    skill_names=list(used),
                ),
            )
        rating = ("poor", "fair", "good", "excellent")[s % 4]
        append_event(
            profile,
            "feedback",
            FeedbackEvent(
                t + timedelta(minutes=3),
                sid,
                "SessionSummary",
                f"Session handled: {request}",
                rating=rating,
                skill_names=list(used),
            ),
        )
        tier = ("low", "mid", "high")[s % 3]
        outcome = "escalated" if tier == "low" and s % 2 == 0 else ("failure" if s % 7 == 0 else "success")
        append_event(
            profile,
            "tier-routing",
            TierRoutingEvent(t, sid, tier, "chat", outcome, float(300 + 100 * (s % 3)), 0.001 * (1 + s % 3)),
        )
    # Wisps: one description fails repeatedly at the same step; one succeeds consistently.
    for i in range(6):
        t = now - timedelta(days=12 - 2 * i)
        append_event(
            profile,
            "wisp-executions",
            WispExecutionEvent(
                t,
                f"wisp-inv-{i}",
                "Convert invoice PDF to spreadsheet row",
                success=(i == 5),
                skill_name="finance/invoice",
                failed_step=None if i == 5 else "parse-pdf-table",
                error=None if i == 5 else "TableNotFound: no table on page 1",
                steps=["fetch-pdf", "parse-pdf-table", "append-row"],
            ),
        )
    for i in range(7):
        t = now - timedelta(days=13 - 2 * i, hours=3)
        append_event(
            profile,
            "wisp-executions",
            WispExecutionEvent(
                t,
                f"wisp-sum-{i}",
                "Summarize unread emails",
                success=True,
                skill_name="summarize-emails",
                steps=["list-unread", "summarize", "post-digest"],
            ),
        )
    # An old execution outside the 14-day window: must not count.
    append_event(
        profile,
        "wisp-executions",
        WispExecutionEvent(
            now - timedelta(days=40),
            "wisp-old",
            "Convert invoice PDF to spreadsheet row",
            success=False,
            skill_name="finance/invoice",
            failed_step="fetch-pdf",
            error="404",
            steps=["fetch-pdf"],
        ),
    )
    _ = skill_names
    return n_sessions
