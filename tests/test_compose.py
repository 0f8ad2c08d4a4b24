"""docker-compose.yml and the Dockerfile cannot run here (no Docker engine): check that they
parse, that every NEARDUP_* variable they set is a real configuration key with a valid value,
and that every neardup command they run is a real subcommand with valid options."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from neardup.cli import build_parser
from neardup.config import ENV_CONFIG_FILE, load_config

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES: dict[str, Any] = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
_DEFAULTED = re.compile(r"\$\{(\w+):?-([^}]*)\}")


def interpolate(value: str) -> str:
    """Compose's ``${NAME:-default}`` with nothing set in the environment."""
    return _DEFAULTED.sub(lambda match: match.group(2), value)


def environment(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {str(key): interpolate(str(value)) for key, value in raw.items()}


def neardup_services() -> dict[str, dict[str, Any]]:
    """Services built from this repository's Dockerfile."""
    return {name: service for name, service in SERVICES.items() if "build" in service}


def dockerfile_env() -> dict[str, str]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    env: dict[str, str] = {}
    for line in joined.splitlines():
        if line.startswith("ENV "):
            env.update(item.split("=", 1) for item in shlex.split(line[4:]))
    return env


def assert_real_configuration(variables: dict[str, str], where: str) -> None:
    neardup = {k: v for k, v in variables.items() if k.startswith("NEARDUP_")}
    not_keys = [k for k in neardup if "__" not in k and k != ENV_CONFIG_FILE]
    assert not not_keys, f"{where}: {not_keys} are not NEARDUP_<SECTION>__<KEY> variables and would be ignored"
    settings = {k: v for k, v in neardup.items() if k != ENV_CONFIG_FILE}
    load_config(environ=settings)  # raises ConfigError naming any unknown key or bad value


def test_compose_has_elasticsearch_proxy_and_a_one_shot_indexer():
    assert {"elasticsearch", "proxy", "indexer"} <= SERVICES.keys()
    assert SERVICES["indexer"].get("restart") == "no"
    assert SERVICES["proxy"]["command"][0] == "proxy"
    assert SERVICES["indexer"]["command"][0] == "index"


def test_elasticsearch_is_the_official_8_image_of_the_pinned_version_single_node_without_security():
    # the default version of the elasticsearch engine in scripts/es
    pinned = re.search(r"^\s*elasticsearch\)\n(?:.*\n)*?\s*VERSION=\$\{VERSION:-([0-9.]+)\}",
                       (ROOT / "scripts" / "es").read_text(), re.M)
    service = SERVICES["elasticsearch"]
    assert service["image"] == f"docker.elastic.co/elasticsearch/elasticsearch:{pinned.group(1)}"
    env = environment(service)
    assert env["discovery.type"] == "single-node"
    assert env["xpack.security.enabled"] == "false"


@pytest.mark.parametrize("name", sorted(neardup_services()))
def test_every_neardup_variable_of_a_service_is_a_real_key(name):
    assert_real_configuration(environment(SERVICES[name]), f"docker-compose.yml service {name}")


def test_every_neardup_variable_of_the_dockerfile_is_a_real_key():
    env = dockerfile_env()
    assert env[ENV_CONFIG_FILE] == "/etc/neardup/neardup.toml"
    assert "COPY config/neardup.toml /etc/neardup/neardup.toml" in DOCKERFILE
    assert_real_configuration(env, "Dockerfile")


@pytest.mark.parametrize("name", sorted(neardup_services()))
def test_service_command_is_a_real_subcommand_with_valid_options(name, capsys):
    command = [interpolate(str(part)) for part in SERVICES[name]["command"]]
    parser = build_parser()
    try:
        args = parser.parse_args(command)
    except SystemExit:
        pytest.fail(f"service {name}: `neardup {' '.join(command)}` is not a valid command:\n"
                    f"{capsys.readouterr().err}")
    assert args.command == command[0]
    assert callable(args.handler)


def test_proxy_listens_on_all_interfaces_on_the_published_port():
    proxy = SERVICES["proxy"]
    config = load_config(environ={k: v for k, v in environment(proxy).items() if "__" in k})
    assert config.proxy.host == "0.0.0.0"
    published = {int(mapping.rsplit(":", 1)[1]) for mapping in proxy["ports"]}
    assert config.proxy.port in published


@pytest.mark.parametrize("name", sorted(neardup_services()))
def test_neardup_services_reach_elasticsearch_by_service_name_after_it_is_healthy(name):
    service = SERVICES[name]
    config = load_config(environ={k: v for k, v in environment(service).items() if "__" in k})
    assert config.upstream.url_strings == ["http://elasticsearch:9200"]
    assert service["depends_on"]["elasticsearch"]["condition"] == "service_healthy"
    assert service["build"] == "."


def test_dockerfile_installs_every_package_of_the_distribution():
    import tomllib

    assert re.search(r"^FROM python:3\.11-slim$", DOCKERFILE, re.M)
    assert re.search(r"^RUN pip install .*\s\.(\s|$)", DOCKERFILE, re.M)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["neardup", "neardup.*"]
    # The sub-packages are links from neardup/ to the top-level folders: the image needs both.
    folders = ["neardup"] + [link.readlink().name for link in (ROOT / "neardup").iterdir() if link.is_symlink()]
    assert sorted(folders[1:]) == ["fingerprint", "indexer", "proxy"]
    for folder in folders:
        assert f"COPY {folder} ./{folder}" in DOCKERFILE, folder
    assert 'ENTRYPOINT ["neardup"]' in DOCKERFILE
