"""The arms read a local pool folder: a pool in object storage is refused in one line before anything is read."""

from __future__ import annotations

import pytest

from contam_assets.model.arms.inputs import load_arm_inputs
from contam_assets.model.arms.pipeline import ensure_tokenizer
from contam_assets.store.location import StoreRoot


@pytest.mark.parametrize("call", [lambda root, tmp: ensure_tokenizer(root, tmp / "tok"),
                                  lambda root, tmp: load_arm_inputs(root, tmp / "mix", tmp / "contam.duckdb")])
def test_a_pool_in_object_storage_is_refused_in_one_line(call, tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        call(StoreRoot("s3://bucket/pool"), tmp_path)
    assert str(err.value) == ("the arms read a local pool folder; s3://bucket/pool is in object storage "
                              "(copy the pool to a local folder for the arms)")
    assert list(tmp_path.iterdir()) == []  # nothing written
