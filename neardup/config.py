"""The one configuration object of neardup.

Loaded from a TOML file (``config/neardup.toml`` in a checkout, or the file named by
``--config`` / ``NEARDUP_CONFIG``), then overridden key by key from the environment:
``NEARDUP_<SECTION>__<KEY>`` (double underscore between levels), for example
``NEARDUP_COLLAPSE__THRESHOLD=0.85`` or ``NEARDUP_UPSTREAM__URLS=http://a:9200,http://b:9200``.
Lists take a comma-separated string or JSON; tables take a JSON object
(``NEARDUP_COLLAPSE__INDICES='{"news-*": {"threshold": 0.7}}'``, or one index at a time:
``NEARDUP_COLLAPSE__INDICES__NEWS='{"mode": "containment"}'``). Other values are taken as
written (a password may contain commas). A variable replaces exactly the key it names.

Every value is validated; a bad one raises :class:`ConfigError` whose message names the key,
the value and what is allowed. Unknown keys are errors too: a typo must not be ignored.
Command-line options are one more layer (:func:`override`), validated and reported the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import ssl
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from pydantic import (
    AfterValidator,
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from neardup.access_rules import parse_rule
from neardup.fingerprint.bloom import BloomParams
from neardup.fingerprint.params import FingerprintParams

ENV_PREFIX = "NEARDUP_"
ENV_CONFIG_FILE = "NEARDUP_CONFIG"


class ConfigError(Exception):
    """A configuration value is missing, of the wrong type, out of range or unknown."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


Seconds = Annotated[float, Field(gt=0, le=3600)]
Threshold = Annotated[float, Field(ge=0.0, le=1.0)]
Mode = Literal["resemblance", "containment"]
#: What becomes of a page that ``collapse.max_window`` hits cannot fill.
DeepPages = Literal["extend", "refuse"]


def _existing_file(value: str) -> str:
    if value and not Path(value).is_file():
        raise ValueError(f"no such file: {value}")
    return value


#: A path that must name an existing file, or "" for none.
ExistingFileOrEmpty = Annotated[str, AfterValidator(_existing_file)]


def _readable_file(value: str) -> str:
    if _existing_file(value):
        try:
            with open(value, "rb"):
                pass
        except OSError as exc:
            raise ValueError(f"cannot be read: {exc.strerror or exc}") from None
    return value


#: A path that must name a file this process can read, or "" for none.
ReadableFileOrEmpty = Annotated[str, AfterValidator(_readable_file)]


class UpstreamConfig(_Section):
    """The Elasticsearch cluster behind the proxy and the indexer."""

    urls: list[AnyHttpUrl] = Field(default_factory=lambda: [AnyHttpUrl("http://127.0.0.1:9200")], min_length=1)
    username: str = ""
    password: str = ""
    api_key: str = ""
    ca_certs: ExistingFileOrEmpty = ""
    verify_certs: bool = True
    connect_timeout: Seconds = 5.0
    request_timeout: Seconds = 60.0
    max_connections: Annotated[int, Field(ge=1, le=10_000)] = 100

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
    #: Requests one worker handles at a time; one more is answered at once with 429
    #: ``es_rejected_execution_exception`` (clients retry it), never sent upstream. 0: no limit.
    #: ``/_neardup/health`` and ``/_neardup/metrics`` are never refused.
    max_in_flight: Annotated[int, Field(ge=0, le=1_000_000)] = 512
    #: A search's first window of at least this many hits is fetched as two concurrent halves
    #: when the worker has no other request in flight: Elasticsearch fetches them on two
    #: threads, which cuts the latency of large pages on an idle proxy (one more query phase
    #: upstream; never under load). 0: never.
    split_fetch_min_hits: Annotated[int, Field(ge=0, le=1_000_000)] = 40
    #: Write the usual collapsed page from the upstream's bytes (the hits found by the compiled
    #: scanner, the sources copied, never decoded) when the scanner was built at install; off:
    #: every collapsed page is decoded and encoded again. The answers hold the same values.
    splice_pages: bool = True
    #: Serve the search playground page at ``/_neardup/`` (404 when off).
    playground: bool = False
    #: Refuse (403) every request that could write: see :mod:`neardup.proxy.transport.access`.
    read_only: bool = False
    #: If not empty, only requests matching one of these rules go upstream (403 otherwise):
    #: ``"[METHOD[,METHOD...]] /path/pattern"``, e.g. ``"GET,POST /logs-*/_search"``.
    allowed_paths: list[str] = Field(default_factory=list)
    #: ``host:port`` to serve ``/_neardup/health`` and ``/_neardup/metrics`` on, instead of
    #: the main port (where they then answer 404); empty: on the main port.
    ops_address: str = ""
    #: Serve HTTPS with this certificate (PEM, the chain after it) and its private key (PEM,
    #: unencrypted): both or neither. The ops address stays plain HTTP.
    tls_cert: ReadableFileOrEmpty = ""
    tls_key: ReadableFileOrEmpty = ""
    #: CA certificates (PEM) of the clients: if set, every client must present a certificate
    #: signed by one of them.
    tls_client_ca: ReadableFileOrEmpty = ""

    @field_validator("allowed_paths")
    @classmethod
    def _rules_parse(cls, value: list[str]) -> list[str]:
        for rule in value:
            parse_rule(rule)  # RuleError is a ValueError: reported with the key
        return value

    @field_validator("ops_address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if value:
            split_host_port(value)
        return value

    @model_validator(mode="after")
    def _tls_usable(self) -> ProxyConfig:
        if bool(self.tls_cert) != bool(self.tls_key):
            given, missing = ("tls_cert", "tls_key") if self.tls_cert else ("tls_key", "tls_cert")
            raise ValueError(f"{missing} = '': needed with proxy.{given} (both or neither)")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError(f"tls_client_ca = {self.tls_client_ca!r}: needs proxy.tls_cert and proxy.tls_key")
        self.ssl_context()  # its ValueError names the key
        return self

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server side of TLS (``ssl.create_default_context`` for clients, at least TLS
        1.2), or None for plain HTTP. ValueError naming the key when a file is not usable."""
        if not self.tls_cert:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key, password=_no_password)
        except ssl.SSLError as exc:
            raise ValueError(f"tls_cert = {self.tls_cert!r}: not a PEM certificate matching the PEM "
                             f"key proxy.tls_key = {self.tls_key!r} ({_ssl_reason(exc)})") from None
        except EncryptedKeyError as exc:
            raise ValueError(f"tls_key = {self.tls_key!r}: {exc}") from None
        if self.tls_client_ca:
            try:
                context.load_verify_locations(cafile=self.tls_client_ca)
            except ssl.SSLError as exc:
                raise ValueError(f"tls_client_ca = {self.tls_client_ca!r}: not PEM CA certificates "
                                 f"({_ssl_reason(exc)})") from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context


class EncryptedKeyError(ValueError):
    """``proxy.tls_key`` is encrypted: the proxy has no password to give."""


def _no_password() -> str:
    """An encrypted key is refused instead of OpenSSL asking for its password on the terminal."""
    raise EncryptedKeyError("the key is encrypted; give an unencrypted key")


def _ssl_reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason (``KEY_VALUES_MISMATCH``), without the ``[SSL]`` prefix or source line."""
    return exc.reason or exc.strerror or str(exc)


def split_host_port(address: str) -> tuple[str, int]:
    """``"127.0.0.1:9202"`` / ``"[::1]:9202"`` → (host, port); raises ValueError."""
    host, sep, port = address.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port (e.g. 127.0.0.1:9202, port 0 to 65535), not {address!r}")
    return host, int(port)


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
    #: A page that ``max_window`` hits cannot fill: ``extend`` the window up to the indices'
    #: ``index.max_result_window``, or ``refuse`` it with 400.
    deep_pages: DeepPages = "extend"
    #: Hits without a stored fingerprint of the current scheme are fingerprinted by the proxy
    #: from their ``indexer.fields`` (:mod:`neardup.proxy.handlers.missing_fingerprints`).
    fingerprint_missing: bool = True
    #: ... at most this many hits per request (cached or computed); beyond, a hit stays ungrouped
    fingerprint_max_hits: Annotated[int, Field(ge=0, le=10_000)] = 200
    #: ... and at most this much CPU time per request, milliseconds
    fingerprint_cpu_ms: Annotated[float, Field(gt=0, le=60_000)] = 50.0
    #: ... remembered in a least-recently-used cache of this many texts per worker (0: none)
    fingerprint_cache_entries: Annotated[int, Field(ge=0, le=10_000_000)] = 20_000


#: What an enriched write does with a near-duplicate of a document already written.
OnDuplicate = Literal["allow", "tag", "reject"]


class EnrichIndex(_Section):
    """Per-pattern settings of writes the proxy fingerprints."""

    #: ``allow``: written as sent; ``tag``: written with ``neardup.duplicate_of``; ``reject``:
    #: not written, answered 409 ``neardup_duplicate_exception``.
    on_duplicate: OnDuplicate = "allow"


class EnrichConfig(_Section):
    """Writes through the proxy that get their fingerprint in the same request."""

    #: Index names or patterns (``news-*``) whose documents are fingerprinted (empty: none).
    indices: dict[str, EnrichIndex] = Field(default_factory=dict)


class IndexerConfig(_Section):
    """The enrichment job."""

    fields: list[str] = Field(default_factory=lambda: ["title", "body"], min_length=1)
    batch_size: Annotated[int, Field(ge=1, le=10_000)] = 500
    workers: Annotated[int, Field(ge=1, le=64)] = 2
    max_retries: Annotated[int, Field(ge=0, le=100)] = 8
    keep_alive: str = "5m"
    #: ``neardup index --follow``: seconds between passes, and how far (seconds) the
    #: ``--since-field`` window reaches back before the newest update time already seen
    follow_interval: Annotated[float, Field(gt=0.0, le=3600.0)] = 1.0
    follow_overlap: Annotated[float, Field(ge=0.0, le=86400.0)] = 5.0


class CopiesConfig(_Section):
    """``neardup copies``: copied fragments found with the pseudo-matrix Bloom filter."""

    #: a pair is reported when the copier holds at least this share of the source's shingles
    min_share: Annotated[float, Field(gt=0.0, le=1.0)] = 0.05
    #: ... and at least this many of them (a shared phrase of a tiny source is not a copy)
    min_shared: Annotated[int, Field(ge=1)] = 5
    #: shingles found in more than this many documents are left out (0: keep all)
    max_df: Annotated[int, Field(ge=0)] = 100
    #: Bloom filter rows: m bits, k hash functions, designed false-positive rate p*
    row_bits: int = 1 << 16
    hashes: int = 7
    target_fp: float = 0.01

    @model_validator(mode="after")
    def _bloom_params_valid(self) -> CopiesConfig:
        self.bloom_params()  # its ValueError names the key
        return self

    def bloom_params(self) -> BloomParams:
        return BloomParams(row_bits=self.row_bits, hashes=self.hashes, target_fp=self.target_fp)


class TfidfConfig(_Section):
    """TF-IDF cosine over lemmas (:mod:`neardup.fingerprint.tfidf`): per-document vectors written by the
    indexer, corpus statistics in a companion index, and the proxy's ``neardup_mode=tfidf``."""

    #: The indexer writes ``neardup.tf`` vectors and keeps the statistics index up to date.
    enabled: bool = False
    #: Terms kept in a stored vector (chosen by bench/engines.py).
    top_k: Annotated[int, Field(ge=1, le=4096)] = 64
    #: Weigh term frequencies as 1 + ln tf (true) or tf.
    sublinear_tf: bool = True
    #: Cosine at or above which ``neardup_mode=tfidf`` folds hits together.
    threshold: Threshold = 0.7
    #: A synonym list (one group a line); empty: none.
    synonyms: ExistingFileOrEmpty = ""
    #: Name of the statistics index of an index; ``{index}`` is replaced by the concrete index name.
    stats_index: str = "neardup-tfidf-{index}"
    #: Statistics documents per index (a power of 2): terms are split over them by their top bits.
    stats_parts: Annotated[int, Field(ge=1, le=4096)] = 16

    @field_validator("stats_index")
    @classmethod
    def _names_the_index(cls, value: str) -> str:
        if value.count("{index}") != 1 or value.replace("{index}", "") != value.replace("{index}", "").lower():
            raise ValueError("must contain {index} once and otherwise be lowercase, e.g. neardup-tfidf-{index}")
        if value.startswith(("{index}", "-", "_", "+")):
            raise ValueError("must start with a fixed lowercase prefix (a pattern such as news-* would "
                             "otherwise also match the statistics index), e.g. neardup-tfidf-{index}")
        return value

    @field_validator("stats_parts")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError("must be a power of 2 (1, 2, 4, ... 4096)")
        return value


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"


class Config(_Section):
    upstream: UpstreamConfig = Field(default_factory=UpstreamConfig)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    collapse: CollapseConfig = Field(default_factory=CollapseConfig)
    fingerprint: FingerprintParams = Field(default_factory=FingerprintParams)
    indexer: IndexerConfig = Field(default_factory=IndexerConfig)
    tfidf: TfidfConfig = Field(default_factory=TfidfConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    copies: CopiesConfig = Field(default_factory=CopiesConfig)
    enrich: EnrichConfig = Field(default_factory=EnrichConfig)


def _strip_annotated(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _fields_of(annotation: Any) -> dict[str, Any] | None:
    """The keys of a section (a pydantic model or a dataclass) and their types, else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {name: field.annotation for name, field in annotation.model_fields.items()}
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return get_type_hints(annotation)
    return None


def _annotation_at(path: Sequence[str]) -> Any | None:
    """The declared type of the key at ``path`` (``("collapse", "indices", "news", "mode")``),
    or None when there is no such key. A ``dict[str, X]`` level takes any name."""
    annotation: Any = Config
    for part in path:
        annotation = _strip_annotated(annotation)
        if get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
            continue
        fields = _fields_of(annotation)
        if fields is None or part not in fields:
            return None
        annotation = fields[part]
    return _strip_annotated(annotation)


def _kind(annotation: Any) -> Literal["list", "table", "scalar"]:
    if get_origin(annotation) is list:
        return "list"
    if get_origin(annotation) is dict or _fields_of(annotation) is not None:
        return "table"
    return "scalar"


def _parse_env_value(name: str, raw: str, annotation: Any) -> Any:
    """The value of one variable, read according to the type of the key it sets.

    Lists: JSON (``["a", "b"]``) or comma-separated (``a,b``; one item without a comma).
    Tables: a JSON object. Everything else stays a string for the model to convert, so a
    password may contain commas or brackets.
    """
    kind = _kind(annotation)
    text = raw.strip()
    if kind == "scalar":
        return raw
    if kind == "list" and not text.startswith("["):
        return [item.strip() for item in text.split(",") if item.strip()]
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        example = '["a", "b"] or a,b' if kind == "list" else '{"key": value}'
        raise ConfigError(f"{name} = {raw!r}: not valid JSON ({exc.msg} at character {exc.pos}); "
                          f"expected {example}") from None
    expected = list if kind == "list" else dict
    if not isinstance(value, expected):
        raise ConfigError(f"{name} = {raw!r}: expected a JSON {'array' if kind == 'list' else 'object'}")
    return value


def _env_overrides(environ: Mapping[str, str]) -> list[tuple[tuple[str, ...], str, Any]]:
    """``NEARDUP_SECTION__KEY=value`` variables as (key path, variable name, parsed value).

    Variables without a double underscore (``NEARDUP_CONFIG``, ``NEARDUP_TEST_ES_URL``,
    ``NEARDUP_ES_PORT``) are not configuration keys and are left alone. Shorter paths come
    first, so ``NEARDUP_COLLAPSE__INDICES__NEWS`` refines ``NEARDUP_COLLAPSE__INDICES``.
    """
    overrides = []
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = tuple(part.lower() for part in name[len(ENV_PREFIX):].split("__"))
        if not all(path):
            raise ConfigError(f"{name}: not a configuration variable; the form is "
                              "NEARDUP_<SECTION>__<KEY>, e.g. NEARDUP_COLLAPSE__THRESHOLD")
        overrides.append((path, name, _parse_env_value(name, raw, _annotation_at(path))))
    return sorted(overrides, key=lambda item: (len(item[0]), item[0]))


def _apply(data: dict[str, Any], path: tuple[str, ...], name: str, value: Any) -> None:
    """Set the key at ``path`` to ``value``, creating the tables on the way."""
    node = data
    for depth, part in enumerate(path[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            key = ".".join(path[:depth + 1])
            raise ConfigError(f"{name}: {key} is not a table, so it has no key {path[depth + 1]!r}")
    node[path[-1]] = value


def _env_source(loc: tuple[str, ...], env_paths: Mapping[tuple[str, ...], str]) -> str:
    """`` (from NEARDUP_...)`` when the erroneous key was set by a variable."""
    for path, name in env_paths.items():
        if loc[:len(path)] == path or path[:len(loc)] == loc:
            return f" (from {name})"
    return ""


def _describe(error: Mapping[str, Any], env_paths: Mapping[tuple[str, ...], str]) -> str:
    loc = tuple(str(part) for part in error["loc"])
    key = ".".join(loc)
    source = _env_source(loc, env_paths)
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        fields = _fields_of(_annotation_at(loc[:-1]))
        allowed = f"; allowed: {', '.join(fields)}" if fields else ""
        return f"{key}{source}: unknown key{allowed}"
    if error["type"] == "value_error" and isinstance(error.get("input"), Mapping):
        # A whole-section check (e.g. FingerprintParams.__post_init__) names its own key.
        return f"{key}.{message}{source}"
    return f"{key} = {error.get('input')!r}{source}: {message}"


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
    named_by = "--config" if path else ENV_CONFIG_FILE if environ.get(ENV_CONFIG_FILE) else ""
    chosen = path or environ.get(ENV_CONFIG_FILE) or default_config_path()
    data: dict[str, Any] = {}
    if chosen is not None:
        file = Path(chosen)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (FileNotFoundError, IsADirectoryError):
            raise ConfigError(f"configuration file not found: {file}"
                              + (f" (named by {named_by})" if named_by else "")) from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    env_paths = {}
    for key_path, name, value in _env_overrides(environ):
        _apply(data, key_path, name, value)
        env_paths[key_path] = name
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(e, env_paths) for e in exc.errors(include_url=False)]
        source = f" (from {chosen} and NEARDUP_* variables)" if chosen else ""
        raise ConfigError("invalid configuration" + source + ":\n  " + "\n  ".join(lines)) from None


def override(config: Config, values: Mapping[tuple[str, str], Any], given_as: Mapping[tuple[str, str], str]) -> Config:
    """``config`` with ``values`` (``(section, key) -> value``) set, each changed section validated
    again, so a value given on the command line has the limits its key has in the file.

    :class:`ConfigError` on one line, as for the file: ``proxy.port = 99999: <reason> (given as
    --port)``, the option named by ``given_as``; several problems are joined by ``; ``."""
    sections: dict[str, dict[str, Any]] = {}
    for (section, key), value in values.items():
        sections.setdefault(section, {})[key] = value
    updated = {}
    problems = []
    for name, keys in sections.items():
        current = getattr(config, name)
        try:
            updated[name] = type(current).model_validate({**current.model_dump(), **keys})
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                key = str(error["loc"][0]) if error["loc"] else ""
                option = given_as.get((name, key))
                problem = _describe({**error, "loc": (name, *error["loc"])}, {})
                problems.append(problem + (f" (given as {option})" if option else ""))
    if problems:
        raise ConfigError("; ".join(problems))
    return config.model_copy(update=updated)


def matching_override(config: CollapseConfig, index: str) -> str | None:
    """The ``[collapse.indices]`` pattern that applies to ``index``: the first one (in the
    order of the file) whose shell-style pattern matches it, or None."""
    from fnmatch import fnmatchcase

    return next((pattern for pattern in config.indices if fnmatchcase(index, pattern)), None)


def collapse_settings_for(config: CollapseConfig, index: str) -> tuple[bool, float, Mode]:
    """(enabled, threshold, mode) for one index name, applying the first matching override
    (:func:`matching_override`)."""
    enabled, threshold, mode = config.enabled, config.threshold, config.mode
    pattern = matching_override(config, index)
    if pattern is not None:
        override = config.indices[pattern]
        enabled = override.enabled if override.enabled is not None else enabled
        threshold = override.threshold if override.threshold is not None else threshold
        mode = override.mode if override.mode is not None else mode
    return enabled, threshold, mode


def enrich_settings_for(config: EnrichConfig, index: str) -> EnrichIndex | None:
    """The ``[enrich.indices]`` settings of the first pattern (in file order) matching ``index``,
    or None: writes to ``index`` are not enriched."""
    from fnmatch import fnmatchcase

    return next((value for pattern, value in config.indices.items() if fnmatchcase(index, pattern)), None)
