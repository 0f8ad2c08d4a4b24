"""The input formats of ``neardup load``: every document becomes one :class:`~neardup.indexer.jsonlines.Line`.

* ``jsonl`` (``.jsonl``, ``.ndjson``, and any other name): one JSON object a line, read by
  :func:`~neardup.indexer.jsonlines.read_lines`, so a loaded ``_source`` keeps every byte of its line;
* ``json`` (``.json``): one JSON array of objects;
* ``csv`` (``.csv``): a header row naming the fields, then one document a row (every value a
  string; empty cells are left out);
* ``reuters`` (``.sgm`` files, or a ``.tar.gz`` archive of them such as ``reuters21578.tar.gz``):
  Reuters-21578 SGML, one document a story with ``id``, ``title``, ``body``, ``date``,
  ``topics`` and ``places`` (:mod:`neardup.corpora`).

The documents of the last three are written as compact JSON; their line number is their
position in the file (1-based). A file that is not what its format says stops the load with
one message (:class:`~neardup.indexer.errors.UsageError`).
"""

from __future__ import annotations

import csv
import io
import json
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

from neardup.corpora import reuters_archive_stories, reuters_stories
from neardup.indexer.errors import UsageError
from neardup.indexer.jsonlines import Line, read_lines

Format = Literal["jsonl", "json", "csv", "reuters"]
FORMATS: tuple[Format, ...] = ("jsonl", "json", "csv", "reuters")


def format_of(path: str | None) -> Format:
    """The format a file name implies (JSON lines for stdin and unknown names)."""
    name = (path or "").lower()
    if name.endswith(".json"):
        return "json"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".sgm", ".tar.gz", ".tgz")):
        return "reuters"
    return "jsonl"


def read_documents(stream: BinaryIO, fmt: Format, name: str) -> Iterator[Line]:
    """The documents of ``stream`` (named ``name`` in messages) in format ``fmt``."""
    if fmt == "jsonl":
        return read_lines(stream)
    if fmt == "json":
        return _lines(_json_array(stream.read(), name))
    if fmt == "csv":
        return _lines(_csv_rows(stream.read(), name))
    return _lines(_reuters(stream.read(), name))


def _lines(documents: Iterator[Any]) -> Iterator[Line]:
    for number, document in enumerate(documents, start=1):
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
        yield Line(number, text.encode("utf-8"), text)


def _text(data: bytes, name: str, what: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: not UTF-8 (invalid byte at offset {exc.start}); {what} files are read as UTF-8") \
            from None


def _json_array(data: bytes, name: str) -> Iterator[Any]:
    try:
        value = json.loads(_text(data, name, "JSON"))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         "--format json reads one array of objects, --format jsonl one object a line") from None
    if not isinstance(value, list):
        raise UsageError(f"{name}: a JSON {type(value).__name__} where --format json needs an array of objects "
                         "(use --format jsonl for one object a line)")
    return iter(value)   # an element that is not an object is a bad line, reported by number


def _csv_rows(data: bytes, name: str) -> Iterator[dict[str, str]]:
    reader = csv.reader(io.StringIO(_text(data, name, "CSV"), newline=""))
    header = next(reader, None)
    if not header or not any(field.strip() for field in header):
        raise UsageError(f"{name}: no header row: --format csv needs the field names in the first row")
    names = [field.strip() for field in header]
    try:
        for row in reader:
            if row:
                yield {key: value for key, value in zip(names, row) if key and value != ""}
    except csv.Error as exc:
        raise UsageError(f"{name}: not valid CSV at line {reader.line_num}: {exc}") from None


def _reuters(data: bytes, name: str) -> Iterator[dict[str, Any]]:
    if Path(name).suffix.lower() == ".sgm":
        stories = list(reuters_stories(data.decode("latin-1")))
    else:
        try:
            stories = list(reuters_archive_stories(io.BytesIO(data)))
        except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
            raise UsageError(f"{name}: not a readable .tar.gz archive ({exc}); --format reuters reads "
                             "Reuters-21578 .sgm files or their archive") from None
    if not stories:
        raise UsageError(f"{name}: no Reuters-21578 story (<REUTERS> element) found")
    return iter(stories)
