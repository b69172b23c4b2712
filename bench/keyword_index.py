"""The keyword (BM25) index of proxy/store/keywords_bm25.py at 10k / 100k chunks: what a build
costs (tokenising and bm25s' sparse matrix), what a commit costs (a batch of chunks added to the
recent part, a document's chunks removed), what a search costs with an empty and with a full
recent part (the rebuild threshold), and saving and loading the main part.

Chunks are 150 words drawn from a Zipf-like vocabulary of 50,000 invented words (a few words
everywhere, most rare), with an identifier ("ERR-123456") in every tenth; a query is three words
of mid frequency and an identifier, as a question naming a code would be.

    python bench/keyword_index.py [--sizes 10000 100000] [--batch 50] [--queries 200]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from proxy.store import keywords_bm25  # noqa: E402
from proxy.store.keywords_bm25 import Bm25Index  # noqa: E402

VOCABULARY = 50_000
WORDS_PER_CHUNK = 150
SYLLABLES = "ka ro mi ta ve lu sor dan el in ar po zen tal mor bes cal dri fen gal hol jun kel lin".split()


def vocabulary(rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 5)))))
    return sorted(words)


def corpus(count: int, words: list[str], rng: np.random.Generator) -> list[str]:
    weights = 1.0 / np.arange(1, len(words) + 1)
    drawn = rng.choice(len(words), size=(count, WORDS_PER_CHUNK), p=weights / weights.sum())
    texts = [" ".join(words[i] for i in row) for row in drawn]
    return [f"{text} ERR-{n:06d}" if n % 10 == 0 else text for n, text in enumerate(texts)]


def ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p95 {ordered[int(len(ordered) * 0.95)] * 1000:.2f} ms"


def timed(run: Callable[..., object], *args: object) -> float:
    start = time.perf_counter()
    run(*args)
    return time.perf_counter() - start


def bench(size: int, batch: int, queries: int, rng: np.random.Generator, words: list[str]) -> None:
    texts = corpus(size, words, rng)
    keys = list(range(1, size + 1))
    folder = Path(tempfile.mkdtemp(prefix="bm25-bench-"))
    index = Bm25Index(folder / "chunks.bm25")
    print(f"\n## {size:,} chunks of {WORDS_PER_CHUNK} words")
    start = time.perf_counter()
    docs = keywords_bm25.words(texts)
    tokenised = time.perf_counter() - start
    build = timed(index.rebuild, keys, texts)
    print(f"build: {build:.1f} s (of which tokenising {tokenised:.1f} s)")
    save = timed(index.save, 1)
    on_disk = sum(p.stat().st_size for p in (folder / "chunks.bm25").rglob("*") if p.is_file())
    load = timed(Bm25Index(folder / "chunks.bm25").load)
    print(f"save: {save:.2f} s, load: {load:.2f} s, on disk: {on_disk / 1e6:.0f} MB")
    del docs

    def questions() -> list[str]:
        mid = rng.integers(200, 5_000, size=(queries, 3))
        codes = rng.integers(0, size // 10, size=queries) * 10
        return [" ".join(words[i] for i in row) + f" ERR-{code:06d}?" for row, code in zip(mid, codes, strict=True)]

    search = [timed(index.search, q, 20) for q in questions()]
    print(f"search, empty recent part: {ms(search)}")
    fresh = corpus(max(keywords_bm25.REBUILD_MIN, int(keywords_bm25.REBUILD_SHARE * size)), words, rng)
    commits = []
    for start_at in range(0, len(fresh), batch):
        added = fresh[start_at:start_at + batch]
        new_keys = list(range(size + 1 + start_at, size + 1 + start_at + len(added)))
        commits.append(timed(index.add, new_keys, added))
    print(f"commit of {batch} chunks into the recent part: {ms(commits)} "
          f"(up to {len(fresh):,} recent chunks, the rebuild threshold)")
    removes = [timed(index.remove, keys[i:i + batch]) for i in range(0, 20 * batch, batch)]
    print(f"removal of a document's {batch} chunks: {ms(removes)}")
    search = [timed(index.search, q, 20) for q in questions()]
    print(f"search, full recent part: {ms(search)}; needs a rebuild now: {index.needs_rebuild()}")
    shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--batch", type=int, default=50, help="chunks per commit")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(18)
    words = vocabulary(rng)
    for size in args.sizes:
        bench(size, args.batch, args.queries, rng, words)


if __name__ == "__main__":
    main()
