#!/usr/bin/env python3
"""Checks the documentation against the code: `make test` runs it (a job
of scripts/test-matrix.py, on the first server of the matrix).

    scripts/check-docs.py [--links-only] [FILE.md ...]

What it checks, in README.md, ARCHITECTURE.md, BENCHMARKS.md, the
packages' READMEs, every page of the book (docs/src/) and every other
Markdown file git tracks:

1. Links. Every relative link (inline, also when its text runs over a line
   break, an image, or a reference definition `[name]: target`) names a
   file or folder that exists, and its
   `#anchor` a heading of the target (the slug GitHub and mdBook both
   make: lower case, punctuation dropped, spaces to `-`, `-1` for a
   repeat). A page of the book links only inside the book (docs/src/),
   since the book is built from that folder alone; pages that
   `{{#include}}` a file have that file's headings, and every relative
   link the included file brings must resolve inside the book too (mdBook
   does not rewrite it). Every page of docs/src/
   is listed in its SUMMARY.md (or it would be left out of the book).

2. redis-cli sessions. A session is a fenced block whose info string is
   `console` and whose commands are the lines starting with the prompt
   `127.0.0.1:6379> `; the lines after a command, up to the next prompt, are
   its reply as `redis-cli` prints it (lines starting with `# ` are
   comments, a first line `$ redis-cli` is allowed). Each session is
   replayed, in order, on a fresh server with the module loaded (the server
   of $REDIS_LOCK_SERVER, default `redis-server`, and the `redis-cli` or
   `valkey-cli` beside it), on one connection, and every reply must match
   what the block shows: exactly, except for run-dependent values. Those
   are (a) fencing tokens and other readings of the wall clock in
   microseconds (16 digits, the first 1 to 3): each number in the block stands for one value of the run, the
   same number for the same value, and their order must be the block's
   order; (b) the integer right after a `"pttl"` field: any value from the
   block's less TIME_SLACK (10 s) to the block's rounded up to the next
   thousand, and so the time left in a `RECOVERING` refusal; (c) the time redis-cli
   prints after a slow reply (`(1.00s)`). A comment line just before
   the block, `<!-- session: args debug yes -->`, gives the module's load
   arguments; `<!-- session: skip REASON -->` skips it (counted and
   printed). A block of another kind that shows the prompt or redis-cli's
   reply forms (`(integer)`, `(error)`, `(nil)`) is an error, and so is a
   ```console block with no command, so no session escapes the check; a
   block indented in a list item is read without its indentation. A
   command that does not reply within STEP_TIMEOUT seconds fails the check
   (a `WAIT 0` that nothing ends would otherwise hang `make test`).

3. The reference against the server (when no FILE is named): every field
   `INFO lock` reports is named in the monitoring section of
   docs/src/operations.md and every `lock_*` name there is a field; every
   command the module registers is named in docs/src/commands.md; every
   error of that page's tables is a replayed session's reply or, less its
   numbers and placeholders, text of the module's source.

4. Rust code. Every ```rust block is `rust` or `rust,no_run` (never
   `ignore`), and every file with one is compiled as doc tests by
   `cargo test --doc` (`client/src/lib.rs` includes it with
   `include_str!` under `cfg(doctest)`); this script checks that the file
   is listed there.

Exit status 1 when anything does not match, with every finding printed.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "docs" / "src"
PROMPT = "127.0.0.1:6379> "
MODULE = ROOT / "target" / "release" / "libredis_lock.so"
DOCTEST_HOST = ROOT / "client" / "src" / "lib.rs"

FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")
LINK = re.compile(r"(?<!\!)\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s]+)\s*\}\}")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)>?", re.M)
# An inline code span, which may run over a line break (not a blank line).
CODE_SPAN = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))*`")
# What redis-cli prints for a reply: a block showing it is a session.
REPLY_FORM = re.compile(r"^\s*(\d+\)\s+)*\((integer|error|nil)\)")
DIRECTIVE = re.compile(r"^<!--\s*session:\s*(\w+)\s*(.*?)\s*-->$")


def markdown_files():
    files = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "BENCHMARKS.md"]
    # The crate's own README (client/README.md) is the registry page of
    # the crate, whose fragments are not compiled; its links are checked.
    for package in ("client", "python", "node"):
        readme = ROOT / package / "README.md"
        if readme.exists():
            files.append(readme)
    files.extend(sorted(BOOK.rglob("*.md")))
    # And every other Markdown file of the repository (bench/analysis.md,
    # tests/fixtures/README.md, a suite's README added later), so that a
    # session or a link in one is not left out by omission.
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "*.md"],
                            capture_output=True, text=True)
    if listed.returncode == 0:
        files.extend(sorted(ROOT / name for name in listed.stdout.split("\0")
                            if name and ROOT / name not in files))
    return [f for f in files if f.exists()]


def blocks(text):
    """(start line, info string, body lines, the line before the block) of
    every fenced code block; and the text outside blocks, line by line
    (None inside a block)."""
    found, outside = [], []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            outside.append(lines[i])
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body, start = [], i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            # A block indented in a list item: its lines without that
            # indentation (as Markdown reads them).
            line = lines[i]
            cut = len(line) - len(line.lstrip(" "))
            body.append(line[min(indent, cut):])
            i += 1
        found.append((start, info, body, before))
        outside.extend([None] * (len(body) + 2))
        i += 1
    return found, outside


def expand(path, seen=()):
    """The file's text with its {{#include}}s put in (one level deep is all
    the book uses; deeper works too)."""
    text = path.read_text(encoding="utf-8")
    if path in seen:
        return text

    def put(m):
        # `file:from:to` picks lines; the whole file is enough for the checks.
        target = (path.parent / re.sub(r"(:\d*)+$", "", m.group(1))).resolve()
        return expand(target, seen + (path,)) if target.exists() else m.group(0)

    return INCLUDE.sub(put, text)


def link_targets(outside):
    """(line number, target) of every link in the text outside code blocks
    (`outside` as blocks() gives it): inline links and images, also when
    the link's text runs over a line break, and reference definitions
    (`[name]: target`). Code spans are left out."""
    prose = "\n".join("" if line is None else line for line in outside)
    prose = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    found = []
    for m in LINK.finditer(prose):
        group = 2 if m.group(2) else 3
        found.append((prose.count("\n", 0, m.start(group)) + 1, m.group(group)))
    for m in REFDEF.finditer(prose):
        found.append((prose.count("\n", 0, m.start(1)) + 1, m.group(1)))
    return sorted(found)


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path):
    found, counts = set(), {}
    _, outside = blocks(expand(path))
    for line in outside:
        if line is None:
            continue
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def check_links(files):
    problems, count = [], 0
    cache = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        _, outside = blocks(text)
        for number, target in link_targets(outside):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # a URL (https:, mailto:)
            count += 1
            where = f"{path.relative_to(ROOT)}:{number}"
            file_part, _, anchor = target.partition("#")
            goal = (path.parent / file_part).resolve() if file_part else path
            if not goal.exists():
                problems.append(f"{where}: link to {target}: no such file")
                continue
            in_book = BOOK in path.parents
            if in_book and BOOK != goal and BOOK not in goal.parents:
                problems.append(f"{where}: link to {target} leaves the book (docs/src/)")
                continue
            if anchor:
                if goal.suffix != ".md" or goal.is_dir():
                    problems.append(f"{where}: link to {target}: an anchor into a file that is not Markdown")
                    continue
                if goal not in cache:
                    cache[goal] = anchors(goal)
                if anchor not in cache[goal]:
                    problems.append(f"{where}: link to {target}: {goal.relative_to(ROOT)} has no heading #{anchor}")
    summary = BOOK / "SUMMARY.md"
    if summary.exists() and any(BOOK in f.parents for f in files):
        listed = {(BOOK / m.group(2)).resolve() for m in LINK.finditer(summary.read_text(encoding="utf-8"))
                  if m.group(2)}
        for page in sorted(BOOK.rglob("*.md")):
            if page != summary and page.resolve() not in listed:
                problems.append(f"{page.relative_to(ROOT)}: not in docs/src/SUMMARY.md, so not in the book")
    return problems, count


def book_view_problems():
    """Links that an included file (a package's README, ARCHITECTURE.md)
    brings into the book and that do not resolve there: the file's own
    place is checked above, but mdBook does not rewrite an included link,
    so in the book it points outside it (a dead link in the built book).
    Such a file names other places in the repository as text."""
    problems = []
    for page in sorted(BOOK.rglob("*.md")):
        own = page.read_text(encoding="utf-8")
        if not INCLUDE.search(own):
            continue
        _, outside = blocks(expand(page))
        for _number, target in link_targets(outside):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            if re.fullmatch(r"bench/[\w.-]+\.svg", target):
                continue  # BENCHMARKS.md's charts: `make docs` copies them beside the book
            goal = (page.parent / target.partition("#")[0]).resolve()
            if not goal.exists() or BOOK not in goal.parents:
                problems.append(f"{page.relative_to(ROOT)}: an included link to {target} points outside the book")
    return problems


def doctest_files():
    text = DOCTEST_HOST.read_text(encoding="utf-8")
    return {(DOCTEST_HOST.parent / p).resolve() for p in re.findall(r'include_str!\("([^"]+)"\)', text)}


def check_rust(files):
    """Rust blocks of README.md and the book are doc tests; and no block of
    a doc-tested file lacks an info string (rustdoc would take it for
    Rust)."""
    problems, count = [], 0
    compiled = doctest_files()
    for path in files:
        if path != ROOT / "README.md" and BOOK not in path.parents:
            continue
        for start, info, _body, _before in blocks(path.read_text(encoding="utf-8"))[0]:
            if not info:
                problems.append(f"{path.relative_to(ROOT)}:{start}: a code block needs an info "
                                "string (```sh, ```text, ```console, ```rust, ...)")
        for start, info, _body, _before in blocks(path.read_text(encoding="utf-8"))[0]:
            words = [w.strip() for w in info.split(",")]
            if words and words[0] != "rust" and (words[0].lower() in ("rs", "rust")
                                                 or words[0] in ("no_run", "ignore", "should_panic", "compile_fail")):
                problems.append(f"{path.relative_to(ROOT)}:{start}: write ```rust (or ```rust,no_run), "
                                f"not ```{info}: only those are checked here as doc tests")
                continue
            if not words or words[0] != "rust":
                continue
            count += 1
            where = f"{path.relative_to(ROOT)}:{start}"
            if any(w not in ("rust", "no_run") for w in words):
                problems.append(f"{where}: a rust block is `rust` or `rust,no_run`, not `{info}`")
            if path.resolve() not in compiled:
                problems.append(f"{where}: {path.relative_to(ROOT)} has rust blocks but "
                                f"{DOCTEST_HOST.relative_to(ROOT)} does not compile it (include_str! under cfg(doctest))")
    return problems, count


# -- sessions ---------------------------------------------------------------


class Session:
    def __init__(self, path, start, body, directive):
        self.path, self.start, self.directive = path, start, directive
        self.steps = []  # (line number, command, expected lines)
        self.problems = []
        for offset, line in enumerate(body):
            number = start + offset + 1
            if line.startswith(PROMPT):
                self.steps.append((number, line[len(PROMPT):], []))
            elif line.startswith("# ") or line == "#":
                continue
            elif not self.steps and line.strip() in ("$ redis-cli", "$ valkey-cli"):
                continue
            elif not self.steps:
                self.problems.append(f"{self.where(number)}: a session starts with the prompt `{PROMPT}`")
            else:
                self.steps[-1][2].append(line)

    def where(self, number):
        return f"{self.path.relative_to(ROOT)}:{number}"


def sessions(files):
    found, problems = [], []
    for path in files:
        for start, info, body, before in blocks(path.read_text(encoding="utf-8"))[0]:
            shows_prompt = any(line.lstrip().startswith(PROMPT.rstrip()) for line in body)
            shows_reply = any(REPLY_FORM.match(line) for line in body)
            if info != "console":
                if shows_prompt or shows_reply:
                    problems.append(f"{path.relative_to(ROOT)}:{start}: a block showing "
                                    f"{'`' + PROMPT + '`' if shows_prompt else 'redis-cli replies'} "
                                    "must be a ```console session (so that it is replayed)")
                continue
            m = DIRECTIVE.match(before)
            directive = (m.group(1), m.group(2)) if m else None
            if directive and directive[0] not in ("skip", "args"):
                problems.append(f"{path.relative_to(ROOT)}:{start}: unknown session directive {directive[0]}")
            session = Session(path, start, body, directive)
            if not (directive and directive[0] == "skip"):
                problems.extend(session.problems)
                if not session.steps and not session.problems:
                    problems.append(f"{path.relative_to(ROOT)}:{start}: a ```console block with no "
                                    f"command (`{PROMPT}...`): nothing to replay")
            found.append(session)
    return found, problems


def clients_for(server):
    here = Path(server).parent if os.sep in server else None
    for name in ("redis-cli", "valkey-cli"):
        if here and (here / name).exists():
            return str(here / name)
    for name in ("redis-cli", "valkey-cli"):
        if shutil.which(name):
            return name
    sys.exit("check-docs: no redis-cli or valkey-cli")


class Server:
    """A server with the module on a free loopback port below the ephemeral
    range (10000..22767, as testkit picks), known by its PID."""

    def __init__(self, binary, cli, args):
        self.cli, self.dir = cli, tempfile.mkdtemp(prefix="check-docs-")
        for _ in range(50):
            self.port = random.randrange(10000, 22768)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", self.port))
                except OSError:
                    continue
            break
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir,
                "--loadmodule", str(MODULE), *args]
        self.log = open(Path(self.dir) / "server.log", "w")
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {(Path(self.dir) / 'server.log').read_text()[-2000:]}")
            pid = self.ask("INFO server")
            if f"process_id:{self.process.pid}" in pid:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the server did not answer within 20 s")

    def ask(self, command):
        done = subprocess.run([self.cli, "-p", str(self.port), *command.split()],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        return done.stdout

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# A fencing token or another reading of the wall clock in microseconds
# (16 digits, 1..3 first: until the year 2096); other numbers, such as the
# bound 9007199254740991, are matched exactly.
BIG = re.compile(r"(?<!\d)[1-3]\d{15}(?!\d)")
INTEGER = re.compile(r"\(integer\) (-?\d+)$")
# A pttl (or the recovery window's time left) may be this many ms below the
# block's value (the run took longer than the block's), no more: a reply in
# other units, or a lease that ended early, must not pass.
TIME_SLACK = 10000
# The time left of the recovery window in its refusal: a countdown, like pttl.
COUNTDOWN = re.compile(r"^\(error\) RECOVERING .* for another (\d+) ms")
# The longest a documented command may take to reply (a WAIT that blocks
# for a few seconds is fine; one that never returns must not hang the check).
STEP_TIMEOUT = 60
# What redis-cli prints after a reply that took long (a WAIT that blocked).
ELAPSED = re.compile(r"\(\d+\.\d+s\)")


def compare(session, step_number, expected, actual, bindings, previous):
    """Problems of one reply; `bindings` maps the block's big numbers to the
    run's; `previous` is the expected line before this one (for pttl)."""
    where = session.where(step_number)
    if len(expected) != len(actual):
        return [f"{where}: expected {len(expected)} line(s) of reply, got {len(actual)}:\n"
                f"    expected: {expected}\n    got:      {actual}"]
    problems = []
    for i, (want, got) in enumerate(zip(expected, actual)):
        before = expected[i - 1] if i else previous
        if before.rstrip().endswith('"pttl"') and INTEGER.search(want):
            shown = int(INTEGER.search(want).group(1))
            low, limit = max(0, shown - TIME_SLACK), -(-shown // 1000) * 1000
            m = INTEGER.search(got)
            same_frame = want[:INTEGER.search(want).start()] == (got[:m.start()] if m else None)
            if not (m and same_frame and low <= int(m.group(1)) <= limit):
                problems.append(f"{where}: expected a pttl from {low} to {limit} as `{want}`, got `{got}`")
            continue
        if ELAPSED.fullmatch(want):
            if not ELAPSED.fullmatch(got):
                problems.append(f"{where}: expected redis-cli's time taken (`{want}`), got `{got}`")
            continue
        countdown = COUNTDOWN.search(want)
        if countdown:
            shown = int(countdown.group(1))
            low, limit = max(0, shown - TIME_SLACK), -(-shown // 1000) * 1000
            m = re.fullmatch(re.escape(want[:countdown.start(1)]) + r"(\d+)" + re.escape(want[countdown.end(1):]), got)
            if not (m and low <= int(m.group(1)) <= limit):
                problems.append(f"{where}: expected `{want}` with a time left from {low} to {limit}, got `{got}`")
            continue
        pattern = "".join(f"({BIG.pattern})" if BIG.fullmatch(part) else re.escape(part)
                          for part in re.split(f"({BIG.pattern})", want))
        m = re.fullmatch(pattern, got)
        if not m:
            problems.append(f"{where}: expected `{want}`, got `{got}`")
            continue
        for doc_value, run_value in zip(BIG.findall(want), m.groups()):
            doc_value, run_value = int(doc_value), int(run_value)
            if doc_value in bindings and bindings[doc_value] != run_value:
                problems.append(f"{where}: {doc_value} stands for {bindings[doc_value]} earlier in the "
                                f"session, but here the reply has {run_value}")
                continue
            for other_doc, other_run in bindings.items():
                if other_doc == doc_value:
                    continue
                if (other_doc < doc_value) != (other_run < run_value) or other_run == run_value:
                    problems.append(f"{where}: {doc_value} and {other_doc} are in that order in the "
                                    f"block, but the run's values are {run_value} and {other_run}")
            bindings[doc_value] = run_value
    return problems


def translate(value, bindings, last):
    """The run's value for a number of the block in a command: the one it
    stands for, or, for a new one (a time to raise the counter to), the
    block's value moved by the difference between the run's clock and the
    block's at the last number bound."""
    if value in bindings:
        return bindings[value]
    if last is None:
        return value
    return value + last[1] - last[0]


def replay(session, binary, cli):
    """Runs the session's commands one by one on one redis-cli connection;
    a number of the block that stands for a value of the run (a token) is
    sent as that value, so that a later command can use an earlier reply."""
    args = session.directive[1].split() if session.directive and session.directive[0] == "args" else []
    server = Server(binary, cli, args)
    problems, bindings, last = [], {}, None
    try:
        child = subprocess.Popen([cli, "-p", str(server.port), "--no-raw"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        try:
            for n, (number, command, expected) in enumerate(session.steps):
                sent = BIG.sub(lambda m: str(translate(int(m.group(0)), bindings, last)), command)
                marker = f"check-docs-marker-{n}"
                child.stdin.write(f"{sent}\nECHO {marker}\n")
                child.stdin.flush()
                actual = []
                timed_out = threading.Event()
                timer = threading.Timer(STEP_TIMEOUT, lambda: (timed_out.set(), child.kill()))
                timer.start()
                while True:
                    line = child.stdout.readline()
                    if not line:
                        timer.cancel()
                        why = f"no reply within {STEP_TIMEOUT} s" if timed_out.is_set() else "redis-cli ended before the reply"
                        problems.append(f"{session.where(number)}: {why}: {actual}")
                        return problems
                    line = line.rstrip("\n")
                    if line == f'"{marker}"':
                        timer.cancel()
                        break
                    actual.append(line)
                before = dict(bindings)
                problems.extend(compare(session, number, expected, actual, bindings, ""))
                for doc_value, run_value in bindings.items():
                    if doc_value not in before:
                        last = (doc_value, run_value)
        finally:
            child.stdin.close()
            child.kill()
            child.wait()
    finally:
        server.stop()
    return problems


MONITORING = (BOOK / "operations.md", "## Monitoring with `INFO lock`")
COMMANDS_PAGE = BOOK / "commands.md"


def check_error_tables(found):
    """Every error of the Commands page's tables (a row starting with a
    code span such as `ERR ...`, `RECOVERING ...`) is either the reply of a
    replayed session, or its text (less the numbers and the N/n/m
    placeholders) is in the module's source (core/src, src): an error
    reworded in the code, and not replayed (the waiters' errors,
    exhaustion, TRYAGAIN), must not keep its old text here."""
    problems = []
    source = "".join(p.read_text(encoding="utf-8") for d in ("core/src", "src")
                     for p in sorted((ROOT / d).rglob("*.rs")))
    source = re.sub(r"\\\n\s*", "", source)  # a string literal continued over lines
    replies = {line[len("(error) "):] for session in found
               if not (session.directive and session.directive[0] == "skip")
               for _n, _c, expected in session.steps for line in expected if line.startswith("(error) ")}
    text = COMMANDS_PAGE.read_text(encoding="utf-8")
    rows = 0
    for number, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\| `([A-Z]+ [^`]*)`", line)
        if not m:
            continue
        rows += 1
        error = m.group(1)
        if error in replies:
            continue
        fragments = [f.strip() for f in re.split(r"\b(?:\d+|N|n|m)\b|…|<[^>]+>|\(none\)", error)]
        missing = [f for f in fragments if len(f) >= 8 and f not in source]
        if missing:
            problems.append(f"{COMMANDS_PAGE.relative_to(ROOT)}:{number}: the error `{error}` is neither a "
                            f"replayed reply nor in the module's source (not found: {missing})")
    return problems, rows


def check_reference(binary, cli):
    """What the server reports, against the reference pages: every field
    of `INFO lock` is named in the monitoring section and every `lock_*`
    name there is a field; every command the module registers is named in
    the commands page. A field or command added, renamed or removed
    without its documentation fails."""
    problems = []
    page, heading = MONITORING
    lines = page.read_text(encoding="utf-8").split("\n")
    if heading not in lines:
        return [f"{page.relative_to(ROOT)}: no heading `{heading}` (the INFO lock fields' list)"], 0, 0
    section = []
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("## "):
            break
        section.append(line)
    documented = set(re.findall(r"\block_[a-z0-9_]+\b", "\n".join(section)))
    commands_text = COMMANDS_PAGE.read_text(encoding="utf-8")
    server = Server(binary, cli, [])
    try:
        info = server.ask("INFO lock")
        listed = server.ask("COMMAND LIST FILTERBY MODULE lock")
    finally:
        server.stop()
    fields = set(re.findall(r"^(lock_[a-z0-9_]+):", info, re.M))
    where = f"{page.relative_to(ROOT)}:{lines.index(heading) + 1}"
    if not fields:
        problems.append(f"{where}: INFO lock reported no fields: {info[:200]!r}")
    for name in sorted(fields - documented):
        problems.append(f"{where}: INFO lock reports {name}, which the section does not name")
    for name in sorted(documented - fields):
        problems.append(f"{where}: the section names {name}, which INFO lock does not report")
    commands = set(listed.split())
    if not commands:
        problems.append(f"{COMMANDS_PAGE.relative_to(ROOT)}: the module registered no commands: {listed[:200]!r}")
    for name in sorted(commands):
        if not re.search(rf"(?<![\w.]){re.escape(name.upper())}(?![\w.])", commands_text):
            problems.append(f"{COMMANDS_PAGE.relative_to(ROOT)}: the module has {name.upper()}, "
                            "which the page does not name")
    return problems, len(fields), len(commands)


def main():
    argv = sys.argv[1:]
    links_only = "--links-only" in argv
    chosen = [Path(a).resolve() for a in argv if not a.startswith("--")]
    files = chosen or markdown_files()
    problems = []
    link_problems, links = check_links(files)
    problems += link_problems
    print(f"check-docs: {links} relative links in {len(files)} files, {len(link_problems)} broken")
    book_problems = book_view_problems()
    problems += book_problems
    if not links_only:
        rust_problems, rust_blocks = check_rust(files)
        problems += rust_problems
        print(f"check-docs: {rust_blocks} rust blocks, each compiled by `cargo test --doc` "
              f"({len(rust_problems)} problems)")
        found, session_problems = sessions(files)
        problems += session_problems
        binary = os.environ.get("REDIS_LOCK_SERVER", "redis-server")
        cli = clients_for(binary)
        if not MODULE.exists():
            sys.exit(f"check-docs: {MODULE} is missing: cargo build --release -p redis-lock")
        replayed = skipped = 0
        for session in found:
            if session.directive and session.directive[0] == "skip":
                skipped += 1
                print(f"check-docs: skipped {session.where(session.start)}: {session.directive[1]}")
                continue
            if not session.steps or session.problems:
                continue
            found_here = replay(session, binary, cli)
            problems += found_here
            replayed += 1
        if not chosen:
            table_problems, rows = check_error_tables(found)
            print(f"check-docs: {rows} errors in the Commands page's tables, each replayed or in the "
                  f"module's source ({len(table_problems)} problems)")
            problems += table_problems
            reference, field_count, command_count = check_reference(binary, cli)
            print(f"check-docs: {field_count} INFO lock fields and {command_count} module commands, "
                  f"each in the reference pages ({len(reference)} problems)")
            problems += reference
        steps = sum(len(s.steps) for s in found)
        print(f"check-docs: {len(found)} redis-cli sessions ({steps} commands): {replayed} replayed on "
              f"{subprocess.run([binary, '--version'], capture_output=True, text=True).stdout.strip()}, "
              f"{skipped} skipped")
    for problem in problems:
        print(f"check-docs: {problem}")
    print(f"check-docs: {'FAILED, ' + str(len(problems)) + ' problem(s)' if problems else 'ok'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
