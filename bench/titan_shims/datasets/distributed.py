from __future__ import annotations

from datasets import Dataset


def split_dataset_by_node(ds: Dataset, rank: int, world_size: int) -> Dataset:
    return Dataset(list(ds)[rank::world_size])
