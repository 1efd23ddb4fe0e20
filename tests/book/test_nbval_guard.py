"""nbval as `make test` runs it catches a wrong output and forgives machine noise."""
import subprocess
import sys

import nbformat
import pytest

from tests.chapters import ROOT


def run_nbval(tmp_path, code, stored_text):
    """nbval's exit code on a one-cell notebook whose stored output is stored_text."""
    cell = nbformat.v4.new_code_cell(code, execution_count=1)
    cell.outputs = [nbformat.v4.new_output('stream', name='stdout', text=stored_text)]
    path = tmp_path / 'probe.ipynb'
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '--nbval',
           '--nbval-current-env', '--nbval-sanitize-with',
           str(ROOT / 'tests' / 'nbval_sanitize.cfg'), str(path)]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, timeout=120)
    return done.returncode


@pytest.mark.slow  # starts nbval and a kernel
def test_device_names_and_timings_are_sanitized(tmp_path):
    stored = "tensor([3., 3.], device='cuda:1') on cuda:1 in 2.7 s\n"
    code = "import torch; print(torch.tensor([3., 3.]), 'on cpu in 0.31 s')"
    assert run_nbval(tmp_path, code, stored) == 0
    assert run_nbval(tmp_path, code, stored.replace('3.,', '4.,')) == 1  # a wrong value
