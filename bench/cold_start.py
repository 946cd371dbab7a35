"""Cold start: what `import app` costs next to its floor, and what a cold instance loads on its
first requests.

    python bench/cold_start.py [--rounds 9] [--instances 3] [--tools PATH] [--package [PYTHON=]DIR ...]

* Import. Fresh `python -c` processes, alternating (same run, the order flipped each round)
  between the baseline `import chalice, boto3, pynamodb.models` (what any Chalice app on
  DynamoDB pays) and `import app`. Each process times its own import, wall clock and CPU, so
  interpreter start-up, equal for both, is left out; CPU time is the steadier figure on a
  shared machine. Medians and minimums; the ratio is what issue 10 sets (<= 1.5x). Three
  bytecode modes, since compiling source is a large part of an import: this environment as
  it is, every module from a warm .pyc cache, and nothing compiled ahead (every module compiled
  from source, as on a read-only file system without shipped .pyc). Then where `import app`'s
  time goes (-X importtime self time by top-level package).
* Built packages (`--package`, repeatable): each unzipped deployment package imported as Lambda
  does, by the interpreter given with it (PYTHON=DIR; this one without), the packages' processes
  interleaved with each other (the order flipped each round), and each package's medians beside
  the first's: the same package built for two runtimes (bench/lambda_runtime.py) compares them.
* First requests. A fresh process is a cold instance: it imports app, sets up in-process moto
  with a toolbox whose vectors are already stored (as publishing leaves them), and serves
  tools/list, promote, a call of the promoted tool, demote, find_tool and a console page
  through chalice.test.Client. Each step reports its time, the heavy packages it imported and
  the model weights it read. tests/test_cold_start.py runs the same instance and holds the heavy
  packages off every step before find_tool.

This module imports only the standard library at the top: `cold_instance` runs inside the
measured process, where anything imported before `import app` would hide what app costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
METATOOL = Path("/work/shared/bench/metatool/tools.json")
HEAVY = ("numpy", "jinja2", "tokenizers", "wordllama", "mcp_types")  # packages no plain request needs
MODEL_PACKAGES = {"all_minilm_l6_v2": "all-MiniLM-L6-v2 weights", "wordllama": "wordllama weights"}
ENV = {  # the fake AWS the tests use (tests/conftest.py); the app reads its settings at import
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "WORKSET_STAGE": "test", "WORKSET_TABLE_PREFIX": "workset-test", "WORKSET_PUBLIC_URL": "http://127.0.0.1:8000",
}
BASELINE = "import chalice, boto3, pynamodb.models"
TIMED_IMPORT = ("import time; t, c = time.perf_counter(), time.process_time(); {}; "
                "print(time.perf_counter() - t, time.process_time() - c)")
LEGACY = "2025-11-25"
SMALL_TOOLBOX = [
    {"vendor": "unleashed", "name": "list-sales-orders", "description": "List sales orders in Unleashed."},
    {"vendor": "stripe", "name": "list-invoices", "description": "List Stripe invoices for a customer."},
    {"vendor": "notion", "name": "create-page", "description": "Create a page in a Notion workspace."},
]


def environment() -> dict[str, str]:
    """This process's environment with the fake AWS and no real endpoint."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_ENDPOINT_URL")}
    return {**env, **ENV}


def run_cold_instance(tools: list[dict[str, Any]], query: str) -> dict[str, Any]:
    """Serve the first requests in a fresh process; answer its report. Each tool is `vendor`,
    `name`, `description` and optionally `vector` (hex) with `vector_version` (stored as is)."""
    command = [sys.executable, "-c", "from bench.cold_start import cold_instance; cold_instance()"]
    done = subprocess.run(command, input=json.dumps({"tools": tools, "query": query}), capture_output=True,
                          text=True, cwd=ROOT, env=environment(), timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the cold instance failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def cold_instance() -> None:
    """The measured process (see run_cold_instance): reads its toolbox from stdin, prints a JSON
    report as its last line."""
    loaded = _watch_opens()
    start = time.perf_counter()
    import app  # what a Lambda cold start runs first

    report: dict[str, Any] = {"import_ms": (time.perf_counter() - start) * 1000, "import_heavy": _heavy(set())}
    config = json.loads(sys.stdin.read())

    from chalice.test import Client
    from moto import mock_aws

    with mock_aws(), _vendor() as vendor_url, Client(app.app, project_dir=str(ROOT / "bench")) as client:
        key, first = _setup(config["tools"], vendor_url)
        ref = {"vendor": first["vendor"], "name": first["name"]}
        steps = [
            ("tools/list", lambda: _mcp(client, key, "tools/list", {})),
            ("promote", lambda: _mcp(client, key, "tools/call", {"name": "promote", "arguments": ref})),
            ("promoted call", lambda: _mcp(client, key, "tools/call", {"name": f"{ref['vendor']}__{ref['name']}",
                                                                       "arguments": {}})),
            ("demote", lambda: _mcp(client, key, "tools/call", {"name": "demote", "arguments": ref})),
            ("find_tool", lambda: _mcp(client, key, "tools/call",
                                       {"name": "find_tool", "arguments": {"query": config["query"]}})),
            ("console page", lambda: _page(client, "/console/sign-in")),
        ]
        report["steps"] = []
        for name, step in steps:
            modules, opened = set(sys.modules), len(loaded)
            start = time.perf_counter()
            result = step()
            elapsed = (time.perf_counter() - start) * 1000
            report["steps"].append({"step": name, "ms": elapsed, "heavy": _heavy(modules),
                                    "weights": sorted(set(loaded[opened:])), "result": result})
    print(json.dumps(report))


def _watch_opens() -> list[str]:
    """Names of the model packages whose files this process opens from now on (an audit hook:
    the weights are read as files, never imported)."""
    import importlib.util

    roots = {}
    for package, label in MODEL_PACKAGES.items():
        spec = importlib.util.find_spec(package)  # locates, does not import
        for location in (spec.submodule_search_locations or []) if spec else []:
            roots[str(Path(location).resolve())] = label
    opened: list[str] = []

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and isinstance(args[0], str | Path):
            path = str(Path(args[0]).resolve())
            opened.extend(label for root, label in roots.items() if path.startswith(root + os.sep))

    sys.addaudithook(hook)
    return opened


def _heavy(before: set[str]) -> list[str]:
    """The heavy packages imported since `before` was taken."""
    return sorted({name.partition(".")[0] for name in set(sys.modules) - before} & set(HEAVY))


def _setup(tools: list[dict[str, Any]], vendor_url: str) -> tuple[str, dict[str, Any]]:
    """Tables, an account, an agent and the toolbox, written through the store as a publish on
    another instance leaves them (publishing runs the model: it must not run here)."""
    from chalicelib.base.clock import utcnow
    from chalicelib.base.config import settings
    from chalicelib.identity import accounts
    from chalicelib.store import queues, vault
    from chalicelib.store import tools as tool_store
    from chalicelib.store.tables import create_all
    from chalicelib.tools import definitions

    create_all()
    vault.ensure_key()
    queues.ensure(settings().sweep_queue)
    queues.ensure(settings().webhook_queue)
    now = utcnow()
    account, _ = accounts.create_account("bench", now)
    agent = accounts.create_agent(account.account_id, {"name": "bench"}, now)
    for tool in tools:
        spec = definitions.parse_spec({
            "vendor": tool["vendor"], "name": tool["name"], "description": tool["description"],
            "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}}},
            "annotations": {"readOnlyHint": True}, "request": {"method": "GET", "url": f"{vendor_url}/orders"},
        })
        vector = bytes.fromhex(tool["vector"]) if tool.get("vector") else None
        new = tool_store.NewVersion(spec.vendor, spec.name, spec.model_dump(mode="json", exclude_none=True), 0,
                                    vector, tool.get("vector_version"))
        tool_store.put_version(account.account_id, new, accounts.ADMIN, now)
    return agent.api_key, tools[0]


def _mcp(client: Any, key: str, method: str, params: dict[str, Any]) -> str:
    """One JSON-RPC request to /mcp; answers "ok" or what went wrong."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}", "MCP-Protocol-Version": LEGACY}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    response = client.http.post("/mcp", headers=headers, body=body)
    text = response.body.decode()
    if response.headers.get("Content-Type", "").startswith("text/event-stream"):
        text = [line for line in text.splitlines() if line.startswith("data: ")][-1][len("data: "):]
    answer = json.loads(text)
    if "result" not in answer or answer["result"].get("isError"):
        return f"HTTP {response.status_code}: {text[:300]}"
    return "ok"


def _page(client: Any, path: str) -> str:
    """One console page; answers "ok" or its status."""
    response = client.http.get(path)
    return "ok" if response.status_code == 200 else f"HTTP {response.status_code}"


class _vendor:
    """A local vendor answering every request with one order."""

    def __enter__(self) -> str:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                payload = b'{"orders": [{"id": 1}]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def import_seconds(statement: str, bytecode: dict[str, str], package: Path | None = None,
                   python: str = sys.executable) -> tuple[float, float]:
    """Wall and CPU seconds one fresh process spends on `statement` (`bytecode`: environment
    overrides). Given `package` (an unzipped deployment package), the process is isolated (`-I
    -S`: no site-packages, no PYTHON* variables), writes no bytecode (`-B`) and imports only from
    the package, as Lambda does: the package's modules from the bytecode it ships (compiled on
    every import where it ships none), the standard library's from its own .pyc. `python`: the interpreter (the package's runtime's)."""
    env = {**environment(), **bytecode}
    env = {name: value for name, value in env.items() if value}  # "" unsets
    command = [python, "-c", TIMED_IMPORT.format(statement)]
    if package is not None:
        command = [python, "-I", "-S", "-B", "-c", f"import sys; sys.path.insert(0, {str(package)!r}); "
                   + TIMED_IMPORT.format(statement)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=package or ROOT, env=env, timeout=120,
                          check=True)
    wall, cpu = done.stdout.split()[-2:]
    return float(wall), float(cpu)


def import_figures(rounds: int, bytecode: dict[str, str],
                   package: Path | None = None) -> dict[str, list[tuple[float, float]]]:
    """Baseline and app import times (wall, CPU), alternating, the order flipped every round."""
    order = [("baseline", BASELINE), ("app", "import app")]
    for _, statement in order:
        import_seconds(statement, bytecode, package)  # fills a bytecode cache, when there is one; not counted
    samples: dict[str, list[tuple[float, float]]] = {"baseline": [], "app": []}
    for i in range(rounds):
        for label, statement in order if i % 2 == 0 else reversed(order):
            samples[label].append(import_seconds(statement, bytecode, package))
    return samples


def package_figures(rounds: int, packages: list[tuple[str, Path]]) -> list[dict[str, list[tuple[float, float]]]]:
    """Baseline and app import times (wall, CPU) of each (interpreter, unzipped package), each
    package's processes alternating baseline and app, the packages interleaved, both orders
    flipped every round."""
    order = [("baseline", BASELINE), ("app", "import app")]
    samples: list[dict[str, list[tuple[float, float]]]] = [{"baseline": [], "app": []} for _ in packages]
    for python, package in packages:  # reads each package's files once (the page cache); not counted
        for _, statement in order:
            import_seconds(statement, {}, package, python)
    for i in range(rounds):
        sides = list(enumerate(packages)) if i % 2 == 0 else list(reversed(list(enumerate(packages))))
        for side, (python, package) in sides:
            for label, statement in order if i % 2 == 0 else reversed(order):
                samples[side][label].append(import_seconds(statement, {}, package, python))
    return samples


def parse_package(text: str) -> tuple[str, Path]:
    """`PYTHON=DIR` or `DIR` (this interpreter) -> (interpreter, folder)."""
    python, _, folder = text.rpartition("=")
    return python or sys.executable, Path(folder)


def python_version(python: str) -> str:
    done = subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def import_breakdown(top: int, bytecode: dict[str, str]) -> list[tuple[str, float]]:
    """Self time of `import app` by top-level package (-X importtime, one process), largest first."""
    env = {name: value for name, value in {**environment(), **bytecode}.items() if value}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import app"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120, check=True)
    totals: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line[len("import time:"):].split("|")
        totals[name.strip().partition(".")[0]] += int(self_us) / 1000
    return sorted(totals.items(), key=lambda item: -item[1])[:top]


def stored_toolbox(path: Path) -> list[dict[str, Any]]:
    """The bench toolbox with each tool's vector computed here, as publishing stores it."""
    from chalicelib.search.documents import VECTOR_VERSION, document_vector

    tools = json.loads(path.read_text(encoding="utf-8")) if path.exists() else SMALL_TOOLBOX
    return [{"vendor": t["vendor"], "name": t["name"], "description": t["description"],
             "vector": document_vector(t["vendor"], t["name"], t["description"]).hex(),
             "vector_version": VECTOR_VERSION} for t in tools]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9, help="processes per side and bytecode mode")
    parser.add_argument("--instances", type=int, default=3, help="cold instances for the first-request figures")
    parser.add_argument("--tools", type=Path, default=METATOOL, help="toolbox JSON (vendor, name, description)")
    parser.add_argument("--query", default="convert my question into an SQL query")
    parser.add_argument("--package", type=parse_package, action="append", default=[], metavar="[PYTHON=]DIR",
                        help="also time an unzipped deployment package (infra/build.sh dev OUT; unzip "
                        "OUT/deployment.zip -d DIR) with its own bytecode, as on Lambda, under PYTHON (its "
                        "runtime's interpreter; default this one); repeat it to compare packages side by side")
    parser.add_argument("--packages-only", action="store_true", help="time only the --package imports")
    args = parser.parse_args()

    as_configured = "PYTHONDONTWRITEBYTECODE=1" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode written"
    print(f"Import: `{BASELINE}` (baseline) vs `import app`, {args.rounds} fresh processes per side and mode, "
          f"alternating; time inside each process, wall and CPU; target app <= 1.5x baseline "
          f"({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}):")
    with tempfile.TemporaryDirectory() as cached, tempfile.TemporaryDirectory() as empty:
        modes = {
            # this environment as it is (here: libraries from their installed .pyc, the app's own
            # modules compiled on every import when PYTHONDONTWRITEBYTECODE is set)
            f"as configured ({as_configured})": {},
            # every module from a warm .pyc cache: the work an import does once compiled
            "bytecode cached": {"PYTHONPYCACHEPREFIX": cached, "PYTHONDONTWRITEBYTECODE": ""},
            # nothing compiled ahead: a package without .pyc on a read-only file system
            "no bytecode": {"PYTHONPYCACHEPREFIX": empty, "PYTHONDONTWRITEBYTECODE": "1"},
        }
        runs = [] if args.packages_only else [(mode, import_figures(args.rounds, bytecode)) for mode, bytecode in modes.items()]
        if args.package:
            by_package = package_figures(args.rounds, args.package)
            for (python, package), samples in zip(args.package, by_package, strict=True):
                label = (f"the deployment package in {package} under python {python_version(python)} "
                         "(its own bytecode, as infra/build.sh ships it; packages interleaved)")
                runs.append((label, samples))
        for mode, samples in runs:
            print(f"  {mode}:")
            for kind, index in (("wall", 0), ("CPU", 1)):
                base = [sample[index] * 1000 for sample in samples["baseline"]]
                app = [sample[index] * 1000 for sample in samples["app"]]
                print(f"    {kind:<4} baseline median {statistics.median(base):7.1f} ms (min {min(base):6.1f})   "
                      f"app median {statistics.median(app):7.1f} ms (min {min(app):6.1f})   "
                      f"ratio {statistics.median(app) / statistics.median(base):.2f}x (mins {min(app) / min(base):.2f}x)")
        if len(args.package) > 1:
            print(f"  `import app`, each package's median over the first's ({args.package[0][1]}):")
            for (_, package), samples in list(zip(args.package, by_package, strict=True))[1:]:
                wall, cpu = (statistics.median(s[k] for s in samples["app"])
                             / statistics.median(s[k] for s in by_package[0]["app"]) for k in (0, 1))
                print(f"    {package}: wall {wall:.2f}x   CPU {cpu:.2f}x")
        if args.packages_only:
            return
        print("Self time of `import app` by top-level package (one -X importtime run, bytecode cached):")
        for package, ms in import_breakdown(12, modes["bytecode cached"]):
            print(f"  {package:<28} {ms:7.1f} ms")

    tools = stored_toolbox(args.tools)
    reports = [run_cold_instance(tools, args.query) for _ in range(args.instances)]
    print(f"First requests on a cold instance, as configured ({len(tools)} tools, vectors stored; median of "
          f"{args.instances} fresh processes; `import app` in them "
          f"{statistics.median(r['import_ms'] for r in reports):.0f} ms, heavy: {reports[0]['import_heavy'] or 'none'}):")
    for i, step in enumerate(reports[0]["steps"]):
        ms = statistics.median(r["steps"][i]["ms"] for r in reports)
        loads = ", ".join(step["heavy"] + step["weights"]) or "nothing heavy"
        print(f"  {step['step']:<14} {ms:8.1f} ms   {step['result']:<4} loads: {loads}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
