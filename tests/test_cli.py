"""``neardup --help`` and every subcommand's ``--help`` exit 0 and describe every option.

The subcommands are found by walking the argparse parser, so a new one is covered as soon as
its module registers it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neardup.cli import build_parser, main
from neardup.fingerprint import FIELD
from tests.engine_support import bulk_load, count, create_index, delete_index, search
from tests.plugins.corpora import neardup_env, run_neardup
from tests.test_proxy_support import ProxyThread, make_config

ROOT = Path(__file__).resolve().parent.parent


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def all_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path: ``()``, ``("index",)``, ... including nested subcommands."""
    paths = [prefix]
    for name, sub in subparsers_of(parser).items():
        paths += all_commands(sub, prefix + (name,))
    return paths


def parser_for(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        parser = subparsers_of(parser)[name]
    return parser


COMMANDS = all_commands(build_parser())


def help_text(path: tuple[str, ...], capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_console_script_help_exits_zero():
    result = subprocess.run([sys.executable, "-m", "neardup", "--help"], capture_output=True,
                            text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: neardup")
    for name in subparsers_of(build_parser()):
        assert name in result.stdout


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("neardup", *p)))
def test_help_describes_every_option(path, capsys):
    text = help_text(path, capsys)
    squeezed = "".join(text.split())
    parser = parser_for(path)
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:  # one line per subcommand
                assert choice.help, f"`neardup {' '.join((*path, choice.dest))}` has no help line"
                assert "".join(choice.help.split()[:4]) in squeezed
            continue
        what = "/".join(action.option_strings) or action.dest
        assert action.help, f"`neardup {' '.join(path)}`: {what} has no help text"
        for option in action.option_strings:
            assert option in text, f"{option} missing from `neardup {' '.join(path)} --help`"
        if not action.option_strings:
            assert (action.metavar or action.dest) in text
        expanded = parser._get_formatter()._expand_help(action)
        assert "".join(expanded.split()[:4]) in squeezed, f"help of {what} not shown"


@pytest.mark.parametrize("path", [p for p in COMMANDS if p], ids=lambda p: " ".join(p))
def test_every_subcommand_has_a_description_and_a_handler(path):
    parser = parser_for(path)
    if subparsers_of(parser):
        return  # a group of subcommands; its leaves are checked
    assert callable(parser._defaults.get("handler")), f"`neardup {' '.join(path)}` has no handler"
    assert parser.description, f"`neardup {' '.join(path)}` has no description"


def test_missing_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2
    assert "required: COMMAND" in capsys.readouterr().err


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["no-such-command"])
    assert exited.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


def minimal_argv(parser: argparse.ArgumentParser) -> list[str]:
    """Arguments that satisfy a leaf parser's required options and positionals."""
    argv: list[str] = []
    for action in parser._actions:
        if not (action.required or not action.option_strings) or isinstance(action, argparse._HelpAction):
            continue
        value = str(next(iter(action.choices))) if action.choices else "1"
        values = [value, value] if action.nargs in ("+", "*") or isinstance(action.nargs, int) else [value]
        argv += [action.option_strings[0], *values] if action.option_strings else values
    return argv


def test_bad_configuration_stops_every_subcommand_before_it_runs(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[collapse]\nthreshold = 2\n", encoding="utf-8")
    leaves = [path for path in COMMANDS if path and not subparsers_of(parser_for(path))]
    assert leaves
    for leaf in leaves:
        status = main(["--config", str(bad), *leaf, *minimal_argv(parser_for(leaf))])
        assert status == 2, leaf
        assert "collapse.threshold = 2" in capsys.readouterr().err


# --- bad option values, third-party logs -------------------------------------------------------------

@pytest.mark.parametrize(("argv", "start"), [
    (["proxy", "--port", "99999"], "neardup: proxy.port = 99999: "),
    (["proxy", "--workers", "0"], "neardup: proxy.workers = 0: "),
    (["proxy", "--upstream", "not a url"], "neardup: upstream.urls.0 = 'not a url': "),
    (["index", "--index", "x", "--workers", "65"], "neardup: indexer.workers = 65: "),
])
def test_a_bad_option_value_is_the_one_line_configuration_error(argv, start, capsys):
    """An option that sets a configuration key is validated as the file is, and reported the
    same way: one line naming the key, the value and the option, exit status 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(start) and err.count("\n") == 1, err
    assert f"(given as {argv[-2]})" in err and "validation error" not in err


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("WARNING", False), ("DEBUG", True)])
def test_third_party_info_lines_are_shown_only_with_debug(level, shown):
    """pymorphy3 announces its dictionaries, elastic_transport and opensearch-py every request and node timeout
    at INFO/WARNING: noise in a job's output unless ``--log-level DEBUG`` asks for everything."""
    from neardup.cli import configure_logging

    configure_logging(level, "text")
    assert logging.getLogger("pymorphy3.opencorpora_dict.wrapper").isEnabledFor(logging.INFO) is shown
    assert logging.getLogger("elastic_transport.transport").isEnabledFor(logging.INFO) is shown
    assert logging.getLogger("elastic_transport.node_pool").isEnabledFor(logging.WARNING) is shown
    assert logging.getLogger("elastic_transport.node_pool").isEnabledFor(logging.ERROR)
    assert logging.getLogger("opensearch").isEnabledFor(logging.INFO) is shown
    assert logging.getLogger("neardup.indexer.progress").isEnabledFor(logging.INFO) is (level != "WARNING")


def test_compare_at_the_default_level_prints_no_dictionary_loading(tmp_path):
    """A real run: the default level (INFO) shows no pymorphy3 line; DEBUG does."""
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_text("Компании растут быстро", encoding="utf-8")
    two.write_text("Компания росла быстро", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    runs = {}
    for extra in ([], ["--log-level", "DEBUG"]):
        done = subprocess.run([sys.executable, "-m", "neardup", *extra, "compare", "--language", "ru", str(one), str(two)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        runs[bool(extra)] = done.stderr
    assert "pymorphy3" not in runs[False]
    assert "pymorphy3" in runs[True]


# --- the cluster to work on: neardup --upstream URL ----------------------------------------------------

def test_the_global_upstream_sets_upstream_urls_and_the_proxys_own_flag_stays_an_alias():
    """``neardup --upstream URL COMMAND`` for every command; ``neardup proxy --upstream URL`` as
    before, replacing the global URLs when both are given."""
    parse = build_parser().parse_args
    assert parse(["--upstream", "http://a:9200", "--upstream", "http://b:9200", "index", "--index", "x"]).upstream \
        == ["http://a:9200", "http://b:9200"]
    assert parse(["--upstream", "http://a:9200", "proxy"]).upstream == ["http://a:9200"]
    assert parse(["proxy", "--upstream", "http://b:9200"]).upstream == ["http://b:9200"]
    assert parse(["--upstream", "http://a:9200", "proxy", "--upstream", "http://b:9200"]).upstream == ["http://b:9200"]
    assert parse(["proxy"]).upstream is None


def test_a_bad_upstream_url_stops_every_command_with_the_one_line_configuration_error(capsys):
    leaves = [path for path in COMMANDS if path and not subparsers_of(parser_for(path))]
    for leaf in leaves:
        assert main(["--upstream", "not-a-url", *leaf, *minimal_argv(parser_for(leaf))]) == 2, leaf
        err = capsys.readouterr().err
        assert err.startswith("neardup: upstream.urls.0 = 'not-a-url': ") and err.count("\n") == 1, err
        assert err.endswith(" (given as --upstream)\n") and "validation error" not in err


@pytest.mark.parametrize(("version", "engine"), [
    ({"number": "8.19.21", "build_flavor": "default"}, "Elasticsearch"),
    ({"number": "8.11.0", "build_flavor": "serverless"}, "Elasticsearch Serverless"),
    ({"number": "2.19.6", "distribution": "opensearch"}, "OpenSearch"),
])
def test_the_engine_is_read_from_the_version_object(version, engine):
    from neardup.upstream import engine_of

    assert engine_of(version) == engine


DOCS = [
    {"id": "a", "title": "Fox", "body": "The quick brown fox jumps over the lazy dog again and again today."},
    {"id": "b", "title": "Fox", "body": "The quick brown fox jumps over the lazy dog again and again today!"},
    {"id": "c", "title": "Rates", "body": "Central bank keeps interest rates unchanged for the quarter, officials said."},
]


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """A URL where nothing answers (a bound, not listening port): NEARDUP_UPSTREAM__URLS of the runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def index_names(es: Any) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        delete_index(es, name)


def test_every_job_works_on_the_cluster_of_the_global_upstream_and_names_it(es, es_url, engine, elsewhere,
                                                                           index_names, tmp_path):
    """``neardup --upstream URL`` wins over NEARDUP_UPSTREAM__URLS (which points where nothing
    answers), and every job's summary names the cluster: URL, engine and version."""
    url = es_url.rstrip("/")
    cluster = {"url": url, "engine": engine.engine, "version": engine.version}
    named = f"{engine.engine} {cluster['version']} at {url}\n"
    enriched, loaded = f"cli-upstream-{uuid.uuid4().hex[:8]}", f"cli-upstream-{uuid.uuid4().hex[:8]}"
    index_names += [enriched, loaded]
    create_index(es, enriched, settings={"number_of_shards": 1, "number_of_replicas": 0})
    bulk_load(es, enriched, DOCS)

    def neardup(*args: str) -> str:
        result = run_neardup(["--upstream", es_url, *args], elsewhere)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        return result.stdout.decode()

    without_flag = run_neardup(["index", "--index", enriched], elsewhere)
    assert without_flag.returncode == 3 and elsewhere in without_flag.stderr.decode()

    assert f"\n  upstream           {named}" in neardup("index", "--index", enriched)
    assert all(FIELD in hit["_source"] for hit in search(es, enriched)["hits"]["hits"])
    assert json.loads(neardup("index", "--index", enriched, "--json"))["cluster"] == cluster

    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS), encoding="utf-8")
    assert f"\n  upstream {named}" in neardup("load", "--index", loaded, str(source), "--refresh")
    assert count(es, loaded) == len(DOCS)
    assert json.loads(neardup("load", "--index", loaded, str(source), "--json"))["cluster"] == cluster

    assert f"\nupstream: {named}" in neardup("duplicates", "--index", loaded, "--id", "a")
    assert json.loads(neardup("duplicates", "--index", loaded, "--id", "a", "--json"))["cluster"] == cluster
    assert f"\n  upstream           {named}" in neardup("cluster", "--index", loaded)
    assert json.loads(neardup("cluster", "--index", loaded, "--json"))["cluster"] == cluster
    assert f"\n  upstream: {named}" in neardup("copies", "--index", loaded)
    last = neardup("copies", "--index", loaded, "--json").splitlines()[-1]
    assert json.loads(last)["summary"]["cluster"] == cluster


def test_without_opensearch_py_a_job_runs_on_elasticsearch_and_stops_on_opensearch_with_the_install_hint(
        es, es_url, engine, index_names):
    """opensearch-py is an optional extra: Elasticsearch users run without it; on OpenSearch the
    job stops before it writes anything and says how to install it."""
    name = f"cli-extra-{uuid.uuid4().hex[:8]}"
    index_names.append(name)
    create_index(es, name, settings={"number_of_shards": 1, "number_of_replicas": 0})
    bulk_load(es, name, DOCS)
    hidden = ("import sys; sys.modules['opensearchpy'] = None; from neardup.cli import main; "
              f"sys.exit(main(['index', '--index', {name!r}]))")
    result = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True, timeout=300,
                            env=neardup_env(es_url), check=False)
    if engine.is_opensearch:
        assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
        assert f"OpenSearch {engine.version}" in result.stderr
        assert "pip install 'neardup[opensearch]'" in result.stderr
        assert FIELD not in es.indices.get_mapping(index=name)[name]["mappings"]["properties"]
    else:
        assert result.returncode == 0, result.stderr
        assert all(FIELD in hit["_source"] for hit in search(es, name)["hits"]["hits"])


def test_a_cluster_that_will_not_tell_its_version_is_named_with_the_version_unknown(es, es_url, engine, elsewhere,
                                                                                    index_names):
    """The node is reached through the proxy, which admits only the health check and the
    index: ``GET /`` and ``GET /_nodes/_local`` are refused (403), the job runs all the same on
    Elasticsearch. OpenSearch is then taken for Elasticsearch, whose client refuses it: the job
    stops with one message saying so."""
    name = f"cli-upstream-{uuid.uuid4().hex[:8]}"
    index_names.append(name)
    create_index(es, name, settings={"number_of_shards": 1, "number_of_replicas": 0})
    bulk_load(es, name, DOCS)
    assert run_neardup(["--upstream", es_url, "index", "--index", name], elsewhere).returncode == 0
    rules = {"allowed_paths": ["/_cluster/health", f"/{name}/**"]}
    with ProxyThread(make_config(es_url, proxy=rules)) as proxy:
        text = run_neardup(["--upstream", proxy.url, "duplicates", "--index", name, "--id", "a"], elsewhere)
        found = run_neardup(["--upstream", proxy.url, "duplicates", "--index", name, "--id", "a", "--json"],
                            elsewhere)
    if engine.is_opensearch:
        assert text.returncode == 3 and "Traceback" not in text.stderr.decode()
        assert f"the cluster at {proxy.url}: it does not answer as Elasticsearch does" in text.stderr.decode()
        return
    assert text.returncode == 0, text.stderr.decode(errors="replace")
    assert f"\nupstream: Elasticsearch (version unknown) at {proxy.url}\n" in text.stdout.decode()
    assert json.loads(found.stdout)["cluster"] == {"url": proxy.url, "engine": "Elasticsearch", "version": None}


def test_credentials_in_the_upstream_url_reach_the_node_and_are_never_shown(secure_es, elsewhere, tmp_path):
    scheme, rest = secure_es.url.split("://", 1)
    with_credentials = f"{scheme}://{secure_es.username}:{secure_es.password}@{rest}"
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS), encoding="utf-8")
    name = f"cli-upstream-{uuid.uuid4().hex[:8]}"
    result = run_neardup(["--upstream", with_credentials, "load", "--index", name, str(source)], elsewhere)
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, output
    assert "\n  upstream Elasticsearch " in output and f" at {secure_es.url.rstrip('/')}\n" in output
    assert secure_es.password not in output
    secure_es.client().options(ignore_status=404).indices.delete(index=name)
