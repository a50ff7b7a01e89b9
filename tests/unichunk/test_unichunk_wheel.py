"""The built distribution installs one import name, and a user's project beside it keeps its own modules.

A wheel is built from this checkout and installed (without its dependencies, which the running
interpreter's environment already has) into a fresh virtualenv that sees those dependencies through a
`.pth` file; then, in a folder holding the user's own `tasks.py`, `flows/`, `index.py` and `chunking/`, both
the user's modules and unichunk's subpackages import, each from where it belongs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")  # a copy: setuptools leaves build/ in the tree it builds
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    for name in listed:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(
        [*pip, "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("unichunk-*.whl")
    return built


def test_the_wheel_installs_the_one_import_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["unichunk"]
        entry_points = archive.read(top_level.replace("top_level.txt", "entry_points.txt")).decode()
    assert {n.split("/")[0] for n in names} == {
        "unichunk",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    for module in (
        "unichunk/flows/ingest.py",
        "unichunk/engine/batches.py",
        "unichunk/deployments/cli/main.py",
    ):
        assert module in names
    assert "unichunk/deployments/sample_corpus/" in "".join(names)
    assert "unichunk = unichunk.deployments.cli.main:app" in entry_points


def test_a_users_project_keeps_its_own_modules_beside_the_installed_wheel(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)  # what `pip install` of a pure wheel lays down
    # the dependencies: the running environment's site-packages, after the venv's own (so the wheel wins)
    (Path(site) / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    project = tmp_path / "project"
    (project / "flows").mkdir(parents=True)
    (project / "chunking").mkdir()
    (project / "tasks.py").write_text("WHO = 'user tasks'\n")
    (project / "index.py").write_text("WHO = 'user index'\n")
    (project / "flows" / "__init__.py").write_text("WHO = 'user flows'\n")
    (project / "chunking" / "__init__.py").write_text("WHO = 'user chunking'\n")
    code = (
        "import tasks, index, flows, chunking\n"
        "import unichunk.flows.ingest, unichunk.tasks.chunk, unichunk.index.run, unichunk.chunking\n"
        "from unichunk import Pipeline, Document, ChunkingService\n"
        "from unichunk.deployments.cli.main import app\n"
        "print(tasks.WHO, index.WHO, flows.WHO, chunking.WHO, sep='|')\n"
        "print(unichunk.flows.ingest.__file__)\n"
        "chunks = ChunkingService().chunk(Document(source_id='a.md', text='# T\\n\\nSome text.'))\n"
        "print(len(chunks))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [python, "-c", code], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "user tasks|user index|user flows|user chunking"
    assert Path(lines[1]).is_relative_to(site)
    assert int(lines[2]) >= 1
