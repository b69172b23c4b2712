"""Entity linking without the model (proxy/store/name_index.py): build time, memory and lookup
time of the name index at 10k / 100k / 1M synthetic entity names, and how often a question
naming an entity (exactly, with another legal suffix and case, or with one typo) links it.

Names are invented from syllables: people ("Dorava Kelumin"), companies with a legal suffix
("Tarosil Vemko Corp"), places and products of one to three words, all distinct. A question puts
one name in a sentence of ordinary words; the lookup is what a turn pays: the question's words
(``name_words``) and their spans against the index, one question at a time.

    python bench/linking.py [--sizes 10000 100000 1000000] [--questions 2000]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from proxy.core.names import name_words  # noqa: E402
from proxy.extraction.results import name_key  # noqa: E402
from proxy.store.name_index import NameIndex  # noqa: E402

SYLLABLES = ("ka ro mi ta ve lu sor dan el in ar po qui zen tal mor bes cal dri fen gal hol jun kel lin "
             "mar nor pel ras sel tor ul vin wes yar zor ba ce di fo gu ha jo ki lo mu ne").split()
SUFFIXES = ("Corp", "Inc", "Ltd", "GmbH", "LLC", "AG")
TEMPLATES = ("Where is the company that acquired {} headquartered?", "Which products does {} develop?",
             "Who founded {} and when?", "tell me everything about {}", "How is {} related to the others?")
NO_NAME = ("What is the capital of the moon?", "Which products are developed by the biggest company?",
           "Who founded the first company and when did it happen?")


def word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def names(count: int, seed: int = 7) -> list[str]:
    """``count`` distinct display names, as extraction would store them."""
    rng = random.Random(seed)
    found: dict[str, str] = {}
    while len(found) < count:
        kind = rng.random()
        if kind < 0.4:
            name = f"{word(rng)} {word(rng)}"                              # a person
        elif kind < 0.7:
            name = f"{word(rng)} {word(rng)} {rng.choice(SUFFIXES)}"        # a company
        else:
            name = " ".join(word(rng) for _ in range(rng.randint(1, 3)))    # a place, a product
        found.setdefault(name_key(name), name)
    return list(found.values())


def typo(rng: random.Random, name: str) -> str:
    i = rng.randrange(1, len(name) - 1)
    if name[i] == " " or name[i + 1] == " ":
        return name[:i] + name[i + 1] + name[i] + name[i + 2:] if name[i] != name[i + 1] else name
    return name[:i] + rng.choice("aeiourst") + name[i + 1:]


def variant(rng: random.Random, name: str) -> str:
    """Another case and legal suffix: what a question says for a stored company name."""
    words = [w for w in name.split() if w not in SUFFIXES]
    return " ".join(words).upper() + f", {rng.choice(SUFFIXES)}." if rng.random() < 0.5 else " ".join(words).lower()


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1024**2


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def run(size: int, questions: int) -> None:
    display = names(size)
    keys = [name_key(n) for n in display]
    gc.collect()
    before = rss_mb()
    gc.disable()  # as the store builds it: millions of objects, none of them garbage
    build_seconds, built = timed(lambda: NameIndex.build(keys, {}))
    gc.enable()
    index: NameIndex = built  # type: ignore[assignment]
    memory = rss_mb() - before
    rng = random.Random(size)
    print(f"{size:>9,} names  build {build_seconds:6.2f} s  ({build_seconds / size * 1e6:.1f} µs a name)  "
          f"memory +{memory:,.0f} MB ({memory * 1024**2 / size:,.0f} bytes a name)")
    cases: dict[str, Callable[[str], str]] = {"exact": lambda n: n, "case+suffix": lambda n: variant(rng, n),
                                              "one typo": lambda n: typo(rng, n)}
    for label, spell in cases.items():
        latencies, hits, among = [], 0, 0
        for _ in range(questions):
            i = rng.randrange(size)
            text = rng.choice(TEMPLATES).format(spell(display[i]))
            start = time.perf_counter()
            found = index.link(name_words(text))
            latencies.append((time.perf_counter() - start) * 1e6)
            hits += any(key == keys[i] for key, _ in found[:1])
            among += any(key == keys[i] for key, _ in found)
        latencies.sort()
        print(f"    {label:<12} link p50 {statistics.median(latencies):6.1f} µs  p99 "
              f"{latencies[int(len(latencies) * 0.99)]:6.1f} µs  linked first {hits / questions:.3f}  "
              f"linked {among / questions:.3f}")
    latencies = []
    spurious = 0
    for n in range(questions):
        start = time.perf_counter()
        found = index.link(name_words(NO_NAME[n % len(NO_NAME)]))
        latencies.append((time.perf_counter() - start) * 1e6)
        spurious += bool(found)
    latencies.sort()
    print(f"    {'no name':<12} link p50 {statistics.median(latencies):6.1f} µs  p99 "
          f"{latencies[int(len(latencies) * 0.99)]:6.1f} µs  linked anything {spurious / questions:.3f}")
    del index, built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--questions", type=int, default=2000)
    args = parser.parse_args()
    for size in args.sizes:
        run(size, args.questions)


if __name__ == "__main__":
    main()
