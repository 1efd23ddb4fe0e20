"""The helper package: installed, not put on a path; every chapter runs on its own.

Each chapter's first cell installs the package when it is missing (Colab, a download);
test_reader_runs.py runs reader copies with the package from the wheel alone.
"""
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import yaml

import data_parallel as dp
from data_parallel.launch import free_port
from tests.chapters import CHAPTERS, NAMES, ROOT, VERSION, code_cells, text

INSTALL = text(code_cells(CHAPTERS[0])[0])  # it installs the package when missing
URL = yaml.safe_load((ROOT / '_config.yml').read_text())['repository']['url']


def test_package_is_installed_not_found_by_accident():
    """Not on a path (test_layout.py: nothing edits the import path)."""
    assert importlib.metadata.version('multigpu-book')
    assert Path(dp.__file__).resolve().parent == ROOT / 'book' / 'data_parallel'


def test_every_chapter_starts_with_the_same_hidden_install_cell():
    """Issues 21-6 and 24: what it installs (the tag v<version> of pyproject.toml, not
    the moving main branch), and when, the tests of run_install_cell below show."""
    first = [code_cells(nb)[0] for nb in CHAPTERS]
    assert {text(cell) for cell in first} == {INSTALL}, 'the install cells differ'
    assert all(cell['metadata'].get('tags') == ['remove-cell'] for cell in first)


def run_install_cell(monkeypatch, returncode=0, stderr=b'', installed=None, pip=None):
    """The install cell with pip answering returncode (or pip, a stand-in for
    subprocess.run), and data_parallel missing or installed as (version,
    direct_url.json); pip's calls."""
    calls = []

    def answer(args, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, returncode, b'', stderr)
    if installed is None:
        find_spec = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: (
            None if name == 'data_parallel' else find_spec(name, *a)))
    else:
        version, origin = installed
        package = type('Package', (), {'version': version,
                                        'read_text': lambda self, name: origin})()
        monkeypatch.setattr(importlib.metadata, 'distribution', lambda name: package)
    monkeypatch.setattr(subprocess, 'run', pip or answer)
    monkeypatch.delenv('MULTIGPU_BOOK_PACKAGE', raising=False)
    exec(INSTALL, {})
    return calls


def failure_line(monkeypatch, stderr=b'', pip=None):
    """The one line the install cell shows when pip fails and writes stderr."""
    with pytest.raises(Exception) as failed:
        run_install_cell(monkeypatch, returncode=1, stderr=stderr, pip=pip)
    lines = failed.value._render_traceback_()  # IPython shows these, not a traceback
    assert len(lines) == 1 and '\n' not in lines[0], lines
    return lines[0]


# What pip wrote when it failed, colours and all: pip 26, then pip 23 (pip of Colab's
# age), whose last line is a note; both shortened
NO_WHEEL = (b"\x1b[33mWARNING: Requirement '/w.whl' looks like a filename, but the "
            b"file does not exist\x1b[0m\n"
            b"\x1b[31mERROR: Could not install packages due to an OSError: [Errno 2] "
            b"No such file or directory: '/w.whl'\x1b[0m\n\n")
NO_HOST = '''\
  error: subprocess-exited-with-error

  × git clone --filter=blob:none --quiet https://github.com/o/r /tmp/pip-req-build-x
  │ exit code: 128
  ╰─> [1 lines of output]
      fatal: unable to access 'https://github.com/o/r/': Could not resolve host: x.y
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error
note: This error originates from a subprocess, and is likely not a problem with pip.
'''.encode()


def test_install_cell_fails_in_one_line_that_says_what_to_do(monkeypatch, capsys):
    """What it tried, pip's own last error (without colour codes), the wheel to set."""
    line = failure_line(monkeypatch, NO_WHEEL)
    assert ("OSError: [Errno 2] No such file or directory: '/w.whl'. Offline? Set "
            'MULTIGPU_BOOK_PACKAGE') in line, line
    assert f'@v{VERSION}' in line and f'multigpu_book-{VERSION}-' in line, line
    assert capsys.readouterr().out == ''  # pip's own (coloured) output is not shown
    assert '\x1b' not in line and 'WARNING' not in line and '(offline?)' not in line
    line = failure_line(monkeypatch, NO_HOST)  # git's words, not pip's closing note
    assert (": fatal: unable to access 'https://github.com/o/r/': Could not resolve "
            'host: x.y. Offline?') in line, line
    assert ': pip exited with 1. Offline?' in failure_line(monkeypatch, b'\n')


def test_install_cell_gives_up_on_a_stalled_download_in_one_line(monkeypatch):
    """pip without an answer (a proxy, say) ends after 600 s in the one line."""
    def stalled(args, **kwargs):
        raise subprocess.TimeoutExpired(args, kwargs['timeout'])
    line = failure_line(monkeypatch, pip=stalled)
    assert 'error: no answer in 600 s. Offline? Set MULTIGPU_BOOK_PACKAGE' in line, line


def test_install_cell_installs_the_pinned_tag(monkeypatch, capsys):
    calls = run_install_cell(monkeypatch)  # only when it is missing: the next test
    assert calls == [[sys.executable, '-m', 'pip', 'install', '-q',
                      f'git+{URL}@v{VERSION}']]
    assert capsys.readouterr().out.startswith(
        f'Installed the helper package data_parallel {VERSION} from')


def test_install_cell_replaces_another_version_but_not_a_clones(monkeypatch, capsys):
    """A venv or Studio Lab keeps what it installed once: a new notebook replaces it;
    an editable install (make lab, a clone) is the reader's own and stays."""
    wheel = '{"archive_info": {}, "url": "file:///w.whl"}'
    calls = run_install_cell(monkeypatch, 0, installed=('0.0.1', wheel))
    assert calls == [[sys.executable, '-m', 'pip', 'install', '-q',
                      '--force-reinstall', '--no-deps', f'git+{URL}@v{VERSION}']]
    assert 'in place of 0.0.1' in capsys.readouterr().out
    assert run_install_cell(monkeypatch, 0, installed=(VERSION, wheel)) == []
    clone = '{"dir_info": {"editable": true}, "url": "file:///clone"}'
    assert run_install_cell(monkeypatch, 0, installed=('0.0.1', clone)) == []
    assert capsys.readouterr().out == ''


@pytest.mark.slow
def test_install_cell_offline_in_a_kernel_prints_one_line(tmp_path, monkeypatch):
    """In a real kernel: no package, no network (a wheel that is not there)."""
    from nbclient import NotebookClient
    hide = ("import importlib.util as u\n"
            "u.find_spec = lambda n, *a, f=u.find_spec: None if n == 'data_parallel' "
            "else f(n, *a)\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(hide + INSTALL)])
    missing = tmp_path / f'multigpu_book-{VERSION}-py3-none-any.whl'
    monkeypatch.setenv('MULTIGPU_BOOK_PACKAGE', str(missing))
    NotebookClient(nb, kernel_name='python3', timeout=120, allow_errors=True,
                   resources={'metadata': {'path': str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    assert [o['output_type'] for o in outputs] == ['error'], outputs
    assert len(outputs[0]['traceback']) == 1, outputs[0]['traceback']
    assert 'MULTIGPU_BOOK_PACKAGE' in outputs[0]['traceback'][0]
    assert 'No such file or directory' in outputs[0]['traceback'][0]  # pip's words


@pytest.mark.slow
def test_make_lab_starts_jupyterlab_on_the_book(tmp_path):
    port, token = free_port(), 'test-token-123'
    # port_retries=0 (as its environment variable: the Makefile's command is the
    # reader's): were the port taken meanwhile, Jupyter would stop, not take the next
    env = {**os.environ, 'JUPYTER_TOKEN': token, 'JUPYTER_RUNTIME_DIR': str(tmp_path),
           'JUPYTER_PORT_RETRIES': '0'}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy

    def api(path, timeout):
        url = f'http://127.0.0.1:{port}/api/{path}?token={token}'
        with opener.open(url, timeout=timeout) as response:
            return json.loads(response.read())
    log = tmp_path / 'lab.log'
    with open(log, 'w') as out:
        # -o: use .venv as it is, even when requirements.txt is newer
        lab = subprocess.Popen(['make', '-s', '-o', '.venv/.installed', 'lab',
                                f'LAB_PORT={port}'], cwd=ROOT, env=env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        status, deadline = None, time.monotonic() + 90
        while status is None and time.monotonic() < deadline:
            try:
                status = api('status', timeout=5)
            except OSError:
                assert lab.poll() is None, log.read_text()
                time.sleep(1)
        assert status is not None and 'started' in status, log.read_text()
        names = {item['name'] for item in api('contents', timeout=10)['content']}
        assert set(NAMES) <= names  # it serves the chapters' folder
        assert re.search(rf'http://\S+:{port}/lab\?token=', log.read_text())  # the URL
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(timeout=30)
        except subprocess.TimeoutExpired:  # make is not reaped: its group is still its
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
