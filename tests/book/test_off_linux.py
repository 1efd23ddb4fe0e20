"""Off Linux, chapters 11 and 12 count no bytes: their tables say so in one line."""
import types

import pytest

import data_parallel as dp
from data_parallel.jobs import measure
from tests.chapters import CHAPTERS, code_cells, python


def cell_that_runs(job, mode):
    """The source of the code cell, in one chapter, that runs the job's mode."""
    sources = [python(cell) for path in CHAPTERS for cell in code_cells(path)
               if f"launch.run({job}, 2, '{mode}'" in python(cell)]
    assert len(sources) == 1, f'{len(sources)} cells run {job} {mode}'
    return sources[0]


@pytest.fixture
def uncounted(monkeypatch, tmp_path):
    """What a rank's byte counter gives where /proc/self/io does not exist."""
    monkeypatch.setattr(measure, 'PROC_IO', str(tmp_path / 'no_proc_io'))
    missing = measure.socket_bytes_written()
    assert missing is None
    return missing


def run_cell(source, record):
    """Run a cell whose launch.run returns record; what it printed, line by line."""
    printed = []
    launch = types.SimpleNamespace(run=lambda *args, **kwargs: record)
    exec(source, {'dp': dp, 'launch': launch, 'measure': measure, 'tp_workers': None,
                  'pp_workers': None, 'print': lambda *a, **k: printed.append(a[0])})
    return printed


def test_the_tensor_parallel_table_says_bytes_were_not_counted(uncounted):
    record = {'world_size': 2, 'dim': 64, 'num_params': 33_088, 'backend': 'gloo',
              'socket_bytes_per_step': {str(B): {'tp': uncounted, 'ddp': uncounted}
                                        for B in (64, 256, 1024)}}
    printed = run_cell(cell_that_runs('tp_workers', 'cost'), record)
    assert printed[1:] == [measure.NOT_COUNTED], printed


def test_the_three_splits_table_says_bytes_were_not_counted(uncounted):
    variant = {'socket_bytes': [uncounted] * 2, 'collectives': {'all_reduce': 1},
               'parameter_bytes': [4, 4], 'activation_bytes': [8, 8]}
    record = {'num_params': 66_176, 'world_size': 2,
              'variants': {name: variant for name in ('data', 'tensor', 'pipeline')}}
    printed = run_cell(cell_that_runs('pp_workers', 'splits'), record)
    assert printed[-1] == measure.NOT_COUNTED, printed
    assert [line.split()[:2] for line in printed[2:-1]] == [
        ['data', '-'], ['tensor', '-'], ['pipeline', '-']], printed
