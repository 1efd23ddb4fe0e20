"""On one GPU (Colab's) every chapter still starts jobs of two or more processes: the
device policy puts them on the CPU with gloo and says so; no chapter sizes a job by the
number of GPUs. A stand-in: torch is told there is one GPU, and each chapter's lines that
size its jobs run as the chapter runs them."""
import ast
import re

import pytest
import torch

import data_parallel as dp
from tests.chapters import CHAPTERS, chapters_with, code_cells, text

SIZING = {'num_gpus', 'world_size', 'on_gpus', 'jobs_env'}  # what a chapter's jobs take


def sizing_lines(path):
    """The top-level assignments of a chapter's code that size or place its jobs."""
    return [ast.unparse(node) for cell in code_cells(path)
            for node in ast.parse(re.sub(r'^\s*[!%].*$', '', text(cell), flags=re.M)).body
            if isinstance(node, ast.Assign) and {ast.unparse(t) for t in node.targets}
            & SIZING]


JOBS = [path for path in CHAPTERS if sizing_lines(path)]


def test_the_chapters_with_jobs_are_found():
    """Those that book/chapters.toml says size jobs, and only those."""
    declared = chapters_with('sizes_jobs')
    assert [p.name[:2] for p in JOBS] == [p.name[:2] for p in declared]
    code = '\n'.join(text(cell) for path in CHAPTERS for cell in code_cells(path))
    assert not re.search(r'min\((num_gpus|torch\.cuda\.device_count\(\))', code)


@pytest.mark.parametrize('chapter', JOBS, ids=[p.name for p in JOBS])
def test_one_gpu_runs_every_job_of_two_or_more_processes_on_the_cpu(
        monkeypatch, capsys, chapter):
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    seen = {'dp': dp, 'torch': torch}
    for line in sizing_lines(chapter):
        exec(line, seen)
    if 'world_size' in seen:  # one job's size, chosen by the chapter
        assert seen['world_size'] >= 2, seen['world_size']
        assert dp.process_device(0, seen['world_size'])[0] == 'gloo'
        assert seen['on_gpus'] is False  # what it is compared with runs on the CPU too
    if 'jobs_env' in seen:  # a sweep of jobs up to several processes: none on the GPU
        assert seen['jobs_env'] == dp.CPU_ONLY
        assert 'every job here runs on the CPU with gloo' in capsys.readouterr().out
