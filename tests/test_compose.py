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
from neardup.config import ENV_CONFIG_FILE, Config, load_config

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES: dict[str, Any] = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
SCRIPTS_ES = (ROOT / "scripts" / "es").read_text(encoding="utf-8")
GETTING_STARTED = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
_DEFAULTED = re.compile(r"\$\{(\w+):?-([^}]*)\}")


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``${NAME:-default}`` with only ``env`` (default: nothing) set."""
    return _DEFAULTED.sub(lambda match: (env or {}).get(match.group(1)) or match.group(2), value)


def environment(service: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {str(key): interpolate(str(value), env) for key, value in raw.items()}


def neardup_config(service: dict[str, Any], env: dict[str, str] | None = None) -> Config:
    return load_config(environ={k: v for k, v in environment(service, env).items() if "__" in k})


def neardup_services() -> dict[str, dict[str, Any]]:
    """Services built from this repository's Dockerfile."""
    return {name: service for name, service in SERVICES.items() if "build" in service}


def server_services() -> dict[str, dict[str, Any]]:
    """The Elasticsearch and OpenSearch nodes: the services run from an engine's image."""
    return {name: service for name, service in SERVICES.items() if "build" not in service}


def engine_default(engine: str) -> str:
    """The default ``--version`` of ``--engine ENGINE`` in scripts/es (its ``set_engine``)."""
    found = re.search(rf"^\s*{engine}\)\n(?:.*\n)*?\s*VERSION=\$\{{VERSION:-([0-9.]+)\}}", SCRIPTS_ES, re.M)
    assert found, f"scripts/es sets no default version for {engine}"
    return found.group(1)


def engine_versions(engine: str) -> list[str]:
    """The versions of ENGINE that the header of scripts/es says it runs."""
    line = re.search(rf"^#\s+{engine}\s+([0-9].*)$", SCRIPTS_ES, re.M)
    assert line, f"the header of scripts/es lists no {engine} versions"
    return re.findall(r"\d+\.\d+\.\d+", line.group(1))


def newest(versions: list[str], major: int) -> str:
    return max((v for v in versions if int(v.split(".")[0]) == major),
               key=lambda v: tuple(int(part) for part in v.split(".")))


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``(host address, host port, container port)`` of each ``ports`` entry."""
    entries = []
    for mapping in service.get("ports", []):
        address, host, container = str(mapping).split(":")
        entries.append((address, int(host), int(container)))
    return entries


def seconds(duration: str) -> int:
    found = re.fullmatch(r"(\d+)s", duration)
    assert found, f"{duration!r} is not a duration in seconds"
    return int(found.group(1))


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


def test_elasticsearch_is_the_official_image_of_the_default_version_single_node_without_security():
    # the default version of the elasticsearch engine in scripts/es
    pinned = engine_default("elasticsearch")
    service = SERVICES["elasticsearch"]
    assert service["image"] == f"docker.elastic.co/elasticsearch/elasticsearch:{pinned}"
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
    config = neardup_config(proxy)
    assert config.proxy.host == "0.0.0.0"
    published = {int(mapping.rsplit(":", 1)[1]) for mapping in proxy["ports"]}
    assert config.proxy.port in published


@pytest.mark.parametrize("name", sorted(neardup_services()))
def test_neardup_services_reach_elasticsearch_by_service_name_after_it_is_healthy(name):
    service = SERVICES[name]
    config = neardup_config(service)
    assert config.upstream.url_strings == ["http://elasticsearch:9200"]
    assert service["depends_on"]["elasticsearch"]["condition"] == "service_healthy"
    assert service["build"] == "."


def test_dockerfile_installs_every_package_of_the_distribution():
    import tomllib

    assert re.search(r"^FROM python:3\.11-slim$", DOCKERFILE, re.M)
    # With the opensearch extra: the image serves and enriches either engine.
    assert re.search(r'^RUN pip install .*\s"\.\[opensearch\]"(\s|$)', DOCKERFILE, re.M)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["neardup", "neardup.*"]
    # The sub-packages are links from neardup/ to the top-level folders: the image needs both.
    folders = ["neardup"] + [link.readlink().name for link in (ROOT / "neardup").iterdir() if link.is_symlink()]
    assert sorted(folders[1:]) == ["fingerprint", "indexer", "proxy"]
    for folder in folders:
        assert f"COPY {folder} ./{folder}" in DOCKERFILE, folder
    assert 'ENTRYPOINT ["neardup"]' in DOCKERFILE


# The servers under profiles, each the official image of a version scripts/es runs.
PROFILE_SERVERS = {
    "elasticsearch8": ("es8", "docker.elastic.co/elasticsearch/elasticsearch:"
                              + newest(engine_versions("elasticsearch"), 8)),
    "opensearch": ("opensearch", "opensearchproject/opensearch:" + engine_default("opensearch")),
}


def test_a_plain_up_starts_the_default_elasticsearch_node_and_the_proxy_only():
    always = {name for name, service in SERVICES.items() if not service.get("profiles")}
    assert always == {"elasticsearch", "proxy"}
    assert SERVICES["indexer"]["profiles"] == ["jobs"]
    assert set(server_services()) == {"elasticsearch"} | PROFILE_SERVERS.keys()


def test_scripts_es_lists_the_default_versions_among_those_it_runs():
    for engine in ("elasticsearch", "opensearch"):
        assert engine_default(engine) in engine_versions(engine), engine


@pytest.mark.parametrize("name", sorted(PROFILE_SERVERS))
def test_profile_server_is_the_official_image_of_a_version_scripts_es_runs(name):
    profile, image = PROFILE_SERVERS[name]
    assert SERVICES[name]["profiles"] == [profile]
    assert SERVICES[name]["image"] == image


@pytest.mark.parametrize("name", sorted(server_services()))
def test_server_is_one_node_without_security_with_a_fixed_heap_and_its_own_volume(name):
    service = SERVICES[name]
    env = environment(service)
    assert env["discovery.type"] == "single-node"
    assert env["cluster.routing.allocation.disk.threshold_enabled"] == "false"
    if service["image"].startswith("docker.elastic.co/elasticsearch/elasticsearch:"):
        assert env["xpack.security.enabled"] == "false"
        heap, data = env["ES_JAVA_OPTS"], "/usr/share/elasticsearch/data"
    else:
        assert service["image"].startswith("opensearchproject/opensearch:")
        assert env["DISABLE_SECURITY_PLUGIN"] == "true"
        assert env["DISABLE_INSTALL_DEMO_CONFIG"] == "true"
        # OpenSearch refuses to start on settings it does not know, such as x-pack ones.
        assert not [key for key in env if key.startswith(("xpack.", "ES_"))]
        heap, data = env["OPENSEARCH_JAVA_OPTS"], "/usr/share/opensearch/data"
    assert heap.split() == ["-Xms1g", "-Xmx1g"]
    [volume] = service["volumes"]
    volume_name, mount = volume.split(":")
    assert mount == data
    assert volume_name in COMPOSE["volumes"]


def test_every_server_has_its_own_host_port_and_volume_and_listens_on_9200():
    host_ports = [host for service in SERVICES.values() for _, host, _ in published(service)]
    assert len(host_ports) == len(set(host_ports)), host_ports
    volumes = [volume.split(":")[0] for service in server_services().values() for volume in service["volumes"]]
    assert len(volumes) == len(set(volumes)), volumes
    for name, service in server_services().items():
        assert [(address, container) for address, _, container in published(service)] == [("127.0.0.1", 9200)], name


@pytest.mark.parametrize("name", sorted(server_services()))
def test_server_is_healthy_once_its_cluster_is_yellow_within_the_start_timeout_of_scripts_es(name):
    check = SERVICES[name]["healthcheck"]
    kind, command = check["test"]
    assert kind == "CMD-SHELL"
    assert re.fullmatch(r"curl -fsS 'http://localhost:9200/_cluster/health\?wait_for_status=yellow&timeout=5s' >/dev/null",
                        command)
    assert seconds(check["timeout"]) > 5
    timeout = re.search(r"^TIMEOUT=\$\{NEARDUP_ES_TIMEOUT:-(\d+)\}$", SCRIPTS_ES, re.M)
    assert check["retries"] * seconds(check["interval"]) >= int(timeout.group(1))


@pytest.mark.parametrize("name", sorted(neardup_services()))
@pytest.mark.parametrize("server", sorted(server_services()))
def test_neardup_upstream_points_a_neardup_service_at_any_server(name, server):
    url = f"http://{server}:9200"
    config = neardup_config(SERVICES[name], {"NEARDUP_UPSTREAM": url})
    assert config.upstream.url_strings == [url]


def test_getting_started_names_each_profile_server_as_compose_runs_it():
    rows = re.findall(r"^\| `([\w-]+)` \| `([\w-]+)` \| `([^`]+)` \| (\d+) \|$", GETTING_STARTED, re.M)
    assert {service: (profile, image) for profile, service, image, _ in rows} == PROFILE_SERVERS
    for _, service, _, port in rows:
        assert [host for _, host, _ in published(SERVICES[service])] == [int(port)], service


def documented_commands() -> list[tuple[dict[str, str], set[str], str, set[str], list[str]]]:
    """``(environment, profiles, subcommand, options, services)`` of each ``docker compose``
    line of the getting-started page."""
    commands = []
    for line in GETTING_STARTED.splitlines():
        if not re.match(r"^(\w+=\S+ )*docker compose ", line):
            continue
        words = shlex.split(line, comments=True)
        at = words.index("docker")
        env = dict(word.split("=", 1) for word in words[:at])
        rest = iter(words[at + 2:])
        profiles: set[str] = set()
        options: set[str] = set()
        positional: list[str] = []
        for word in rest:
            if word == "--profile":
                profiles.add(next(rest))
            elif word.startswith("-"):
                options.add(word)
            else:
                positional.append(word)
        commands.append((env, profiles, positional[0], options, positional[1:]))
    return commands


def test_getting_started_commands_start_real_services_and_point_neardup_at_a_server():
    profiles_started: set[str] = set()
    for env, profiles, action, options, services in documented_commands():
        where = f"{action} {sorted(options)} {services}"
        assert action in {"up", "run"}, where
        for service in services:
            assert service in SERVICES, where
            assert not profiles or profiles & set(SERVICES[service].get("profiles", [])), where
        profiles_started |= profiles
        upstream = env.get("NEARDUP_UPSTREAM")
        if upstream is not None:
            host = re.fullmatch(r"http://([\w-]+):9200", upstream)
            assert host and host.group(1) in PROFILE_SERVERS, where
            # without --no-deps, depends_on would start the default Elasticsearch node too
            assert "--no-deps" in options, where
            assert set(services) <= neardup_services().keys(), where
    assert profiles_started == {profile for profile, _ in PROFILE_SERVERS.values()}
