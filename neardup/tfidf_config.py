"""The ``[tfidf]`` configuration turned into the objects of :mod:`neardup.fingerprint.tfidf` (shell: reads
the synonym file).

The indexer weighs documents with :func:`weigher_from_config`; the proxy only needs the version
its vectors must carry (:func:`tfidf_version_of`), which depends on the token parameters of the
fingerprint scheme, ``top_k``, ``sublinear_tf`` and the synonym list's content.
"""

from __future__ import annotations

from pathlib import Path

from neardup.config import Config, ConfigError
from neardup.fingerprint import Fingerprinter
from neardup.fingerprint.tfidf import SynonymFormatError, TfidfParams, TfidfWeigher


def tfidf_params_of(config: Config) -> TfidfParams:
    return TfidfParams(top_k=config.tfidf.top_k, sublinear_tf=config.tfidf.sublinear_tf)


def weigher_from_config(config: Config, fingerprinter: Fingerprinter | None = None) -> TfidfWeigher:
    """A :class:`TfidfWeigher` for the configuration (sharing ``fingerprinter``'s word caches if given).

    :class:`ConfigError` naming ``tfidf.synonyms`` when the synonym list cannot be read or parsed.
    """
    fingerprinter = fingerprinter or Fingerprinter(config.fingerprint)
    params = tfidf_params_of(config)
    path = config.tfidf.synonyms
    if not path:
        return TfidfWeigher(fingerprinter, params)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
        return TfidfWeigher.with_synonym_text(fingerprinter, params, text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"tfidf.synonyms = {path!r}: cannot read it: {exc}") from None
    except SynonymFormatError as exc:
        raise ConfigError(f"tfidf.synonyms = {path!r}: {exc}") from None


def tfidf_version_of(config: Config) -> str:
    """The ``t1-…`` version of the vectors the configuration makes and compares."""
    return weigher_from_config(config).version
