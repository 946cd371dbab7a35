"""The README is tested code: every shell and Python block of README.md runs, in order and as
printed, against a local stack started for it (issue 28, goal 1).

How a block is run:
- The blocks share one bash session (`set -euo pipefail`: a failing command or an undefined
  variable fails its block), whose working folder stands for the project's root: the stack's data
  folder is its `.workset/` (the admin token in `.workset/admin-token`, as `./dev up` makes it), and
  its `node_modules` is tests/upstreams/node_modules (npm runs offline: an `npx -y` package must be
  there). `python3` is the project's venv's.
- A `bash` block runs whole; an HTTP answer of 400 or more to any `curl` in it fails it (the
  session's `curl` also writes each status to stderr), and so does an error body
  (`{"error": {"code": ...}}`).
- A `console` block runs each `$ ` command; the JSON keys its printed answer shows must be in
  the real answer, and a printed line that is neither JSON nor cut short (`...`) must be printed.
- A `python` block whose first line is `# <name>.py` is saved under that name (a later shell
  block runs it, as the README tells a reader to); any other is run with `python3`.
- A block right after `<!-- not run: <reason> -->` is skipped with that reason; NOT_RUN below
  lists each one, and the README must mark exactly those.

The stack is `python -m local`, what `./dev up` runs, with a vendor timeout of 30 s instead of 10
(a loaded machine starts the README's bridged stdio server slowly). It listens on the README's own
addresses (127.0.0.1:8000, its demo vendor on 8001, the stdio bridge on 8100): the session and the
stack run in a network namespace of their own (`unshare --net`), so those ports are free whatever
else runs on the machine. Where namespaces are not allowed (some CI containers), they run on the
machine's own loopback if those ports are free.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from local.process import ROOT

README = ROOT / "README.md"
UPSTREAMS = ROOT / "tests" / "upstreams" / "node_modules"
BLOCK_SECONDS = 120
START_SECONDS = 120
KEPT = ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "TERM")  # of the test's environment, for the blocks
RUN = {"bash", "console", "python"}
KNOWN = RUN | {"json", "text"}
# Each block the test does not run: its first line, and why (the README says the same).
NOT_RUN = {
    "./dev up      # run Workset locally (installs what it needs first)":
        "the README's test starts the same stack itself (python -m local on 127.0.0.1:8000, "
        "what ./dev up runs once it has installed), and runs inside ./dev test",
    "aws s3 mb s3://acme-workset-artifacts                        # once: holds packages and releases":
        "deploys to AWS",
}


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    not_run: str | None  # the reason, when the README marks the block not run

    @property
    def name(self) -> str:
        return f"README.md:{self.line}:{self.language}"


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, in order."""
    found, lines, index = [], text.splitlines(), 0
    while index < len(lines):
        opening = re.match(r"^```(\S*)\s*$", lines[index])
        if not opening:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = re.match(r"^<!-- not run: (.+?) -->$", before.strip())
        found.append(Block(index + 1, opening.group(1), "\n".join(lines[index + 1:end]) + "\n",
                           marker.group(1) if marker else None))
        index = end + 1
    return found


def commands(console: str) -> list[tuple[str, str]]:
    """A `console` block's commands (`$ ` lines, with their continuations) and the answer printed after each."""
    pairs: list[tuple[str, str]] = []
    command: list[str] = []
    answer: list[str] = []
    for line in console.splitlines():
        if command and (command[-1].endswith("\\") or "".join(command).count("'") % 2):
            command.append(line)
        elif line.startswith("$ "):
            if command:
                pairs.append(("\n".join(command), "\n".join(answer)))
            command, answer = [line[2:]], []
        else:
            answer.append(line)
    if command:
        pairs.append(("\n".join(command), "\n".join(answer)))
    return pairs


def keys(answer: str) -> set[str]:
    return set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)":', answer))


ERROR = re.compile(r'"error":\s*\{"code"')


class Session:
    """One bash session in a network namespace of its own, with the local stack running in it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.logs = folder / ".readme"
        self.logs.mkdir()
        (folder / "node_modules").symlink_to(UPSTREAMS)
        # a bare environment: a variable the README uses must be defined by the README
        env = {key: os.environ[key] for key in KEPT if key in os.environ}
        env.update(PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1",
                   npm_config_offline="true", npm_config_update_notifier="false")
        # the README's ports in a namespace of their own: bring its loopback up, then become bash;
        # where namespaces are not allowed (some CI containers), the machine's own free ports
        if own_network():
            shell = ["unshare", "--user", "--map-root-user", "--net", "bash", "-c",
                     "ip link set lo up && exec bash --noprofile --norc"]
        else:
            shell = ["bash", "--noprofile", "--norc"]
        self.process = subprocess.Popen(shell,
                                        cwd=folder, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.count = 0
        self.broken: str | None = None
        self.send("set -euo pipefail")
        # every curl also writes its HTTP status to stderr, where the test reads it (a 4xx or 5xx
        # fails the block, whatever the body says); what it prints on stdout is unchanged
        self.send("curl() { command curl --write-out '%{stderr}::http %{http_code}\\n' \"$@\"; }")

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def run(self, script: str, timeout: float = BLOCK_SECONDS) -> tuple[bool, str, str]:
        """Source `script` in the session: whether it ended well, its stdout and its stderr."""
        self.count += 1
        path, out, err = (self.logs / f"{self.count}.{kind}" for kind in ("sh", "out", "err"))
        path.write_text(script)
        self.send(f"source {path} >{out} 2>{err}; echo '::done {self.count}'")
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        done = False
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line or line.strip() == f"::done {self.count}":
                done = bool(line)
                break
        if not done:
            self.broken = f"block {self.count} ended the session (or took over {timeout} s)"
        return done, out.read_text() if out.exists() else "", err.read_text() if err.exists() else ""

    def start_stack(self) -> None:
        """`python -m local` on the README's port, its data in `.workset/` (what `./dev up` runs)."""
        log = self.logs / "stack.log"
        # a vendor timeout of 30 s, not 10: on a loaded machine the bridged stdio server (npx, then
        # node) can take longer than 10 s to answer its first request
        ok, _, err = self.run(f"WORKSET_VENDOR_TIMEOUT_SECONDS=30 PYTHONPATH={ROOT} "
                              f"python3 -m local --port 8000 --data .workset >{log} 2>&1 &\n"
                              "STACK_PID=$!")
        assert ok, err
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            text = log.read_text() if log.exists() else ""
            if "READY http://127.0.0.1:8000" in text:
                return
            if self.process.poll() is not None or "Traceback" in text:
                break
            time.sleep(0.2)
        pytest.fail("the local stack did not start:\n" + (log.read_text() if log.exists() else ""))

    def close(self) -> None:
        """Stop the stack as Ctrl-C would, then everything the blocks started (the session's process
        group), also when a failing block ended the session first."""
        if self.process.poll() is None:
            self.run("kill -INT $STACK_PID; wait $STACK_PID || true", timeout=30)
        for sent, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sent)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(self.process.pid):
                self.process.poll()  # reap the session's own process, if it is the one left
                time.sleep(0.1)
        self.process.poll()


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


README_BLOCKS = blocks(README.read_text())


@pytest.fixture(autouse=True)
def aws() -> Iterator[None]:
    """The README talks to the stack's own emulator, never to the in-process moto."""
    yield


README_PORTS = (8000, 8001, 8100)


@functools.cache
def own_network() -> bool:
    """Whether this machine lets the test give the README a network namespace of its own."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "ip", "link", "set", "lo", "up"],
                           check=False, capture_output=True, timeout=30)
    return probe.returncode == 0


def ports_free() -> bool:
    """Whether the README's ports are free on the machine's own loopback."""
    for port in README_PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    reasons = [f"{tool} is missing: the README's blocks run Node.js" for tool in ("node", "npm")
               if shutil.which(tool) is None]
    if not own_network() and not ports_free():
        reasons.append(f"no network namespace and ports {README_PORTS} are taken: the README's blocks need them")
    if reasons:
        if os.environ.get("CI"):
            pytest.fail("; ".join(reasons))
        pytest.skip("; ".join(reasons))
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "ip", "link", "set", "lo", "up"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        reason = f"this machine allows no network namespace for the README's test: {probe.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    if not (UPSTREAMS / ".bin" / "supergateway").exists():
        pytest.fail("tests/upstreams/node_modules lacks supergateway: run `./dev test` (npm ci) again")
    running = Session(tmp_path_factory.mktemp("readme"))
    try:
        running.start_stack()
        yield running
    finally:
        running.close()


def test_every_block_is_run_or_says_why_not() -> None:
    # every fenced block names its language (a shell block cannot hide unlabelled)
    assert [block.name for block in README_BLOCKS if block.language not in KNOWN] == []
    # the blocks the README marks not run are exactly those listed here, with the same reasons
    marked = {block.text.splitlines()[0]: block.not_run for block in README_BLOCKS if block.not_run}
    assert marked == NOT_RUN
    assert all(block.language in RUN for block in README_BLOCKS if block.not_run)


def test_the_readme_has_runnable_blocks() -> None:
    run = [block for block in README_BLOCKS if block.language in RUN and not block.not_run]
    assert len([block for block in run if block.language == "python"]) >= 1
    assert len(run) >= 6


def test_the_stack_prints_the_ready_block_the_readme_describes(session: Session) -> None:
    # the README's Quick start: the URL, the MCP endpoint, the console, the token and its file, how to stop
    printed = (session.logs / "stack.log").read_text()
    for line in ("Workset is ready on http://127.0.0.1:8000", "MCP endpoint   http://127.0.0.1:8000/mcp",
                 "Console        http://127.0.0.1:8000/console", "(saved in .workset/admin-token)", "Stop           Ctrl-C"):
        assert line in printed


@pytest.mark.parametrize("block", [block for block in README_BLOCKS if block.language in RUN],
                         ids=lambda block: block.name)
def test_block_runs_as_printed(session: Session, block: Block) -> None:
    if block.not_run:
        pytest.skip(f"not run: {block.not_run}")
    if session.broken:
        pytest.fail(f"an earlier block broke the session: {session.broken}")
    if block.language == "python":
        saved = re.match(r"^# (\S+\.py)\b", block.text)
        if saved:
            (session.folder / saved.group(1)).write_text(block.text)
            return
        _check(session, block, f"python3 - <<'README_PYTHON'\n{block.text}README_PYTHON\n", "")
    elif block.language == "bash":
        _check(session, block, block.text, "")
    else:
        for command, printed in commands(block.text):
            _check(session, block, command + "\n", printed)


def _check(session: Session, block: Block, script: str, printed: str) -> None:
    ok, out, err = session.run(script)
    where = f"{block.name} failed:\n{script}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert ok, where
    assert not ERROR.search(out), where
    failed = [status for status in re.findall(r"^::http (\d{3})$", err, re.MULTILINE) if int(status) >= 400]
    assert not failed, f"{where}\n--- HTTP statuses {failed}"
    missing = keys(printed) - keys(out)
    assert not missing, f"{where}\n--- the README shows keys the answer lacks: {sorted(missing)}"
    # a printed line that is neither JSON nor cut short (`...`) is printed as shown
    shown = [line for line in printed.splitlines() if line and "..." not in line and not line.startswith(("{", " "))]
    lacking = [line for line in shown if line not in out.splitlines()]
    assert not lacking, f"{where}\n--- the README shows lines the answer lacks: {lacking}"
