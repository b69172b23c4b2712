"""A small Dockerfile parser: instructions the way Docker splits them, and the parts the tests
read (ENV, COPY, CMD/HEALTHCHECK argv). Docker is not available where the tests run."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from urllib.parse import urlparse


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper-cased, e.g. "RUN"
    args: str  # everything after the keyword, continuations joined
    line: int  # 1-based line the instruction starts on


def parse_dockerfile(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions the way Docker's parser does.

    Whole-line comments (``#`` as the first non-blank character) are dropped,
    also in the middle of a continued instruction; a trailing backslash joins
    the next line; blank lines inside a continuation are skipped.
    """
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            continue
        if not stripped:
            continue
        if not parts:
            start = number
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].strip())
            continue
        parts.append(stripped)
        joined = " ".join(p for p in parts if p)
        parts = []
        keyword, _, args = joined.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
    assert not parts, "the Dockerfile ends inside a line continuation"
    return instructions


def exec_or_shell(args: str) -> list[str]:
    """The argv of a CMD/ENTRYPOINT/HEALTHCHECK CMD in either form."""
    if args.startswith("["):
        argv = json.loads(args)
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        return argv
    return ["/bin/sh", "-c", args]


def parse_env(args: str) -> dict[str, str]:
    tokens = shlex.split(args)
    if tokens and "=" not in tokens[0]:  # legacy "ENV KEY value words"
        return {tokens[0]: " ".join(tokens[1:])}
    env = {}
    for token in tokens:
        key, sep, value = token.partition("=")
        assert sep, f"malformed ENV token {token!r}"
        env[key] = value
    return env


def split_flags(tokens: list[str]) -> tuple[dict[str, str], list[str]]:
    flags: dict[str, str] = {}
    rest = list(tokens)
    while rest and rest[0].startswith("--"):
        key, _, value = rest.pop(0)[2:].partition("=")
        flags[key] = value
    return flags, rest


def copy_sources_and_dest(args: str) -> tuple[list[str], str]:
    if args.lstrip().startswith("["):
        argv = json.loads(args)
    else:
        argv = shlex.split(args)
    flags, paths = split_flags(argv)
    assert "from" not in flags, "this image is single-stage; COPY --from is unexpected"
    assert len(paths) >= 2, f"COPY needs a source and a destination: {args!r}"
    return paths[:-1], paths[-1]


def find(instructions: list[Instruction], keyword: str) -> list[Instruction]:
    return [i for i in instructions if i.keyword == keyword]


def merged_env(instructions: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in find(instructions, "ENV"):
        env.update(parse_env(instruction.args))
    return env


def install_index(instructions: list[Instruction]) -> int:
    for index, instruction in enumerate(instructions):
        if instruction.keyword == "RUN" and re.search(r"\bpip\s+install\b", instruction.args):
            return index
    raise AssertionError("no RUN ... pip install in the Dockerfile")


def healthcheck_argv(instructions: list[Instruction]) -> list[str]:
    checks = find(instructions, "HEALTHCHECK")
    assert len(checks) == 1, "expected exactly one HEALTHCHECK"
    tokens = checks[0].args.split(None, 1)
    while tokens and tokens[0].startswith("--"):  # --interval=..., --timeout=...
        tokens = tokens[1].split(None, 1) if len(tokens) > 1 else []
    assert tokens and tokens[0].upper() == "CMD", "HEALTHCHECK must be CMD ..., not NONE"
    return exec_or_shell(tokens[1].strip())


def healthcheck_url(instructions: list[Instruction]):
    command = " ".join(healthcheck_argv(instructions))
    urls = re.findall(r"https?://[^\s'\"]+", command)
    assert len(urls) == 1, f"expected one URL in the HEALTHCHECK, found {urls}"
    return urlparse(urls[0])
