"""A tiny labelled dataset of blank images: what partition tests split, by label alone."""

from __future__ import annotations

import numpy as np

from ring_actors.data.sources import DatasetArrays


def dataset(classes: int = 10, per_class: int = 40) -> DatasetArrays:
    train_y = np.repeat(np.arange(classes), per_class).astype(np.int64)
    test_y = np.repeat(np.arange(classes), per_class // 4).astype(np.int64)
    images = np.zeros((1, 1, 4, 4), dtype=np.uint8)
    return DatasetArrays(
        "toy",
        np.repeat(images, len(train_y), 0),
        train_y,
        np.repeat(images, len(test_y), 0),
        test_y,
        classes,
        (0.5,),
        (0.5,),
    )
