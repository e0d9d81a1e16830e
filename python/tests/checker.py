"""The chaos checker's safety rules for exclusive holders (chaos/src/checker.rs),
for the Python workload: each holder's validity window runs from the moment
acquire returned to that moment plus the validity the client reported, cut
short when the holder starts releasing.

- overlap: two windows intersect (mutual exclusion broken);
- token order: a window that began after another one ended has a token not
  above that one's (fencing broken: the earlier, stale holder could still
  overwrite the later one's writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple


@dataclass(frozen=True)
class Holder:
    client: int
    acquire_started: float
    window_start: float
    window_end: float
    token: int


def violations(holders: Sequence[Holder]) -> List[Tuple[str, Holder, Holder]]:
    found: List[Tuple[str, Holder, Holder]] = []
    by_start = sorted(holders, key=lambda h: h.window_start)
    latest = None  # the window that ends last among those begun so far
    for h in by_start:
        if latest is not None and h.window_start < latest.window_end:
            found.append(("overlap", latest, h))
        if latest is None or h.window_end > latest.window_end:
            latest = h
    for earlier in holders:
        for later in holders:
            if later.window_start > earlier.window_end and later.token <= earlier.token:
                found.append(("token order", earlier, later))
    return found
