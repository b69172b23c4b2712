"""Which writing system a character belongs to, as far as cutting words goes: scripts written with
spaces between words, and those written without (Han, kana, Thai, Lao, Khmer, Myanmar), which need
a segmenter. Ranges from the Unicode blocks; checked per character, so a mixed text is mixed."""

from __future__ import annotations

import re

# Han ideographs (CJK unified, extension A, compatibility) and the CJK radicals
HAN = "\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
KANA = "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"
HANGUL = "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
# scripts whose words are not separated by spaces, besides Han and kana: Thai, Lao, Khmer, Myanmar
SOUTHEAST_ASIAN = "\u0e00-\u0eff\u1780-\u17ff\u1000-\u109f"
UNSPACED = HAN + KANA + SOUTHEAST_ASIAN
# Han outside the BMP (extensions B and later) too
_HAN_RUN = re.compile(f"[{HAN}\U00020000-\U0003134f]+")
_UNSPACED_RUN = re.compile(f"[{UNSPACED}\U00020000-\U0003134f]+")
_UNSPACED_CHAR = re.compile(f"[{UNSPACED}\U00020000-\U0003134f]")


def unspaced_runs(text: str) -> re.Pattern[str]:
    return _UNSPACED_RUN


def is_unspaced(char: str) -> bool:
    """Whether ``char`` belongs to a script written without spaces between words."""
    return _UNSPACED_CHAR.match(char) is not None


def has_unspaced(text: str) -> bool:
    return _UNSPACED_CHAR.search(text) is not None


def is_han_run(run: str) -> bool:
    return _HAN_RUN.fullmatch(run) is not None
