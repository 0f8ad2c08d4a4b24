#!/usr/bin/env python
"""Throughput of fingerprinting, on one core, against its targets.

    taskset -c 1 .venv/bin/python bench/fingerprint.py [--repeat 3] [--results docs/benchmarks.md]

1. **Russian news, cold** (target ≥ 400 articles/s): a fresh process and a fresh
   ``Fingerprinter`` fingerprint title + body of all 9,204 articles, loading the pymorphy3
   dictionaries included; the time spent lemmatising words for the first time (the word step
   of every distinct word) is measured separately. Then a warm second pass.
2. **Reuters, cold** (target ≥ 2,000 stories/s): title + body of all 21,578 stories, then warm,
   one by one (``fingerprint``) and in batches of 500 (``fingerprint_many``).
3. **similar_pairs** on 1,000 Reuters signatures and on 50 stories × 20 copies, against an
   all-pairs comparison.
4. **Token lists → signatures vs datasketch** (target ≥ 10× ``MinHash.bulk``): the canonical
   token lists of 5,000 Reuters stories and 1,000 Russian articles (made beforehand, not
   timed). datasketch gets each document's shingles of the scheme's length (``shingle_size``,
   the same windows ours hashes) as UTF-8 strings (building them is timed: it starts from the
   same token lists) and hashes them with its default SHA-1; ``MinHash(num_perm=84).update_batch``
   per document and ``MinHash.bulk`` are both timed. Ours: ``Fingerprinter.signatures`` (a
   fresh instance each repetition, so token hashing is not served from a warm cache), with
   the compiled kernels (:mod:`fingerprint.jit`) and NumPy only, and ``fingerprint_tokens``
   one by one (with supershingles). Best of ``--repeat`` runs, interleaved.
5. **One-time cost of the compiled kernels**, each in a fresh process: ``import numba``, the
   first calls of every kernel with numba's cache filled (loading machine code), and with an
   empty cache (compiling; ``NUMBA_CACHE_DIR`` pointed at a new directory).

Times are CPU seconds of this process (``time.process_time``; everything runs on one core).
The machine's load average is printed before and after: other work on the same cores slows
every figure (memory bandwidth and caches are shared), so compare figures of one run.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECTION = "## Fingerprint"


def cpu(function: Callable[[], Any]) -> tuple[Any, float]:
    start = time.process_time()
    result = function()
    return result, time.process_time() - start


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_kernels() -> None:
    """Import numba and load (or compile) every kernel, as a process's first fingerprints would."""
    from neardup.fingerprint import Fingerprinter

    for _ in range(2):
        fp = Fingerprinter()
        for _ in range(2):
            fp.fingerprint("alpha beta gamma delta", language="none")
            fp.signatures([["alpha", "beta", "gamma", "delta"]])


def russian_cold(texts: list[str]) -> dict[str, float]:
    """Whole pipeline over the Russian corpus from a cold start (this process's first use)."""
    from neardup.fingerprint import Fingerprinter
    from neardup.fingerprint.canonical import morph_analyzer

    fp = Fingerprinter()
    spent = {"seconds": 0.0, "words": 0}
    normaliser = fp.normaliser("ru")
    compute = normaliser.compute

    def timed_compute(words: list[str]) -> list[str | None]:
        start = time.process_time()
        result = compute(words)
        spent["seconds"] += time.process_time() - start
        spent["words"] += len(words)
        return result

    normaliser.compute = timed_compute  # type: ignore[method-assign]
    start = time.process_time()
    _, dictionary_seconds = cpu(morph_analyzer)
    _, kernel_seconds = cpu(load_kernels)
    for text in texts:
        fp.fingerprint(text)
    total = time.process_time() - start
    normaliser.compute = compute  # type: ignore[method-assign]
    _, warm = cpu(lambda: [fp.fingerprint(t) for t in texts])
    return {"docs": len(texts), "total": total, "dictionary": dictionary_seconds, "kernels": kernel_seconds,
            "lemma_seconds": spent["seconds"], "distinct_words": spent["words"], "warm": warm}


def reuters(texts: list[str]) -> dict[str, float]:
    from neardup.fingerprint import Fingerprinter

    fp = Fingerprinter()
    _, cold = cpu(lambda: [fp.fingerprint(t) for t in texts])
    _, warm = cpu(lambda: [fp.fingerprint(t) for t in texts])
    _, batched = cpu(lambda: [fp.fingerprint_many(texts[k:k + 500]) for k in range(0, len(texts), 500)])
    return {"docs": len(texts), "cold": cold, "warm": warm, "batched": batched}


def pairs_bench(texts: list[str]) -> dict[str, float]:
    """``similar_pairs`` on N = 1,000 Reuters signatures: CPU ms (best of 20) and recall against
    an all-pairs comparison of the same estimates."""
    import numpy as np

    from neardup.fingerprint import Fingerprinter, similar_pairs

    fp = Fingerprinter()
    prints = fp.fingerprint_many(texts[:6000])
    rng = np.random.default_rng(1)
    picked = rng.choice(len(prints), 1000, replace=False)
    signatures = np.stack([prints[k].signature for k in picked])
    counts = np.array([prints[k].shingle_count for k in picked])
    copies = np.repeat(signatures[:50], 20, axis=0), np.repeat(counts[:50], 20)  # 50 stories × 20 copies
    out: dict[str, float] = {}
    for name, (sigs, cnts) in (("random", (signatures, counts)), ("copies", copies)):
        for mode in ("resemblance", "containment"):
            best = min(cpu(lambda: similar_pairs(sigs, cnts, 0.8, mode))[1] for _ in range(20))
            i, j, _ = similar_pairs(sigs, cnts, 0.8, mode)
            equal = (sigs[:, None, :] == sigs[None, :, :]).sum(axis=2) / sigs.shape[1]
            if mode == "containment":
                a, b = cnts[:, None].astype(float), cnts[None, :].astype(float)
                with np.errstate(divide="ignore", invalid="ignore"):
                    both = np.maximum(np.clip(equal * (a + b) / ((1 + equal) * a), 0, 1),
                                      np.clip(equal * (a + b) / ((1 + equal) * b), 0, 1))
                equal = both
            equal = np.where((cnts[:, None] > 0) & (cnts[None, :] > 0), equal, 0)  # empty: never similar
            truth = {(x, y) for x, y in zip(*np.nonzero(np.triu(equal >= 0.8, 1) & (equal > 0)))}
            found = set(zip(i.tolist(), j.tolist()))
            out[f"{name}_{mode}_ms"] = best * 1000
            out[f"{name}_{mode}_pairs"] = len(truth)
            out[f"{name}_{mode}_recall"] = len(found & truth) / len(truth) if truth else 1.0
            out[f"{name}_{mode}_extra"] = len(found - truth)
    return out


def shingle_strings(tokens: list[str], size: int) -> list[bytes]:
    if len(tokens) < size:
        return [" ".join(tokens).encode("utf-8")] if tokens else []
    return [" ".join(tokens[i:i + size]).encode("utf-8") for i in range(len(tokens) - size + 1)]


def versus_datasketch(token_lists: list[list[str]], repeat: int) -> dict[str, float]:
    from datasketch import MinHash

    from neardup.fingerprint import Fingerprinter, jit

    best: dict[str, float] = {}
    size = Fingerprinter().params.shingle_size

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, float("inf")), seconds)

    token_lists = [t for t in token_lists if t]  # datasketch has no empty-set convention
    jit.kernels()  # loaded once per process: its cost is measured by jit_costs()
    Fingerprinter().signatures(token_lists[:10])
    for _ in range(repeat):
        strings, build = cpu(lambda: [shingle_strings(t, size) for t in token_lists])
        keep("ds_build", build)
        _, bulk = cpu(lambda: MinHash.bulk(strings, num_perm=84))
        keep("ds_bulk", bulk + build)

        def one_by_one() -> None:
            for s in strings:
                m = MinHash(num_perm=84)
                m.update_batch(s)

        _, single = cpu(one_by_one)
        keep("ds_single", single + build)
        for compiled, suffix in ((True, ""), (False, "_numpy")):
            jit.set_enabled(compiled)
            fresh = Fingerprinter()
            _, ours = cpu(lambda: fresh.signatures(token_lists))
            _, warm = cpu(lambda: fresh.signatures(token_lists))
            keep(f"ours_signatures{suffix}", ours)
            keep(f"ours_signatures_warm{suffix}", warm)
        jit.set_enabled(True)
        fresh = Fingerprinter()
        _, ours_fp = cpu(lambda: [fresh.fingerprint_tokens(t) for t in token_lists])
        keep("ours_fingerprint_tokens", ours_fp)
    best.update(stages(token_lists))
    best["docs"] = len(token_lists)
    best["size"] = size
    best["shingles"] = sum(len(set(shingle_strings(t, size))) for t in token_lists) / len(token_lists)
    return best


def stages(token_lists: list[list[str]]) -> dict[str, float]:
    """CPU seconds of the stages of a warm ``Fingerprinter.signatures`` call, with the compiled
    kernels (tokens → token hashes; fold + MinHash fused) and NumPy only (tokens → token
    hashes; shingle fold; MinHash)."""
    import numpy as np

    from neardup.fingerprint import Fingerprinter, jit
    from neardup.fingerprint.fingerprinter import _batches
    from neardup.fingerprint.hashing import minhash_batch, shingle_hashes_batch, signatures_from_token_hashes

    best: dict[str, float] = {}
    for compiled, suffix in ((True, ""), (False, "_numpy")) * 3:  # best of 3
        jit.set_enabled(compiled)
        fp = Fingerprinter()
        fp.signatures(token_lists)  # warm the token cache
        size, seed = fp.params.shingle_size, fp.params.seed
        spent = {f"stage_{name}{suffix}": 0.0 for name in ("tokens", "fold", "minhash")}
        first = 0
        for last in _batches(token_lists):  # the batches signatures() uses
            chunk = token_lists[first:last]
            offsets = np.concatenate(([0], np.cumsum([len(t) for t in chunk]))).astype(np.int64)
            hashes, seconds = cpu(lambda: fp._joined_token_hashes(chunk, offsets))
            spent[f"stage_tokens{suffix}"] += seconds
            if compiled:
                _, seconds = cpu(lambda: signatures_from_token_hashes(hashes, offsets, size, seed, fp._a))
                spent["stage_minhash"] += seconds  # the fold is fused into it
            else:
                (shingles, owner), seconds = cpu(lambda: shingle_hashes_batch(hashes, offsets, size, seed))
                spent["stage_fold_numpy"] += seconds
                _, seconds = cpu(lambda: minhash_batch(shingles, owner, len(chunk), fp._a))
                spent["stage_minhash_numpy"] += seconds
            first = last
        best.update({name: min(seconds, best.get(name, seconds)) for name, seconds in spent.items()})
    jit.set_enabled(True)
    return best


JIT_PROBE = """
import sys, time
sys.path.insert(0, {root!r})
start = time.process_time()
import numba
imported = time.process_time()
from neardup.fingerprint import Fingerprinter
tokens = [["alpha", "beta", "gamma", "delta"], ["x"]]
def calls():  # every kernel: token ids, first occurrences, insert, find, fold + minhash, minhash
    fp = Fingerprinter()
    for _ in range(2):
        fp.signatures(tokens)
        fp.fingerprint("alpha beta gamma delta", language="none")
begin = time.process_time(); calls(); first = time.process_time() - begin
begin = time.process_time(); calls(); again = time.process_time() - begin
print(imported - start, first - again)
"""


def jit_costs() -> dict[str, float]:
    """One-time costs of the compiled kernels, each in a fresh process (CPU seconds): ``import
    numba``; the first call of every kernel with an empty numba cache (compiling) and with the
    cache filled (loading the machine code)."""
    import subprocess
    import tempfile

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for name in ("compile", "cached"):
            result = subprocess.run([sys.executable, "-c", JIT_PROBE.format(root=str(ROOT))], env=env,
                                    capture_output=True, text=True, check=True)
            imported, first = map(float, result.stdout.split())
            out["jit_import"] = min(out.get("jit_import", float("inf")), imported)
            out[f"jit_{name}"] = first
    return out


def report(ru: dict[str, float], en: dict[str, float], ds: dict[str, float], pairs: dict[str, float],
           before: str, after: str) -> str:
    import datasketch
    import numpy

    rate = lambda n, s: f"{n / s:,.0f}"  # noqa: E731
    ds_docs = ds["docs"]
    lines = [
        SECTION,
        "",
        "```sh",
        "taskset -c 1 .venv/bin/python bench/fingerprint.py --results docs/benchmarks.md",
        "```",
        "",
        f"CPU: {cpu_model()}, one core (CPU seconds of the process); Python {platform.python_version()}, "
        f"NumPy {numpy.__version__}, datasketch {datasketch.__version__}. Load average (1/5/15 min) "
        f"before: {before}, after: {after} — the cores are shared with whatever else runs there, so "
        "absolute figures are noisy (±30 % between runs seen); ratios within one run are steadier.",
        "",
        "| measurement | documents | CPU s | documents/s | target |",
        "|---|---:|---:|---:|---|",
        f"| Russian news, whole pipeline, **cold** (incl. dictionary load and first-time lemmatisation) "
        f"| {ru['docs']:,} | {ru['total']:.2f} | **{rate(ru['docs'], ru['total'])}** | ≥ 400 |",
        f"| Russian news, warm (all words cached) | {ru['docs']:,} | {ru['warm']:.2f} | "
        f"{rate(ru['docs'], ru['warm'])} | |",
        f"| Reuters title + body, **cold** | {en['docs']:,} | {en['cold']:.2f} | **{rate(en['docs'], en['cold'])}** "
        "| ≥ 2,000 |",
        f"| Reuters, warm, one by one (`fingerprint`) | {en['docs']:,} | {en['warm']:.2f} | "
        f"{rate(en['docs'], en['warm'])} | |",
        f"| Reuters, warm, batches of 500 (`fingerprint_many`) | {en['docs']:,} | {en['batched']:.2f} | "
        f"{rate(en['docs'], en['batched'])} | |",
        "",
        f"Russian cold start: pymorphy3 dictionaries {ru['dictionary']:.2f} s; compiled kernels (import numba, "
        f"load the cached machine code) {ru['kernels']:.2f} s; first-time word step "
        f"(stop list, pymorphy3 parse, lemma, mmh3) of {ru['distinct_words']:,} distinct tokens "
        f"{ru['lemma_seconds']:.2f} s = {1e6 * ru['lemma_seconds'] / max(1, ru['distinct_words']):.0f} µs a word, "
        f"{100 * ru['lemma_seconds'] / ru['total']:.0f} % of the cold run; everything else "
        f"{ru['total'] - ru['lemma_seconds'] - ru['dictionary'] - ru['kernels']:.2f} s.",
        "",
        f"Token lists → MinHash signatures (K = 84), {ds_docs:,} documents (5,000 Reuters + 1,000 Russian, "
        f"{ds['shingles']:.0f} distinct {ds['size']:.0f}-shingles each on average; datasketch gets the same "
        f"{ds['size']:.0f}-token windows as strings), best of the repetitions:",
        "",
        "| implementation | CPU s | signatures/s | ours ÷ it |",
        "|---|---:|---:|---:|",
        f"| datasketch `MinHash.bulk` (SHA-1), incl. building shingle strings ({ds['ds_build']:.2f} s) "
        f"| {ds['ds_bulk']:.2f} | {rate(ds_docs, ds['ds_bulk'])} | **{ds['ds_bulk'] / ds['ours_signatures']:.1f}×** |",
        f"| datasketch `MinHash.bulk`, shingle strings given | {ds['ds_bulk'] - ds['ds_build']:.2f} | "
        f"{rate(ds_docs, ds['ds_bulk'] - ds['ds_build'])} | "
        f"{(ds['ds_bulk'] - ds['ds_build']) / ds['ours_signatures']:.1f}× |",
        f"| datasketch `MinHash(num_perm=84).update_batch` per document, incl. strings | {ds['ds_single']:.2f} | "
        f"{rate(ds_docs, ds['ds_single'])} | {ds['ds_single'] / ds['ours_signatures']:.1f}× |",
        f"| **ours**, `Fingerprinter.signatures`, compiled kernels, fresh instance (every distinct token hashed "
        f"once) | {ds['ours_signatures']:.2f} | **{rate(ds_docs, ds['ours_signatures'])}** | 1× |",
        f"| ours, `Fingerprinter.signatures`, compiled kernels, second call (token cache warm) | "
        f"{ds['ours_signatures_warm']:.2f} | {rate(ds_docs, ds['ours_signatures_warm'])} | "
        f"{ds['ours_signatures'] / ds['ours_signatures_warm']:.1f}× faster |",
        f"| ours, `Fingerprinter.signatures`, NumPy only, fresh instance | {ds['ours_signatures_numpy']:.2f} | "
        f"{rate(ds_docs, ds['ours_signatures_numpy'])} | {ds['ours_signatures_numpy'] / ds['ours_signatures']:.1f}× "
        f"slower (datasketch bulk ÷ it: {ds['ds_bulk'] / ds['ours_signatures_numpy']:.1f}×) |",
        f"| ours, `Fingerprinter.signatures`, NumPy only, second call | {ds['ours_signatures_warm_numpy']:.2f} | "
        f"{rate(ds_docs, ds['ours_signatures_warm_numpy'])} | "
        f"{ds['ours_signatures_warm_numpy'] / ds['ours_signatures']:.1f}× slower |",
        f"| ours, `fingerprint_tokens` one by one (with supershingles) | {ds['ours_fingerprint_tokens']:.2f} | "
        f"{rate(ds_docs, ds['ours_fingerprint_tokens'])} | "
        f"{ds['ours_fingerprint_tokens'] / ds['ours_signatures']:.1f}× slower |",
        "",
        "Where the time of a warm `signatures` call goes: NumPy only, tokens → token hashes "
        f"{ds['stage_tokens_numpy']:.3f} s, shingle fold {ds['stage_fold_numpy']:.3f} s, MinHash "
        f"{ds['stage_minhash_numpy']:.3f} s ({1e9 * ds['stage_minhash_numpy'] / (ds_docs * ds['shingles'] * 84):.2f} ns "
        "per (shingle, permutation) with the transposed, cache-blocked K × block layout; datasketch spends "
        f"{1e9 * (ds['ds_bulk'] - ds['ds_build']) / (ds_docs * ds['shingles'] * 84):.0f} ns); compiled kernels, "
        f"tokens → token hashes {ds['stage_tokens']:.3f} s (joining the strings is most of it), fold + MinHash in "
        f"one pass {ds['stage_minhash']:.3f} s ({1e9 * ds['stage_minhash'] / (ds_docs * ds['shingles'] * 84):.2f} ns "
        "per element). NumPy alone does not reach 10×, so the compiled kernels (numba) are used; they give "
        "bit-identical signatures (a test compares them with the NumPy reference on random and real inputs) "
        "and NumPy remains the fallback.",
        "",
        f"One-time cost of the kernels per process (fresh processes, CPU s): `import numba` {ds['jit_import']:.2f} s; "
        f"first call of every kernel with numba's cache filled (loading machine code) {ds['jit_cached']:.2f} s; "
        f"with an empty cache (compiling, once per machine and cache directory) {ds['jit_compile']:.2f} s. Not "
        "included in the signatures/s figures (a per-process constant); included in the Russian cold figure of the "
        "first table (that is this process's first fingerprinting). Importing the fingerprint package alone does "
        "not load numba: the proxy, which only reads signatures, never pays it.",
        "",
        "`similar_pairs` (threshold 0.8) on N = 1,000 signatures, CPU ms best of 20, and its pairs against "
        "an all-pairs comparison of the same estimates (target ≤ 5 ms at resemblance 0.8, ≥ 99 % of the pairs):",
        "",
        "| signatures | mode | CPU ms | pairs (all-pairs) | found | extra |",
        "|---|---|---:|---:|---:|---:|",
        *[f"| {'1,000 random Reuters stories' if name == 'random' else '50 stories × 20 identical copies'} | {mode} "
          f"| {pairs[f'{name}_{mode}_ms']:.2f} | {pairs[f'{name}_{mode}_pairs']:,} | "
          f"{100 * pairs[f'{name}_{mode}_recall']:.0f} % | {pairs[f'{name}_{mode}_extra']} |"
          for name in ("random", "copies") for mode in ("resemblance", "containment")],
        "",
        "| target (one core) | measured | status |",
        "|---|---:|---|",
        f"| token lists → signatures ≥ 10× `datasketch.MinHash.bulk` | {ds['ds_bulk'] / ds['ours_signatures']:.1f}× "
        f"| {'met' if ds['ds_bulk'] / ds['ours_signatures'] >= 10 else 'NOT MET'} |",
        f"| Russian news, whole pipeline, cold ≥ 400 articles/s | {ru['docs'] / ru['total']:,.0f}/s "
        f"| {'met' if ru['docs'] / ru['total'] >= 400 else 'NOT MET'} |",
        f"| Reuters ≥ 2,000 stories/s | {en['docs'] / en['cold']:,.0f}/s "
        f"| {'met' if en['docs'] / en['cold'] >= 2000 else 'NOT MET'} |",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replace this script's section of a Markdown file such as docs/benchmarks.md (from its heading
    to the next ``## ``), or append it."""
    text = path.read_text(encoding="utf-8") if path.exists() else (
        "# Benchmarks\n")
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of the datasketch comparison")
    parser.add_argument("--results", type=Path, help="also write the section into this Markdown file, replacing its own "
                        "section (e.g. docs/benchmarks.md)")
    args = parser.parse_args()

    from neardup.corpora import reuters_documents, ru_news_documents

    before = load()
    print(f"load average before: {before}", flush=True)
    russian = [d["title"] + "\n" + d["body"] for d in ru_news_documents()]
    english = [d["title"] + "\n" + d["body"] for d in reuters_documents()]
    ru = russian_cold(russian)
    print(f"russian cold: {ru['docs'] / ru['total']:.0f} docs/s ({ru})", flush=True)
    en = reuters(english)
    print(f"reuters: cold {en['docs'] / en['cold']:.0f} docs/s, warm {en['docs'] / en['warm']:.0f}, "
          f"batched {en['docs'] / en['batched']:.0f}", flush=True)

    from neardup.fingerprint import Fingerprinter

    fp = Fingerprinter()
    token_lists = [fp.canonical_tokens(t) for t in itertools.chain(english[:5000], russian[:1000])]
    ds = versus_datasketch(token_lists, args.repeat)
    ds.update(jit_costs())
    pairs = pairs_bench(english)
    print(f"similar_pairs: {pairs}", flush=True)
    print(f"signatures: ours {ds['docs'] / ds['ours_signatures']:.0f}/s, datasketch bulk "
          f"{ds['docs'] / ds['ds_bulk']:.0f}/s, ratio {ds['ds_bulk'] / ds['ours_signatures']:.1f}", flush=True)
    after = load()
    section = report(ru, en, ds, pairs, before, after)
    print()
    print(section)
    if args.results:
        write_section(args.results, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
