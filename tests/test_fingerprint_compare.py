"""``neardup compare``: matrices, --json schema, --raw, --shingle, --no-lemmas, bad files."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from neardup.cli import main
from neardup.corpora import reuters_documents


@pytest.fixture(scope="module")
def stories() -> list[str]:
    return [d["body"] for d in itertools.islice(reuters_documents(with_body_only=True), 200)
            if len(d["body"].split()) > 150][:3]


@pytest.fixture()
def files(tmp_path: Path, stories: list[str]) -> list[str]:
    """a: a story; b: a, lightly edited; c: the first half of a; d: another story."""
    a = stories[0]
    words = a.split()
    b = " ".join(w if k % 25 else w.upper() + " extra" for k, w in enumerate(words))
    c = " ".join(words[: len(words) // 2])
    paths = []
    for name, text in zip("abcd", [a, b, c, stories[1]]):
        path = tmp_path / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return paths


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["compare", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_output_schema_and_values(capsys: pytest.CaptureFixture[str], files: list[str]) -> None:
    out = run_json(capsys, *files)
    assert list(out) == ["files", "resemblance", "containment", "estimated_resemblance", "estimated_containment"]
    assert out["files"] == files
    for key in list(out)[1:]:
        matrix = out[key]
        assert len(matrix) == 4 and all(len(row) == 4 for row in matrix)
        assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for row in matrix for v in row)
        assert all(matrix[i][i] == 1.0 for i in range(4))
    res, con = out["resemblance"], out["containment"]
    assert all(res[i][j] == res[j][i] for i in range(4) for j in range(4))
    assert 0.5 < res[0][1] < 1.0  # a light edit
    assert con[2][0] == 1.0 and con[0][2] < 0.6  # c is the first half of a: all of c is in a
    assert res[0][3] < 0.05  # another story
    est_res, est_con = out["estimated_resemblance"], out["estimated_containment"]
    assert all(abs(est_res[i][j] - res[i][j]) <= 0.15 for i in range(4) for j in range(4))
    assert est_con[2][0] > 0.8


def test_text_output_lists_every_pair(capsys: pytest.CaptureFixture[str], files: list[str]) -> None:
    assert main(["compare", *files[:3]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "resemblance" in lines[0] and "A in B" in lines[0]
    assert len(lines) == 2 + 3  # header lines, then pairs (a,b) (a,c) (b,c)
    assert lines[2].split()[:2] == files[:2]


def test_raw_no_lemmas_and_shingle_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_text("The cats were running across the gardens quickly today", encoding="utf-8")
    two.write_text("the cat was running across the garden quickly today", encoding="utf-8")
    canonical = run_json(capsys, str(one), str(two))
    raw = run_json(capsys, "--raw", str(one), str(two))
    no_lemmas = run_json(capsys, "--no-lemmas", str(one), str(two))
    assert canonical["resemblance"][0][1] == 1.0  # stems and stop-words make them equal
    assert raw["resemblance"][0][1] < 0.3 and no_lemmas["resemblance"][0][1] < 0.3
    # --raw: unhashed, only case-folded: 7 3-shingles each, only "running across the" shared
    raw3 = run_json(capsys, "--raw", "--shingle", "3", str(one), str(two))
    assert raw3["resemblance"][0][1] == pytest.approx(1 / 13, abs=1e-6)
    assert run_json(capsys, "--shingle", "1", str(one), str(two))["resemblance"][0][1] == 1.0


def test_language_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_text("running companies", encoding="utf-8")
    two.write_text("run company", encoding="utf-8")
    assert run_json(capsys, str(one), str(two))["resemblance"][0][1] == 1.0
    assert run_json(capsys, "--language", "none", str(one), str(two))["resemblance"][0][1] == 0.0


@pytest.mark.parametrize(("content", "message"), [
    (b"\x00\x01binary", "not a text file (contains NUL bytes)"),
    (b"caf\xe9", "not UTF-8 text (invalid byte at offset 3)"),
])
def test_non_text_files_are_clear_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path, files: list[str],
                                         content: bytes, message: str) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(content)
    assert main(["compare", files[0], str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"neardup compare: {bad}: {message}" in err and "Traceback" not in err


def test_missing_file_directory_and_too_few_files(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  files: list[str]) -> None:
    assert main(["compare", files[0], str(tmp_path / "nope.txt")]) == 2
    assert "nope.txt: cannot read: No such file or directory" in capsys.readouterr().err
    assert main(["compare", files[0], str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["compare", files[0]]) == 2
    assert "give at least two files" in capsys.readouterr().err
    assert main(["compare", "--shingle", "0", *files[:2]]) == 2
    assert "--shingle: shingle_size = 0: must be a whole number from 1 to 32" in capsys.readouterr().err


def test_empty_and_html_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty, page, text = tmp_path / "empty.txt", tmp_path / "page.html", tmp_path / "text.txt"
    empty.write_text("", encoding="utf-8")
    page.write_text("<html><body><p>Crude oil prices rose sharply</p><script>x()</script></body></html>",
                    encoding="utf-8")
    text.write_text("Crude oil prices rose sharply", encoding="utf-8")
    out = run_json(capsys, str(empty), str(page), str(text))
    assert out["resemblance"][0] == [0.0, 0.0, 0.0] and out["containment"][0] == [0.0, 0.0, 0.0]
    assert out["resemblance"][1][2] == 1.0 and out["estimated_resemblance"][1][2] == 1.0


def test_command_line_entry_point_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00")
    done = subprocess.run([sys.executable, "-m", "neardup", "compare", str(bad), str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not a text file" in done.stderr and "Traceback" not in done.stderr


def test_encoding_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``--encoding`` names the files' encoding; UTF-8 stays the default, and a file that does
    not decode is one line naming the file and the option."""
    text = "Crème brûlée prices rose sharply in Zürich and Köln"
    latin, utf8 = tmp_path / "latin.txt", tmp_path / "utf8.txt"
    latin.write_bytes(text.encode("latin-1"))
    utf8.write_text(text, encoding="utf-8")
    assert main(["compare", str(latin), str(utf8)]) == 2
    err = capsys.readouterr().err
    assert err == f"neardup compare: {latin}: not UTF-8 text (invalid byte at offset 2); name the files' " \
                  "encoding with --encoding\n"
    out = run_json(capsys, "--encoding", "latin-1", str(latin), str(latin))
    assert out["resemblance"][0][1] == 1.0
    both = run_json(capsys, str(utf8), str(utf8))
    assert out["resemblance"] == both["resemblance"]
    assert main(["compare", "--encoding", "cp1251", str(utf8), str(latin)]) == 0  # every byte is cp1251
    capsys.readouterr()
    assert main(["compare", "--encoding", "ascii", str(latin), str(utf8)]) == 2
    assert "not ascii text (invalid byte at offset 2)" in capsys.readouterr().err
    assert main(["compare", "--encoding", "klingon", str(latin), str(utf8)]) == 2
    assert capsys.readouterr().err == "neardup compare: --encoding klingon: unknown encoding\n"
