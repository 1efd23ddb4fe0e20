"""Make the book's helper module and the scripts importable from the tests."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'book'))
sys.path.insert(0, str(ROOT / 'scripts'))  # train_ddp and its launch helpers


@pytest.fixture(scope='session')
def fashion_root():
    """The data folder that holds Fashion-MNIST; skip the test when there is none."""
    import data_parallel as dp
    root = dp.data_root()
    if not (root / 'FashionMNIST' / 'raw' / 't10k-images-idx3-ubyte').exists():
        pytest.skip(f'Fashion-MNIST not found: set {dp.DATA_ENV}')
    return root
