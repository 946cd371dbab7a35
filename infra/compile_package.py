"""Ship bytecode in the deployment package: `python infra/compile_package.py OUT_DIR` (after
`chalice package`, from infra/build.sh).

Lambda unpacks the package on a read-only file system, so without .pyc in it every cold start
compiles each module it imports from source: measured on this package, `import app` took 0.76 s
without bytecode and 0.26 s with it (BENCHMARKS.md, "Cold start"). This step:

- drops every `__pycache__` entry `chalice package` copied from a working tree (timestamp .pyc
  whose source times the zip no longer keeps: never used, only carried);
- runs the package's own code the way Lambda does (`-I -S -B`, nothing but the package and the
  standard library on sys.path, the stage's environment from sam.json): `import app`, then every
  module app.py and chalicelib/ import anywhere, even inside a function;
- compiles each module that run loaded from the package to unchecked-hash .pyc (PEP 552: used
  without looking at the source, which never changes in a deployed package) and adds them to the
  zip. Modules nothing imports stay source only, so the package grows by what a cold start reads.

The .pyc are this interpreter's, so it must be the runtime's own (Python X.Y for the template's
`pythonX.Y`): infra/build.sh runs this with the interpreter infra/lambda_runtime.py finds, and it
refuses to run under any other.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import py_compile
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# Run inside the unzipped package: argv is the package folder and the modules to import.
PROBE = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
import app  # what Lambda's handler string (app.app) imports
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
print(json.dumps(sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})))
"""
PYCACHE = "__pycache__/"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # what chalice writes: the zip says nothing about when it was built


def imports(paths: list[Path]) -> set[str]:
    """Top-level modules the code imports anywhere (module level or inside a function), except
    the standard library, its own packages and imports made only for the type checker."""
    names: set[str] = set()
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                       for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__", "app", "chalicelib"}


def own_modules(root: Path) -> list[str]:
    """Every module of chalicelib/ in the package, by import name."""
    return sorted(".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
                  for path in (root / "chalicelib").rglob("*.py"))


def loaded_sources(root: Path, environment: dict[str, str], python: str = sys.executable) -> list[Path]:
    """The package's .py files that importing app and everything its code imports loads (under
    `python`: the runtime's interpreter, as the package's compiled wheels are that Python's)."""
    code = [root / "app.py", *(root / "chalicelib").rglob("*.py")]
    names = [*own_modules(root), *sorted(imports(code))]
    result = subprocess.run([python, "-I", "-S", "-B", "-c", PROBE, str(root), json.dumps(names)],
                            cwd=root, env=environment, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"importing the package's code failed:\n{result.stderr[-4000:]}")
    files = [Path(name) for name in json.loads(result.stdout.splitlines()[-1])]
    return [path for path in files if path.suffix == ".py" and path.is_relative_to(root)]


def stage_environment(out: Path) -> dict[str, str]:
    """The API function's environment from the built template, as Lambda sets it."""
    template = json.loads((out / "sam.json").read_text())
    variables = template["Resources"]["APIHandler"]["Properties"]["Environment"]["Variables"]
    # the template sets the stage's names from its Stage parameter: as infra/build.sh packaged it
    variables = resolved_variables(variables, os.environ.get("WORKSET_STAGE", "dev"))
    return {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            "OPENBLAS_NUM_THREADS": "1", **variables}


def resolved_variables(variables: dict[str, object], stage: str) -> dict[str, str]:
    """A function's environment from the template, its parameters at their defaults for `stage`."""
    values = {"Stage": stage, "HistoryRetentionDays": "400", "MaxListensPerAccount": "10"}
    return {name: _resolved(value, values) for name, value in variables.items()}


def _resolved(value: object, values: dict[str, str]) -> str:
    """A template value (a string, a Ref to a parameter, an Fn::Sub over parameters) as a string."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return values[value["Ref"]]
    if isinstance(value, dict) and set(value) == {"Fn::Sub"}:
        return re.sub(r"\$\{(\w+)\}", lambda match: values[match.group(1)], value["Fn::Sub"])
    return str(value)


def template_runtime(out: Path) -> str:
    """The Runtime of the built template's API function (e.g. python3.13)."""
    template = json.loads((out / "sam.json").read_text())
    return str(template["Resources"]["APIHandler"]["Properties"]["Runtime"])


def compile_package(out: Path) -> tuple[int, int]:
    """Rewrite OUT/deployment.zip with bytecode for what a cold start loads; (stale entries
    dropped, .pyc added)."""
    archive_path = out / "deployment.zip"
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch).resolve()
        with zipfile.ZipFile(archive_path) as archive:
            kept = [info for info in archive.infolist() if PYCACHE not in info.filename]
            dropped = len(archive.infolist()) - len(kept)
            archive.extractall(root, members=kept)
        compiled = [_compile(source) for source in loaded_sources(root, stage_environment(out))]
        rewritten = archive_path.with_suffix(".tmp")
        with zipfile.ZipFile(archive_path) as source, \
                zipfile.ZipFile(rewritten, "w", compression=zipfile.ZIP_DEFLATED) as target:
            for info in kept:
                target.writestr(info, source.read(info))
            for pyc in compiled:
                entry = zipfile.ZipInfo(pyc.relative_to(root).as_posix(), ZIP_TIME)
                entry.external_attr = 0o644 << 16
                target.writestr(entry, pyc.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
        rewritten.replace(archive_path)
    return dropped, len(compiled)


def _compile(source: Path) -> Path:
    cached = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(source), cfile=str(cached), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return cached


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python infra/compile_package.py OUT_DIR (holding deployment.zip and sam.json)")
    runtime, running = template_runtime(Path(sys.argv[1])), f"python{sys.version_info.major}.{sys.version_info.minor}"
    if runtime != running:
        raise SystemExit(f"the package runs on {runtime}: compile its bytecode with that Python, not {running}")
    stale, added = compile_package(Path(sys.argv[1]))
    print(f"deployment.zip: {stale} stale __pycache__ entries dropped, bytecode added for {added} modules")
