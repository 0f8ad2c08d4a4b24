"""``neardup compare --measure tfidf``: cosine matrices on real articles, reordering, synonyms,
the table, and bad input."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from neardup.cli import main
from neardup.corpora import ru_news_documents


@pytest.fixture(scope="module")
def articles() -> list[str]:
    docs = (d for d in ru_news_documents() if "<" not in d["body"] and len(d["body"].split()) > 200)
    return [d["title"] + "\n" + d["body"] for d in itertools.islice(docs, 2)]


@pytest.fixture()
def files(tmp_path: Path, articles: list[str]) -> list[str]:
    """a: an article; b: its sentences in reverse order; c: another article; d: a with synonyms swapped."""
    a = articles[0]
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", a.replace("\n", " ")) if s]
    b = " ".join(reversed(sentences))
    d = a.replace("заявил", "сообщил").replace("России", "РФ")
    paths = []
    for name, text in zip("abcd", [a, b, articles[1], d]):
        path = tmp_path / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return paths


def run_json(capsys, *args: str) -> dict:
    assert main(["compare", "--measure", "tfidf", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_cosine_matrices_are_symmetric_and_ignore_order(capsys, files):
    out = run_json(capsys, *files)
    assert out["files"] == files and out["measure"] == "tfidf"
    for key in ("cosine", "stored_cosine"):
        m = np.array(out[key])
        assert m.shape == (4, 4)
        assert np.allclose(m, m.T)
        assert np.allclose(np.diag(m), 1.0, atol=1e-6)
        assert m[0][1] == pytest.approx(1.0, abs=1e-6)          # reordered sentences: the same bag of lemmas
        assert m[0][2] < 0.3                                      # another article
    # the stored (top-64, 16-bit) cosine approximates the exact one
    assert abs(out["stored_cosine"][0][3] - out["cosine"][0][3]) < 0.1


def test_synonym_list_maps_groups_to_one_term(capsys, files, tmp_path):
    without = run_json(capsys, files[0], files[3])["cosine"][0][1]
    synonyms = tmp_path / "synonyms.txt"
    synonyms.write_text("# news verbs\nзаявить, сообщить\nРоссия, РФ\n", encoding="utf-8")
    with_list = run_json(capsys, "--synonyms", str(synonyms), files[0], files[3])["cosine"][0][1]
    assert without < 1.0 - 1e-6
    assert with_list == pytest.approx(1.0, abs=1e-6)


def test_table_output(capsys, files):
    assert main(["compare", "--measure", "tfidf", *files[:3]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "TF-IDF cosine" in lines[0] and "exact (stored)" in lines[1]
    assert len(lines) == 2 + 3
    assert re.search(r"1\.000 \(1\.000\)$", lines[2])


@pytest.mark.parametrize("content, option, message", [
    ("solo\n", "--synonyms", "synonyms line 1: a group needs at least two entries"),
    (None, "--top-k", "--top-k: top_k = 0"),
])
def test_bad_options_are_clear_errors(capsys, files, tmp_path, content, option, message):
    if option == "--synonyms":
        path = tmp_path / "bad.txt"
        path.write_text(content, encoding="utf-8")
        value = str(path)
    else:
        value = "0"
    assert main(["compare", "--measure", "tfidf", option, value, *files[:2]]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
