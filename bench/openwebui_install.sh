#!/usr/bin/env bash
# Install Open WebUI into its own venv for bench/openwebui_e2e.py and tests/test_openwebui_e2e.py,
# without its machine-learning stack: the e2e runs it with embeddings through its Ollama
# connection (RAG_EMBEDDING_ENGINE=ollama), so torch, sentence-transformers, transformers,
# accelerate, faster-whisper (speech to text) and the OCR/vision packages are never imported.
# Seen here: 60-90 s and 1.3 GB (the full install, with the CPU torch on this machine's disk: ~65 s
# and 2.9 GB, and a start-up twice as slow because it imports torch).
#
#     bash bench/openwebui_install.sh /path/to/venv      # then /path/to/venv/bin/open-webui
#
# Does nothing if that venv already has this version, fully installed.
set -euo pipefail

VERSION=0.12.4
VENV=${1:?usage: openwebui_install.sh VENV_DIR}
EXCLUDED="accelerate sentence-transformers transformers faster-whisper einops opencv-python-headless rapidocr"

# written last: a venv whose install was cut short has none, and is made again
DONE="$VENV/.graphgate-openwebui-installed"
if [ -x "$VENV/bin/open-webui" ] && [ "$(cat "$DONE" 2>/dev/null)" = "$VERSION" ]; then
    echo "Open WebUI $VERSION already in $VENV"
    exit 0
fi
if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then
    echo "$VENV exists and is not a venv: not touching it" >&2
    exit 1
fi
rm -rf "$VENV"
# pip's own output, less this machine's notes on local package folders it does not have (one per
# package); a failing pip still fails the script (pipefail)
quiet_pip() {
    "$VENV/bin/pip" "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
started=$(date +%s)
python3 -m venv "$VENV"
quiet_pip install --quiet --disable-pip-version-check --no-deps "open-webui==$VERSION"
# its own pins (so the versions are the ones it was released with), less the excluded and the extras
"$VENV/bin/python" - "$EXCLUDED" > "$VENV/openwebui-requirements.txt" <<'EOF'
import importlib.metadata
import re
import sys

excluded = set(sys.argv[1].split())
for requirement in importlib.metadata.requires("open-webui") or []:
    name = re.split(r"[\[=<>!~; ]", requirement, maxsplit=1)[0].lower()
    if "extra ==" not in requirement and name not in excluded:
        print(requirement)
EOF
# --no-warn-conflicts: pip would list the excluded packages as missing requirements of open-webui
quiet_pip install --quiet --disable-pip-version-check --no-warn-conflicts -r "$VENV/openwebui-requirements.txt"
echo "$VERSION" > "$DONE"
echo "Open WebUI $VERSION installed in $VENV in $(( $(date +%s) - started )) s ($(du -sh "$VENV" | cut -f1))"
