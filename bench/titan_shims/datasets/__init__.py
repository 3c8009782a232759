"""A stand-in for Hugging Face `datasets`, just what torchtitan's text loader calls."""

from __future__ import annotations

import json
import random
from pathlib import Path

_WORDS = [
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
    "from", "his", "her", "it", "an", "were", "are", "which", "this", "be", "or", "has", "had",
    "first", "one", "their", "its", "new", "after", "who", "they", "two", "been", "more",
    "time", "city", "year", "school", "people", "world", "state", "also", "government",
    "music", "river", "group", "system", "number", "water", "national", "early", "during",
    "many", "between", "under", "light", "energy",
]


class Dataset:
    def __init__(self, rows: list[dict]) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self):
        return iter(self._rows)

    def skip(self, n: int) -> Dataset:
        return Dataset(self._rows[n:])


def _synthetic(n: int = 20000, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"text": " ".join(rng.choice(_WORDS) for _ in range(rng.randint(200, 600)))}
            for _ in range(n)]


def load_dataset(path: str, *args, split: str = "train", **kwargs) -> Dataset:
    rows: list[dict] = []
    folder = Path(path)
    for f in sorted(folder.glob("*.json")) + sorted(folder.glob("*.jsonl")):
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
    return Dataset(rows or _synthetic())
