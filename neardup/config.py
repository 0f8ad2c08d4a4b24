"""The one configuration object of neardup.

Loaded from a TOML file (``config/neardup.toml`` in a checkout, or the file named by
``--config`` / ``NEARDUP_CONFIG``), then overridden key by key from the environment:
``NEARDUP_<SECTION>__<KEY>`` (double underscore between levels), for example
``NEARDUP_COLLAPSE__THRESHOLD=0.85`` or ``NEARDUP_UPSTREAM__URLS=http://a:9200,http://b:9200``.
Lists take a comma-separated string or JSON; tables take JSON.

Every value is validated; a bad one raises :class:`ConfigError` whose message names the key,
the value and what is allowed. Unknown keys are errors too: a typo must not be ignored.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from fingerprint.params import FingerprintParams

ENV_PREFIX = "NEARDUP_"
ENV_CONFIG_FILE = "NEARDUP_CONFIG"


class ConfigError(Exception):
    """A configuration value is missing, of the wrong type, out of range or unknown."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


Seconds = Annotated[float, Field(gt=0, le=3600)]
Threshold = Annotated[float, Field(ge=0.0, le=1.0)]
Mode = Literal["resemblance", "containment"]


class UpstreamConfig(_Section):
    """The Elasticsearch cluster behind the proxy and the indexer."""

    urls: list[AnyHttpUrl] = Field(default_factory=lambda: [AnyHttpUrl("http://127.0.0.1:9200")], min_length=1)
    username: str = ""
    password: str = ""
    api_key: str = ""
    ca_certs: str = ""
    verify_certs: bool = True
    connect_timeout: Seconds = 5.0
    request_timeout: Seconds = 60.0
    max_connections: Annotated[int, Field(ge=1, le=10_000)] = 100

    @field_validator("ca_certs")
    @classmethod
    def _ca_exists(cls, value: str) -> str:
        if value and not Path(value).is_file():
            raise ValueError(f"no such file: {value}")
        return value

    @property
    def url_strings(self) -> list[str]:
        return [str(u).rstrip("/") for u in self.urls]


class ProxyConfig(_Section):
    """The collapsing proxy's own server."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 9201
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    max_body_bytes: Annotated[int, Field(ge=1024)] = 100 * 1024 * 1024
    shutdown_timeout: Seconds = 30.0


class IndexOverride(_Section):
    """Per-index collapse settings; unset keys fall back to the global ones."""

    enabled: bool | None = None
    threshold: Threshold | None = None
    mode: Mode | None = None


class CollapseConfig(_Section):
    """How hits are folded into near-duplicate groups."""

    enabled: bool = True
    threshold: Threshold = 0.8
    mode: Mode = "resemblance"
    max_window: Annotated[int, Field(ge=1, le=10_000)] = 1000
    #: Per-index overrides, keyed by index name or pattern (``news-*``).
    indices: dict[str, IndexOverride] = Field(default_factory=dict)


class IndexerConfig(_Section):
    """The enrichment job."""

    fields: list[str] = Field(default_factory=lambda: ["title", "body"], min_length=1)
    batch_size: Annotated[int, Field(ge=1, le=10_000)] = 500
    workers: Annotated[int, Field(ge=1, le=64)] = 2
    max_retries: Annotated[int, Field(ge=0, le=100)] = 8
    keep_alive: str = "5m"


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"


class Config(_Section):
    upstream: UpstreamConfig = Field(default_factory=UpstreamConfig)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    collapse: CollapseConfig = Field(default_factory=CollapseConfig)
    fingerprint: FingerprintParams = Field(default_factory=FingerprintParams)
    indexer: IndexerConfig = Field(default_factory=IndexerConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)


def _describe(error: Mapping[str, Any]) -> str:
    key = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"{key}: unknown key"
    if error["type"] == "value_error" and isinstance(error.get("input"), Mapping):
        # A whole-section check (e.g. FingerprintParams.__post_init__) names its own key.
        return f"{key}.{message}"
    return f"{key} = {error.get('input')!r}: {message}"


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Turn ``NEARDUP_SECTION__KEY=value`` variables into a nested dict.

    Variables without a double underscore (``NEARDUP_CONFIG``, ``NEARDUP_TEST_ES_URL``)
    are not configuration keys and are left alone.
    """
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX):].split("__")]
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: conflicts with another variable")
        node[path[-1]] = _parse_env_value(raw)
    return tree


def _parse_env_value(raw: str) -> Any:
    text = raw.strip()
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return raw
    if "," in text:
        return [item.strip() for item in text.split(",") if item.strip()]
    return raw


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict) and key != "indices":
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _wrap_single_lists(tree: dict[str, Any]) -> dict[str, Any]:
    """``NEARDUP_UPSTREAM__URLS=http://x:9200`` (no comma) still means a one-item list."""
    for section, key in (("upstream", "urls"), ("indexer", "fields")):
        value = tree.get(section, {}).get(key)
        if isinstance(value, str):
            tree[section][key] = [value]
    return tree


def default_config_path() -> Path | None:
    """``config/neardup.toml`` of the checkout, if there is one.

    An installed package without a checkout uses the built-in defaults, which a test keeps
    equal to that file.
    """
    checkout = Path(__file__).resolve().parent.parent / "config" / "neardup.toml"
    return checkout if checkout.is_file() else None


def load_config(path: str | os.PathLike[str] | None = None,
                environ: Mapping[str, str] | None = None) -> Config:
    """Load, override from the environment, validate. Raises :class:`ConfigError`."""
    environ = os.environ if environ is None else environ
    chosen = path or environ.get(ENV_CONFIG_FILE) or default_config_path()
    data: dict[str, Any] = {}
    if chosen is not None:
        file = Path(chosen)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"configuration file not found: {file}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    data = _wrap_single_lists(_merge(data, _env_overrides(environ)))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(e) for e in exc.errors(include_url=False)]
        source = f" (from {chosen} and NEARDUP_* variables)" if chosen else ""
        raise ConfigError("invalid configuration" + source + ":\n  " + "\n  ".join(lines)) from None


def collapse_settings_for(config: CollapseConfig, index: str) -> tuple[bool, float, Mode]:
    """(enabled, threshold, mode) for one index name, applying the first matching override.

    Overrides are matched with shell-style patterns in the order they appear in the file.
    """
    from fnmatch import fnmatchcase

    enabled, threshold, mode = config.enabled, config.threshold, config.mode
    for pattern, override in config.indices.items():
        if fnmatchcase(index, pattern):
            enabled = override.enabled if override.enabled is not None else enabled
            threshold = override.threshold if override.threshold is not None else threshold
            mode = override.mode if override.mode is not None else mode
            break
    return enabled, threshold, mode
