"""Words that say a fact changed or was put right: "moved", "no longer", "now", "correction".

The contradiction sweep shows two entries about one subject to the model when one of them says a change, and recall
lets an entry that says one rank in the place of the version it replaces even when BM25 puts it further down.
"""

from __future__ import annotations

import re

#: Words that say a fact changed or was put right (lowercase: ``says_change`` lowercases the text).
CHANGE_WORDS = re.compile(
    r"\b(?:no\s+longer|any\s*more|no\s+more|now|nowadays|these\s+days|from\s+now\s+on|used\s+to|instead"
    r"|mov(?:e|ed|es|ing)|relocat(?:e|ed|es|ing)|chang(?:e|ed|es|ing)|switch(?:ed|es|ing)?|stopp?(?:ed|s|ing)?"
    r"|quit|became|become|corrections?|corrected|actually|promoted|raise)\b"
)


def says_change(text: str) -> bool:
    """Whether ``text`` says that something changed or was put right (in any case: the text is lowercased, which
    matches twice as fast as a case-blind pattern; an index build asks it of every entry)."""
    return CHANGE_WORDS.search(text.lower()) is not None
