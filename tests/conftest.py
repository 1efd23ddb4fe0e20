"""Shared fixtures. The helper package is installed (`pip install -e .`), not put on a path."""
import pytest

import data_parallel as dp


@pytest.fixture(scope='session')
def fashion_root():
    """The data folder that holds Fashion-MNIST; skip the test when there is none."""
    root = dp.data_root()
    if not (root / 'FashionMNIST' / 'raw' / 't10k-images-idx3-ubyte').exists():
        pytest.skip(f'Fashion-MNIST not found: set {dp.DATA_ENV}')
    return root
