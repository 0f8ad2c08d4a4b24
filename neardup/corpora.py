"""Readers for the real corpora in ``../shared/data`` (never copied into the repository).

* Reuters-21578: 22 SGML files inside ``reuters21578.tar.gz``, read as latin-1 (one file
  holds a byte that is not UTF-8); :func:`reuters_stories` reads one file's text, as
  ``neardup load --format reuters`` does. Each story becomes ``{"id", "title", "body", "date",
  "topics", "places"}``; entities are decoded and control characters dropped.
* Russian news: ``ru-news/*.jsonlines.zip``, one JSON object a line; each article becomes
  ``{"id", "url", "title", "body", "summary", "keywords", "source"}``.

Both are generators: a caller that wants a sample stops early and reads no further.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

#: Where the shared data lives, relative to the project root; overridable by NEARDUP_DATA_DIR.
DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "data"

_STORY = re.compile(r"<REUTERS\b([^>]*)>(.*?)</REUTERS>", re.S)
_NEWID = re.compile(r'NEWID="(\d+)"')
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The data folder: the argument, else $NEARDUP_DATA_DIR, else ``../shared/data``."""
    chosen = Path(path or os.environ.get("NEARDUP_DATA_DIR") or DEFAULT_DATA_DIR)
    if not chosen.is_dir():
        raise FileNotFoundError(
            f"data folder not found: {chosen} (give a path, or set NEARDUP_DATA_DIR)")
    return chosen


def _element(block: str, tag: str) -> str:
    match = re.search(rf"<{tag}>(.*?)</{tag}>", block, re.S)
    return _clean(match.group(1)) if match else ""


def _labels(block: str, tag: str) -> list[str]:
    match = re.search(rf"<{tag}>(.*?)</{tag}>", block, re.S)
    return re.findall(r"<D>(.*?)</D>", match.group(1)) if match else []


def _clean(text: str) -> str:
    return _CONTROL.sub("", html.unescape(text)).strip()


def reuters_documents(path: str | os.PathLike[str] | None = None,
                      with_body_only: bool = False) -> Iterator[dict[str, Any]]:
    """Stories of Reuters-21578 in NEWID order, from the tarball or an unpacked folder."""
    base = Path(path) if path and Path(path).is_file() else data_dir(path) / "reuters21578.tar.gz"
    with open(base, "rb") as handle:
        for story in reuters_archive_stories(handle):
            if story["body"] or not with_body_only:
                yield story


def reuters_archive_stories(archive: BinaryIO) -> Iterator[dict[str, Any]]:
    """The stories of the ``reut2-NNN.sgm`` files of a ``.tar.gz`` archive, file by file."""
    for raw in _reuters_files(archive):
        yield from reuters_stories(raw)


def reuters_stories(sgml: str) -> Iterator[dict[str, Any]]:
    """The stories of one Reuters-21578 SGML file's text (read as latin-1)."""
    for attrs, block in _STORY.findall(sgml):
        newid = _NEWID.search(attrs)
        yield {
            "id": newid.group(1) if newid else "",
            "title": _element(block, "TITLE"),
            "body": _element(block, "BODY"),
            "date": _element(block, "DATE"),
            "topics": _labels(block, "TOPICS"),
            "places": _labels(block, "PLACES"),
        }


def _reuters_files(tarball: BinaryIO) -> Iterator[str]:
    with tarfile.open(fileobj=tarball, mode="r:gz") as archive:
        members = sorted(
            (m for m in archive.getmembers() if re.search(r"reut2-\d{3}\.sgm$", m.name)),
            key=lambda m: m.name,
        )
        for member in members:
            handle = archive.extractfile(member)
            if handle is not None:
                yield handle.read().decode("latin-1")


def ru_news_documents(path: str | os.PathLike[str] | None = None) -> Iterator[dict[str, Any]]:
    """Russian news articles: RT files first, then Nezavisimaya Gazeta, in file order."""
    folder = data_dir(path)
    folder = folder / "ru-news" if (folder / "ru-news").is_dir() else folder
    files = sorted(folder.glob("russia_today_*.jsonlines.zip")) + sorted(folder.glob("ng_*.jsonlines.zip"))
    for file in files:
        source = file.name.split(".")[0]
        with zipfile.ZipFile(file) as archive:
            for name in archive.namelist():
                with archive.open(name) as handle:
                    lines = io.TextIOWrapper(handle, encoding="utf-8")
                    for number, line in enumerate(lines):
                        if not line.strip():
                            continue
                        item = json.loads(line)
                        yield {
                            "id": f"{source}-{number:05d}",
                            "url": item.get("url", ""),
                            "title": item.get("title") or "",
                            "body": item.get("content") or "",
                            "summary": item.get("summary") or "",
                            "keywords": item.get("keywords") or [],
                            "source": source,
                        }
