"""The Lambda runtime and architecture (issue 27, goal 7): infra/lambda_runtime.py names them once,
and what `chalice package` makes through it (the `packaged` fixture, as infra/build.sh runs it)
says that runtime on every function and vendors wheels that run there. The built package itself,
under the runtime's own interpreter: tests/test_package.py.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.tags import parse_tag

from infra import lambda_runtime
from tests.infra import (
    CHALICE_FUNCTIONS,
    ROOT,
    chalice_config,
    packaged_fixture,  # noqa: F401 - fixture `packaged`
    runtime_tags,
    wheel_tags,
)


def _functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: resource["Properties"] for name, resource in template["Resources"].items()
            if resource["Type"] == "AWS::Serverless::Function"}


def test_every_function_runs_the_chosen_runtime_and_architecture(packaged: dict[str, Any]) -> None:
    # GIVEN the packaged template, and the runtime and architecture infra/lambda_runtime.py names
    functions = _functions(packaged["template"])
    # WHEN each function's Runtime and Architectures are read
    seen = {name: (props["Runtime"], tuple(props["Architectures"])) for name, props in functions.items()}
    # THEN each of Chalice's functions says exactly those (nothing left at the venv's python3.11)
    assert set(CHALICE_FUNCTIONS) <= set(seen)
    assert set(seen.values()) == {(lambda_runtime.RUNTIME, (lambda_runtime.architecture(),))}, seen


def test_every_vendored_wheel_runs_on_that_runtime(packaged: dict[str, Any]) -> None:
    # GIVEN deployment.zip's distributions and the template's runtime and architecture
    props = _functions(packaged["template"])["APIHandler"]
    accepted = runtime_tags(props["Runtime"], props["Architectures"][0])
    with zipfile.ZipFile(packaged["dir"] / "deployment.zip") as archive:
        tags = wheel_tags(archive.namelist(), archive.read)
    # WHEN each wheel's tags are matched against what that runtime loads
    wrong = {dist: sorted(map(str, dist_tags)) for dist, dist_tags in tags.items() if not dist_tags & accepted}
    # THEN every one runs there (the compiled ones are that Python's and that machine's)
    assert len(tags) > 20 and not wrong, wrong
    compiled = {dist for dist, dist_tags in tags.items() if any(tag.abi != "none" for tag in dist_tags)}
    assert {"pydantic_core", "numpy", "google_re2"} <= {dist.split("-")[0] for dist in compiled}


@pytest.mark.parametrize(("tag", "runs"), [
    ("cp313-cp313-manylinux_2_17_x86_64", True),
    ("cp313-cp313-manylinux_2_34_x86_64", True),
    ("cp39-abi3-manylinux_2_17_x86_64", True),
    ("py3-none-any", True),
    ("cp311-cp311-manylinux_2_17_x86_64", False),  # another Python's ABI
    ("cp314-cp314-manylinux_2_17_x86_64", False),
    ("cp313-cp313-manylinux_2_35_x86_64", False),  # newer glibc than Amazon Linux 2023's
    ("cp313-cp313-manylinux_2_17_aarch64", False),  # another machine
    ("cp313-cp313-macosx_11_0_x86_64", False),
])
def test_the_wheel_check_tells_what_runs_on_python313_x86_64(tag: str, runs: bool) -> None:
    # GIVEN the tags python3.13 on x86_64 loads; WHEN one wheel tag is looked up; THEN as Lambda would
    assert bool(set(parse_tag(tag)) & runtime_tags("python3.13", "x86_64")) is runs


def test_python311_is_amazon_linux_2s_glibc() -> None:
    # GIVEN python3.11 (Amazon Linux 2, glibc 2.26)
    accepted = runtime_tags("python3.11", "x86_64")
    # THEN a manylinux_2_28 wheel does not run there, a manylinux_2_24 one does
    assert not set(parse_tag("cp311-cp311-manylinux_2_28_x86_64")) & accepted
    assert set(parse_tag("cp311-cp311-manylinux_2_24_x86_64")) & accepted


def test_build_sh_picks_wheels_for_the_runtime_and_architecture() -> None:
    # GIVEN infra/build.sh and the pip platforms infra/lambda_runtime.py gives it
    script = (ROOT / "infra" / "build.sh").read_text()
    platforms = lambda_runtime.pip_platforms(lambda_runtime.RUNTIME, lambda_runtime.architecture())
    # THEN build.sh takes its runtime, platforms and interpreter from there (never the venv's own Python)
    assert "infra/lambda_runtime.py show" in script and "infra/lambda_runtime.py pip-platforms" in script
    assert "infra/lambda_runtime.py package" in script and ".venv/bin/chalice package" not in script
    assert '"$lambda_python" infra/compile_package.py' in script
    assert "sys.version_info" not in script
    # and the platforms are the runtime's machine up to its glibc, nothing newer
    machine = lambda_runtime.MACHINE[lambda_runtime.architecture()]
    assert all(platform.endswith("_" + machine) for platform in platforms)
    assert f"manylinux_2_{lambda_runtime.GLIBC[lambda_runtime.RUNTIME][1]}_{machine}" in platforms
    assert f"manylinux_2_{lambda_runtime.GLIBC[lambda_runtime.RUNTIME][1] + 1}_{machine}" not in platforms


def test_the_architecture_is_chalices_own_setting() -> None:
    # GIVEN .chalice/config.json; THEN it names the architecture, and no stage overrides it
    # (build.sh reads the top level: a stage of its own would get another's wheels)
    config = chalice_config()
    assert lambda_runtime.architecture() == config["lambda_architecture"] == "x86_64"
    assert not any("lambda_architecture" in stage for stage in config["stages"].values())
    assert not any("lambda_architecture" in fn for fn in config.get("lambda_functions", {}).values())


def test_an_unknown_runtime_or_architecture_stops_the_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a runtime override Workset cannot build for
    monkeypatch.setenv(lambda_runtime.OVERRIDE, "python3.9")
    # WHEN the build asks for the runtime; THEN it stops with exit 3 and says what it can build for
    assert lambda_runtime.main(["show"]) == 3
    assert "python3.11, python3.12, python3.13" in capsys.readouterr().err
    # GIVEN an architecture Lambda does not have
    monkeypatch.delenv(lambda_runtime.OVERRIDE)
    (tmp_path / ".chalice").mkdir()
    (tmp_path / ".chalice" / "config.json").write_text(json.dumps({"lambda_architecture": "sparc"}))
    monkeypatch.setattr(lambda_runtime, "ROOT", tmp_path)
    with pytest.raises(lambda_runtime.RuntimeProblem, match="sparc"):
        lambda_runtime.architecture()


def test_without_the_runtimes_interpreter_the_build_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    # GIVEN no python3.13 anywhere it looks (PATH, pyenv, WORKSET_LAMBDA_PYTHON naming a 3.11)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(lambda_runtime.INTERPRETER, os.path.realpath(sys.executable))
    # WHEN the build looks for it; THEN it stops, naming what to install and the variable
    with pytest.raises(lambda_runtime.RuntimeProblem, match=r"pyenv install 3\.13.*WORKSET_LAMBDA_PYTHON"):
        lambda_runtime.interpreter("python3.13")
    # and given the variable naming an interpreter of that version, that one is taken
    monkeypatch.setenv(lambda_runtime.INTERPRETER, os.path.realpath(sys.executable))
    running = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert lambda_runtime.interpreter(running) == os.path.realpath(sys.executable)
