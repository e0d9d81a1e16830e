#!/usr/bin/env python3
"""Every synchronous function the Node addon exports runs under catch_unwind.

napi-rs settles an async export's promise as rejected when its future
panics, but a synchronous export (a method, a getter, a constructor) only
turns a panic into a JavaScript exception when it is marked
`#[napi(catch_unwind)]`; without it the panic unwinds into Node and aborts
the process. This check reads node/src/lib.rs and fails on every
`#[napi...]` item that is a non-async `fn` without `catch_unwind` in its
attribute.

    python3 scripts/check-napi-unwind.py [FILE]
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "node/src/lib.rs"
    lines = path.read_text().splitlines()
    missing = []
    checked = 0
    for i, line in enumerate(lines):
        attr = re.match(r"\s*#\[napi(\((.*)\))?\]\s*$", line)
        if not attr:
            continue
        # The item the attribute is on: the next line that is not an
        # attribute or a comment.
        j = i + 1
        while j < len(lines) and re.match(r"\s*(#\[|//)", lines[j]):
            j += 1
        item = lines[j] if j < len(lines) else ""
        if not re.match(r"\s*pub\s+fn\b", item):
            continue  # a struct, an impl, or an async fn
        checked += 1
        args = attr.group(2) or ""
        if "catch_unwind" not in [a.strip() for a in args.split(",")]:
            missing.append(f"{path}:{i + 1}: {item.strip()}")
    if missing:
        print("synchronous napi exports without catch_unwind (a panic would abort Node):")
        print("\n".join(missing))
        return 1
    if checked == 0:
        print(f"no synchronous napi exports found in {path}: is this the addon's source?")
        return 1
    print(f"check-napi-unwind: {checked} synchronous exports, all under catch_unwind")
    return 0


if __name__ == "__main__":
    sys.exit(main())
