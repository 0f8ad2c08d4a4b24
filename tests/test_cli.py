"""``neardup --help`` and every subcommand's ``--help`` exit 0 and describe every option.

The subcommands are found by walking the argparse parser, so a new one is covered as soon as
its module registers it.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neardup.cli import build_parser, main

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
    """pymorphy3 announces its dictionaries and elastic_transport every request and node timeout
    at INFO/WARNING: noise in a job's output unless ``--log-level DEBUG`` asks for everything."""
    from neardup.cli import configure_logging

    configure_logging(level, "text")
    assert logging.getLogger("pymorphy3.opencorpora_dict.wrapper").isEnabledFor(logging.INFO) is shown
    assert logging.getLogger("elastic_transport.transport").isEnabledFor(logging.INFO) is shown
    assert logging.getLogger("elastic_transport.node_pool").isEnabledFor(logging.WARNING) is shown
    assert logging.getLogger("elastic_transport.node_pool").isEnabledFor(logging.ERROR)
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
