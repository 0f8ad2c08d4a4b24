"""The configuration: defaults equal the shipped file, environment overrides, and one clear
message per kind of bad value (naming the key, the value and what is allowed)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from neardup.config import (
    CollapseConfig,
    Config,
    ConfigError,
    IndexOverride,
    collapse_settings_for,
    default_config_path,
    load_config,
)
from neardup.upstream import UpstreamError, check_upstream

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "config" / "neardup.toml"


def write_config(tmp_path: Path, text: str) -> Path:
    file = tmp_path / "neardup.toml"
    file.write_text(text, encoding="utf-8")
    return file


def config_error(tmp_path: Path, toml: str = "", env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, toml), environ=env or {})
    return str(caught.value)


def flat_keys(config: Config) -> dict[str, object]:
    """``{"upstream.urls": [...], "collapse.threshold": 0.8, ...}`` of a configuration."""
    return {f"{section}.{key}": value
            for section, values in config.model_dump(mode="json").items()
            for key, value in values.items()}


# ------------------------------------------------------------------ defaults

def test_shipped_file_equals_built_in_defaults():
    assert default_config_path() == SHIPPED
    assert load_config(SHIPPED, environ={}) == Config()


def test_shipped_file_sets_every_key_explicitly():
    """The file documents every key: none may be left to a silent default."""
    import tomllib

    written = tomllib.loads(SHIPPED.read_text(encoding="utf-8"))
    written_keys = {f"{section}.{key}" for section, values in written.items() for key in values}
    assert written_keys == set(flat_keys(Config()))


def test_empty_file_gives_defaults(tmp_path):
    assert load_config(write_config(tmp_path, ""), environ={}) == Config()


# ------------------------------------------------------------------ bad values in the file

@pytest.mark.parametrize(("toml", "expected"), [
    # wrong type
    ('[collapse]\nthreshold = "high"', ["collapse.threshold", "'high'", "valid number"]),
    ('[proxy]\nport = "http"', ["proxy.port", "'http'", "valid integer"]),
    ('[fingerprint]\nshingle_size = "x"', ["fingerprint.shingle_size", "'x'", "valid integer"]),
    ("[upstream]\nurls = 5", ["upstream.urls", "5", "valid list"]),
    ('[upstream]\nverify_certs = "maybe"', ["upstream.verify_certs", "'maybe'", "valid boolean"]),
    # out of range
    ("[collapse]\nthreshold = 1.5", ["collapse.threshold", "1.5", "less than or equal to 1"]),
    ("[proxy]\nport = 70000", ["proxy.port", "70000", "less than or equal to 65535"]),
    ("[upstream]\nrequest_timeout = 0", ["upstream.request_timeout", "0", "greater than 0"]),
    ("[indexer]\nbatch_size = 0", ["indexer.batch_size", "0", "greater than or equal to 1"]),
    ("[proxy]\nsplit_fetch_min_hits = -1", ["proxy.split_fetch_min_hits", "-1", "greater than or equal to 0"]),
    ("[fingerprint]\nshingle_size = 0", ["fingerprint.shingle_size", "0", "from 1 to 32"]),
    ("[fingerprint]\nseed = -1", ["fingerprint.seed", "-1", "from 0 to 4294967295"]),
    # not one of the allowed words
    ('[collapse]\nmode = "jaccard"', ["collapse.mode", "'jaccard'", "'resemblance' or 'containment'"]),
    ('[logging]\nlevel = "LOUD"', ["logging.level", "'LOUD'", "'DEBUG', 'INFO', 'WARNING' or 'ERROR'"]),
    ('[fingerprint]\nlanguage = "fr"', ["fingerprint.language", "'fr'", "'auto', 'ru', 'en' or 'none'"]),
    # malformed
    ('[upstream]\nurls = ["localhost"]', ["upstream.urls.0", "'localhost'", "valid URL"]),
    ('[upstream]\nurls = ["ftp://h:21"]', ["upstream.urls.0", "'ftp://h:21'", "'http' or 'https'"]),
    ("[upstream]\nurls = []", ["upstream.urls", "[]", "at least 1 item"]),
    ('[upstream]\nca_certs = "/no/such/ca.pem"', ["upstream.ca_certs", "'/no/such/ca.pem'", "no such file"]),
    ('[collapse.indices."news-*"]\nthreshold = 2', ["collapse.indices.news-*.threshold", "2",
                                                    "less than or equal to 1"]),
])
def test_bad_value_in_file_names_key_value_and_what_is_allowed(tmp_path, toml, expected):
    message = config_error(tmp_path, toml)
    for part in expected:
        assert part in message, (part, message)
    assert str(tmp_path / "neardup.toml") in message


@pytest.mark.parametrize(("toml", "key", "allowed"), [
    ("[collapse]\ntreshold = 0.7", "collapse.treshold", "enabled, threshold, mode, max_window, indices"),
    ("[fingerprint]\nnum_perms = 84", "fingerprint.num_perms", "shingle_size, num_perm, groups, rows"),
    ("[upstreams]\nurls = []", "upstreams", "upstream, proxy, collapse, fingerprint, indexer, tfidf, logging, copies, enrich"),
    ('[collapse.indices.news]\nmod = "containment"', "collapse.indices.news.mod", "enabled, threshold, mode"),
])
def test_unknown_key_in_file_is_an_error_listing_the_allowed_keys(tmp_path, toml, key, allowed):
    message = config_error(tmp_path, toml)
    assert f"{key}: unknown key; allowed: {allowed}" in message


def test_groups_times_rows_must_equal_num_perm(tmp_path):
    message = config_error(tmp_path, "[fingerprint]\ngroups = 7\nrows = 14\nnum_perm = 84")
    assert "fingerprint.num_perm = 84: must be groups × rows = 7 × 14 = 98" in message


def test_every_bad_value_is_reported_at_once(tmp_path):
    message = config_error(tmp_path, '[proxy]\nport = -1\n[collapse]\nmode = "x"')
    assert "proxy.port = -1" in message and "collapse.mode = 'x'" in message


def test_bad_toml_names_the_file_and_the_position(tmp_path):
    message = config_error(tmp_path, "[collapse]\nthreshold = \n")
    assert str(tmp_path / "neardup.toml") in message
    assert "not valid TOML" in message and "line 2" in message


def test_missing_file_named_by_option_or_variable(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=re.escape(f"configuration file not found: {missing} (named by --config)")):
        load_config(missing, environ={})
    with pytest.raises(ConfigError, match=re.escape(f"not found: {missing} (named by NEARDUP_CONFIG)")):
        load_config(environ={"NEARDUP_CONFIG": str(missing)})


def test_config_file_from_variable_is_used(tmp_path):
    file = write_config(tmp_path, "[collapse]\nthreshold = 0.6")
    assert load_config(environ={"NEARDUP_CONFIG": str(file)}).collapse.threshold == 0.6


# ------------------------------------------------------------------ environment overrides

def test_environment_overrides_scalars_of_every_type(tmp_path):
    config = load_config(write_config(tmp_path, "[collapse]\nthreshold = 0.6"), environ={
        "NEARDUP_COLLAPSE__THRESHOLD": "0.85",
        "NEARDUP_COLLAPSE__ENABLED": "false",
        "NEARDUP_PROXY__PORT": "9333",
        "NEARDUP_UPSTREAM__VERIFY_CERTS": "0",
        "NEARDUP_LOGGING__FORMAT": "json",
        "NEARDUP_FINGERPRINT__LANGUAGE": "ru",
    })
    assert config.collapse.threshold == 0.85
    assert config.collapse.enabled is False
    assert config.proxy.port == 9333
    assert config.upstream.verify_certs is False
    assert config.logging.format == "json"
    assert config.fingerprint.language == "ru"


@pytest.mark.parametrize(("value", "expected"), [
    ("http://a:9200", ["http://a:9200"]),
    ("http://a:9200,http://b:9201", ["http://a:9200", "http://b:9201"]),
    (" http://a:9200 , http://b:9201 ", ["http://a:9200", "http://b:9201"]),
    ('["http://a:9200", "https://b:9243"]', ["http://a:9200", "https://b:9243"]),
])
def test_environment_lists_take_commas_or_json(value, expected):
    config = load_config(environ={"NEARDUP_UPSTREAM__URLS": value})
    assert config.upstream.url_strings == expected


def test_environment_string_keeps_commas_and_brackets():
    config = load_config(environ={"NEARDUP_UPSTREAM__PASSWORD": "[a,b]{c}",
                                  "NEARDUP_UPSTREAM__USERNAME": "x,y"})
    assert (config.upstream.username, config.upstream.password) == ("x,y", "[a,b]{c}")


def test_environment_per_index_overrides_as_json(tmp_path):
    file = write_config(tmp_path, '[collapse.indices."logs-*"]\nenabled = false')
    config = load_config(file, environ={
        "NEARDUP_COLLAPSE__INDICES": '{"news-*": {"threshold": 0.7, "mode": "containment"}}',
        "NEARDUP_COLLAPSE__INDICES__WIRE": '{"enabled": false}',
    })
    # the variable that names the whole table replaces the file's table; a deeper one adds to it
    assert config.collapse.indices == {
        "news-*": IndexOverride(threshold=0.7, mode="containment"),
        "wire": IndexOverride(enabled=False),
    }


def test_environment_single_per_index_key():
    config = load_config(environ={"NEARDUP_COLLAPSE__INDICES__NEWS__THRESHOLD": "0.75"})
    assert config.collapse.indices == {"news": IndexOverride(threshold=0.75)}


@pytest.mark.parametrize(("env", "expected"), [
    ({"NEARDUP_COLLAPSE__THRESHOLD": "1.5"},
     "collapse.threshold = '1.5' (from NEARDUP_COLLAPSE__THRESHOLD): Input should be less than or equal to 1"),
    ({"NEARDUP_PROXY__PORT": "eighty"},
     "proxy.port = 'eighty' (from NEARDUP_PROXY__PORT): Input should be a valid integer"),
    ({"NEARDUP_COLLAPSE__TRESHOLD": "0.7"},
     "collapse.treshold (from NEARDUP_COLLAPSE__TRESHOLD): unknown key; allowed: enabled, threshold"),
    ({"NEARDUP_UPSTREM__URLS": "http://a:9200"},
     "upstrem (from NEARDUP_UPSTREM__URLS): unknown key; allowed: upstream, proxy"),
    ({"NEARDUP_COLLAPSE__INDICES": '{"news": {"treshold": 0.7}}'},
     "collapse.indices.news.treshold (from NEARDUP_COLLAPSE__INDICES): unknown key; allowed: enabled, threshold, mode"),
    ({"NEARDUP_COLLAPSE__INDICES": "{news: 0.7}"},
     "NEARDUP_COLLAPSE__INDICES = '{news: 0.7}': not valid JSON"),
    ({"NEARDUP_COLLAPSE__INDICES": "[]"}, "NEARDUP_COLLAPSE__INDICES = '[]': expected a JSON object"),
    ({"NEARDUP_UPSTREAM__URLS": '["http://a:9200"'}, "NEARDUP_UPSTREAM__URLS = '[\"http://a:9200\"': not valid JSON"),
    ({"NEARDUP_UPSTREAM__URLS": ""}, "upstream.urls = [] (from NEARDUP_UPSTREAM__URLS): List should have at least 1 item"),
    ({"NEARDUP_UPSTREAM__URLS__FIRST": "x"}, "NEARDUP_UPSTREAM__URLS__FIRST: upstream.urls is not a table"),
    ({"NEARDUP_FINGERPRINT__GROUPS": "7"},
     "fingerprint.num_perm = 84: must be groups × rows = 7 × 6 = 42 (from NEARDUP_FINGERPRINT__GROUPS)"),
    ({"NEARDUP_PROXY__": "1"}, "NEARDUP_PROXY__: not a configuration variable"),
])
def test_bad_environment_value_names_the_variable(env, expected):
    with pytest.raises(ConfigError) as caught:
        load_config(SHIPPED, environ=env)
    assert expected in str(caught.value)


def test_variables_without_double_underscore_are_not_configuration():
    config = load_config(environ={"NEARDUP_TEST_ES_URL": "http://x:1", "NEARDUP_ES_PORT": "9",
                                  "NEARDUP_DATA_DIR": "/nowhere", "OTHER__THING": "1"})
    assert config == Config()


# ------------------------------------------------------------------ per-index collapse settings

def test_collapse_settings_for_uses_first_matching_pattern_and_falls_back():
    collapse = CollapseConfig(threshold=0.8, mode="resemblance", indices={
        "news-ru": IndexOverride(mode="containment"),
        "news-*": IndexOverride(threshold=0.6),
        "logs-*": IndexOverride(enabled=False),
    })
    assert collapse_settings_for(collapse, "news-ru") == (True, 0.8, "containment")
    assert collapse_settings_for(collapse, "news-en") == (True, 0.6, "resemblance")
    assert collapse_settings_for(collapse, "logs-2024") == (False, 0.8, "resemblance")
    assert collapse_settings_for(collapse, "other") == (True, 0.8, "resemblance")
    assert collapse_settings_for(collapse, "NEWS-en") == (True, 0.8, "resemblance")  # case-sensitive


def test_collapse_overrides_keep_file_order(tmp_path):
    file = write_config(tmp_path, '[collapse.indices."a*"]\nthreshold = 0.5\n'
                                  '[collapse.indices."ab*"]\nthreshold = 0.9\n')
    assert collapse_settings_for(load_config(file, environ={}).collapse, "abc")[1] == 0.5


# ------------------------------------------------------------------ the configuration reference documents every key

def test_configuration_reference_matches_the_keys():
    reference = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    keys = set(flat_keys(Config()))
    missing = sorted(key for key in keys if f"`{key}`" not in reference)
    assert not missing, f"docs/configuration.md does not document: {missing}"
    variables = {key: "NEARDUP_" + key.upper().replace(".", "__") for key in keys}
    missing = sorted(name for name in variables.values() if f"`{name}`" not in reference)
    assert not missing, f"docs/configuration.md does not name the variables: {missing}"
    sections = "|".join(Config.model_fields)
    documented = set(re.findall(rf"`((?:{sections})\.[a-z_]+)`", reference))
    assert documented <= keys, f"docs/configuration.md documents keys that do not exist: {sorted(documented - keys)}"


# ------------------------------------------------------------------ unreachable upstream

def closed_port() -> socket.socket:
    """A bound but not listening socket: connections to its port are refused while it lives."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def test_unreachable_upstream_names_key_url_and_cause():
    with closed_port() as sock:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = load_config(environ={"NEARDUP_UPSTREAM__URLS": url})
        with pytest.raises(UpstreamError) as caught:
            check_upstream(config)
    message = str(caught.value)
    assert message.startswith("upstream.urls: cannot use Elasticsearch at")
    assert f"{url}: [Errno 111] Connection refused" in message


def test_unknown_host_names_the_cause():
    config = load_config(environ={"NEARDUP_UPSTREAM__URLS": "http://no-such-host.invalid:9200"})
    with pytest.raises(UpstreamError, match=r"no-such-host\.invalid:9200: \[Errno -?\d+\]"):
        check_upstream(config)


def test_credentials_in_url_are_not_shown():
    with closed_port() as sock:
        port = sock.getsockname()[1]
        config = load_config(environ={"NEARDUP_UPSTREAM__URLS": f"http://me:s3cret@127.0.0.1:{port}"})
        with pytest.raises(UpstreamError) as caught:
            check_upstream(config)
    assert "s3cret" not in str(caught.value) and f"http://127.0.0.1:{port}" in str(caught.value)


def test_one_reachable_node_is_enough(es_url, caplog):
    with closed_port() as sock:
        down = f"http://127.0.0.1:{sock.getsockname()[1]}"
        check_upstream(load_config(environ={"NEARDUP_UPSTREAM__URLS": f"{down},{es_url}"}))
    assert f"{down} is not usable: [Errno 111] Connection refused" in caplog.text


def test_https_against_a_plain_http_node_is_a_tls_error(es_url):
    config = load_config(environ={"NEARDUP_UPSTREAM__URLS": es_url.replace("http://", "https://")})
    with pytest.raises(UpstreamError, match=r"\[SSL[^\]]*\].*check upstream.ca_certs / upstream.verify_certs"):
        check_upstream(config)


def test_credentials_pass_through_to_a_secured_node(secure_es):
    env = {"NEARDUP_UPSTREAM__URLS": secure_es.url}
    check_upstream(load_config(environ={**env, "NEARDUP_UPSTREAM__USERNAME": secure_es.username,
                                        "NEARDUP_UPSTREAM__PASSWORD": secure_es.password}))
    with pytest.raises(UpstreamError, match=re.escape(
            f"{secure_es.url}: credentials rejected (HTTP 401) with upstream.username = "
            f"{secure_es.username!r}")):
        check_upstream(load_config(environ={**env, "NEARDUP_UPSTREAM__USERNAME": secure_es.username,
                                            "NEARDUP_UPSTREAM__PASSWORD": "wrong-password"}))
    with pytest.raises(UpstreamError, match="credentials rejected \\(HTTP 401\\) with no credentials"):
        check_upstream(load_config(environ=env))
