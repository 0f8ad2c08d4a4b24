"""The built wheel, installed in a clean virtual environment, adds one import name: ``neardup``.

The environment gets the wheel and nothing of the checkout: the dependencies come from the
development environment's site-packages through a path entry (its own ``.pth`` files, among
them the editable install of the checkout, are not run for such an entry), and every command
runs outside the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_proxy_hitscan_compiled import compiled
from tests.test_proxy_support import free_port

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(ROOT)], check=True, cwd=out, timeout=300)
    (built,) = out.glob("neardup-*.whl")
    return built


@pytest.fixture(scope="module")
def clean_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("venv")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "neardup-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n",
                                                              encoding="utf-8")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, cwd=home, timeout=300)
    yield venv


def _run(venv: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("NEARDUP_", "PYTHON"))}
    environment.update(env)
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], capture_output=True, text=True,
                          cwd=cwd, env=environment, timeout=300)


def test_the_wheel_holds_one_top_level_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(next(n for n in names if n.endswith(".dist-info/top_level.txt")))
    assert {name.split("/")[0] for name in names} == {"neardup", "-".join(wheel.name.split("-")[:2]) + ".dist-info"}
    assert top_level.decode().split() == ["neardup"]
    for package in ("fingerprint", "indexer", "proxy"):
        assert f"neardup/{package}/__init__.py" in names
    assert "neardup/proxy/handlers/static/playground.html" in names


def test_the_wheel_holds_the_compiled_parts(wheel: Path) -> None:
    compiled()   # built where cargo is (a skip without it, a failure under CI)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "neardup/proxy/transport/_hitscan.abi3.so" in names
    assert "neardup/proxy/grouping/_compiled.abi3.so" in names


def test_the_wheel_metadata_names_the_opensearch_extra_and_both_elasticsearch_majors(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA")))
    fields = [line.split(": ", 1) for line in metadata.decode().splitlines() if ": " in line]
    requires = [value for key, value in fields if key == "Requires-Dist"]
    assert ("Provides-Extra", "opensearch") in [tuple(field) for field in fields]
    (elasticsearch,) = [value for value in requires if value.startswith("elasticsearch")
                        and not value.startswith("elasticsearch-")]
    assert ">=8.12" in elasticsearch and "<10" in elasticsearch and "extra" not in elasticsearch
    assert any(value.startswith("opensearch-py") and 'extra == "opensearch"' in value for value in requires)


def test_the_installed_package_is_the_wheel_and_only_neardup(clean_env: Path, tmp_path: Path) -> None:
    script = ("import json, sys, neardup, neardup.fingerprint as f; "
              "fp = f.Fingerprinter(f.FingerprintParams()).fingerprint('one short story about the wheel'); "
              "print(json.dumps({'file': neardup.__file__, 'slots': len(fp.signature), "
              "'others': [m for m in ('fingerprint', 'indexer', 'proxy') "
              "if __import__('importlib.util').util.find_spec(m)]}))")
    out = _run(clean_env, "python", "-c", script, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert Path(found["file"]).resolve().is_relative_to(clean_env.resolve())
    assert found["slots"] == 84
    assert found["others"] == []


def test_the_console_script_runs_from_the_wheel(clean_env: Path, tmp_path: Path) -> None:
    out = _run(clean_env, "neardup", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for command in ("index", "load", "cluster", "copies", "proxy", "compare"):
        assert command in out.stdout


def test_the_proxy_and_its_playground_serve_from_the_wheel(clean_env: Path, tmp_path: Path, es_url: str) -> None:
    port = free_port()
    proxy = subprocess.Popen(
        [str(clean_env / "bin" / "neardup"), "proxy", "--port", str(port), "--playground"], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")},
             "NEARDUP_UPSTREAM__URLS": json.dumps([es_url])})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_cluster/health", timeout=5) as answer:
                    health = json.loads(answer.read())
                break
            except OSError:
                assert proxy.poll() is None, proxy.stdout.read() if proxy.stdout else ""
                assert time.monotonic() < deadline, "the proxy did not answer within 60 s"
                time.sleep(0.2)
        assert health["status"] in ("green", "yellow") and "cluster_name" in health
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_neardup/", timeout=5) as answer:
            assert answer.status == 200 and b"<html" in answer.read().lower()
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)
