"""The Lambda runtime and architecture the stage's functions run, in one place, and packaging for
them (infra/build.sh calls each of these; the infra tests import the module):

    python infra/lambda_runtime.py show               RUNTIME ARCHITECTURE MACHINE, e.g. python3.13 x86_64 x86_64
    python infra/lambda_runtime.py pip-platforms      pip's --platform arguments for the runtime's wheels
    python infra/lambda_runtime.py interpreter        a local interpreter of the runtime's version (exit 3: none)
    python infra/lambda_runtime.py package ARGS...    `chalice package ARGS` for the runtime, from this venv

The runtime is RUNTIME (WORKSET_LAMBDA_RUNTIME overrides it for one build, as the runtime bench
does to build the same package for python3.11); the architecture is Chalice's own setting
`lambda_architecture` in .chalice/config.json. Why python3.13 on x86_64 (BENCHMARKS.md, "Lambda
runtime"): python3.14, Lambda's newest, has no wordllama 0.4.0.post1 or numpy 2.2.6 wheel; arm64
has no wordllama 0.4.0.post1 wheel at all.

Chalice takes the runtime from the Python that runs it, and the dev venv is python3.11: `package`
runs Chalice here (it imports app.py to find the routes, which any Python of ours does alike)
with two things told otherwise: the runtime the template names and the wheels are picked for
(`Config.lambda_python_version`), and the Python version pip downloads those wheels for (Chalice
passes `--abi cp313` alone, which pip matches against this interpreter's `cp311` tags: no wheel).
Bytecode cannot be made across versions, so infra/compile_package.py runs under `interpreter`.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

RUNTIME = "python3.13"
ROOT = Path(__file__).resolve().parent.parent
# Each runtime Workset can be built for, and the glibc of the Amazon Linux it runs on (wheels up
# to manylinux_<that>; python3.11 is Amazon Linux 2, 3.12 and later Amazon Linux 2023).
GLIBC = {"python3.11": (2, 26), "python3.12": (2, 34), "python3.13": (2, 34)}
MACHINE = {"x86_64": "x86_64", "arm64": "aarch64"}  # Lambda's architecture -> the wheels' machine tag
OVERRIDE = "WORKSET_LAMBDA_RUNTIME"
INTERPRETER = "WORKSET_LAMBDA_PYTHON"  # an interpreter of the runtime's version, when not found by name


class RuntimeProblem(Exception):
    """The build cannot go on for this runtime; the message says why and what to do."""


def runtime() -> str:
    """The runtime this build is for: RUNTIME, or WORKSET_LAMBDA_RUNTIME when set."""
    chosen = os.environ.get(OVERRIDE) or RUNTIME
    if chosen not in GLIBC:
        raise RuntimeProblem(f"{OVERRIDE}={chosen!r}: Workset builds for {', '.join(sorted(GLIBC))}")
    return chosen


def architecture() -> str:
    """Chalice's `lambda_architecture` in .chalice/config.json (top level; x86_64 when absent)."""
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    chosen = config.get("lambda_architecture", "x86_64")
    if chosen not in MACHINE:
        raise RuntimeProblem(f".chalice/config.json: lambda_architecture {chosen!r} is none of {sorted(MACHINE)}")
    return str(chosen)


def version(name: str) -> str:
    """python3.13 -> 3.13"""
    return name.removeprefix("python")


def pip_platforms(name: str, arch: str) -> list[str]:
    """The platform tags of wheels that run on the runtime: manylinux2014 and every manylinux_2_N
    up to its glibc (pip takes each --platform literally, as Chalice enumerates them)."""
    major, minor = GLIBC[name]
    machine = MACHINE[arch]
    return [f"manylinux2014_{machine}", *(f"manylinux_{major}_{m}_{machine}" for m in range(17, minor + 1))]


def interpreter(name: str) -> str:
    """A local interpreter of the runtime's Python version: WORKSET_LAMBDA_PYTHON, else
    `python3.X` on PATH, else pyenv's newest 3.X. RuntimeProblem when there is none."""
    wanted = version(name)
    candidates = [os.environ.get(INTERPRETER) or "", shutil.which(f"python{wanted}") or "",
                  *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{wanted}.*/bin/python{wanted}")),
                          key=_release, reverse=True)]
    for candidate in filter(None, candidates):
        if _reports(candidate) == wanted:
            return candidate
    raise RuntimeProblem(
        f"no python{wanted} here: the package's bytecode is made by, and its imports checked under, the runtime's "
        f"own interpreter. Install one (pyenv install {wanted}, or the distribution's python{wanted}) or name it in "
        f"{INTERPRETER}.")


def _release(path: str) -> tuple[int, ...]:
    """~/.pyenv/versions/3.13.10/bin/python3.13 -> (3, 13, 10): newest first, numerically."""
    found = re.search(r"/(\d+)\.(\d+)\.(\d+)/bin/", path)
    return tuple(int(part) for part in found.groups()) if found else ()


def _reports(path: str) -> str:
    """The X.Y an interpreter says it is ("" when it will not run)."""
    try:
        done = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def package(arguments: list[str]) -> int:
    """`chalice package ARGUMENTS` with the template's runtime and the wheels Chalice vendors
    from requirements.txt both for runtime() (see the module's docstring)."""
    import warnings

    from chalice import cli
    from chalice.config import Config
    from chalice.deploy import packager

    name = runtime()
    Config.lambda_python_version = property(lambda self: name)  # type: ignore[method-assign,assignment]
    execute = packager.PipRunner._execute

    def for_the_runtime(self: packager.PipRunner, command: str, args: list[str], *rest: object,
                        **named: object) -> tuple[int, bytes, bytes]:
        if command == "download" and "--abi" in args and "--python-version" not in args:
            args = ["--python-version", version(name), *args]
        return execute(self, command, args, *rest, **named)  # type: ignore[arg-type]

    packager.PipRunner._execute = for_the_runtime  # type: ignore[method-assign]
    # Chalice warns that this interpreter is not the runtime: that is the point here
    warnings.filterwarnings("ignore", message="You are currently running python")
    sys.argv = ["chalice", "package", *arguments]
    try:
        return int(cli.main() or 0)  # as .venv/bin/chalice runs it; click exits with Chalice's status
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "show" and not rest:
            print(runtime(), architecture(), MACHINE[architecture()])
        elif command == "pip-platforms" and not rest:
            print("\n".join(pip_platforms(runtime(), architecture())))
        elif command == "interpreter" and not rest:
            print(interpreter(runtime()))
        elif command == "package":
            return package(rest)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except RuntimeProblem as problem:
        print(f"infra/lambda_runtime.py: {problem}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
