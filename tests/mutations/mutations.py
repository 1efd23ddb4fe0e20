"""Mutation testing: plant each bug the book warns about, and see which checks notice.

A mutation is one textual replacement in a function of the helper package. The function
lives twice: in its module under book/data_parallel/ and in a chapter's `#@save` cell,
which tests/book/test_sync.py keeps identical, so the same replacement fits both; it must
match exactly once in each, or the mutation has rotted and says so. It is applied to a
copy of book/ (package and chapters) and tests/ in a temporary folder, whose package
goes first on PYTHONPATH: the unit tests, the notebook kernels and the torchrun workers
they start all import the copy, not the editable install (pytest and the kernels
check that).

Two kinds of check run on the mutated copy:
- the unit tests of the mutated module (pytest);
- the chapters' own checks, with nbval as `make nbval` runs it, on a selection of code
  cells (`select_cells`): whole chapters would take many minutes each.
`run` also runs every selection on the unmutated copy: a control that must pass, or a
failure under a mutation proves nothing.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import data_parallel as dp

ROOT = dp.repo_root()
# repo_root() needs _toc.yml, so that jobs in the copy run and write in the copy
COPIED = ['book', 'tests', '_toc.yml', '_config.yml', 'pytest.ini']
SKIPPED = shutil.ignore_patterns('__pycache__', '.ipynb_checkpoints', '_build',
                                 'browser')
NBVAL = ['--nbval', '--nbval-current-env', '--nbval-sanitize-with',
         'tests/nbval_sanitize.cfg', '--nbval-cell-timeout=600']
PROBE_FAILED = 97  # exit code of a run that imported the wrong data_parallel
# JUnit XML writes the escape character of terminal colours as the text '#x1B'
ANSI = re.compile(r'(\x1b|#x1B)\[[0-9;]*m')
EXCEPTION = re.compile(r'^[A-Za-z_][\w.]*(Error|Exception|Exit)\b')


class HarnessError(RuntimeError):
    """The harness itself is broken (rotted mutation or selection, wrong import)."""


@dataclass(frozen=True)
class Mutation:
    """One planted bug: replace old by new in the package module and its #@save cell."""
    name: str
    bug: str
    module: str
    old: str
    new: str
    unit: tuple
    chapters: tuple


SCRATCH_TESTS = ('tests/unit/test_scratch.py',)
CH4, CH5, CH6 = ('04_data_synchronization.ipynb', '05_distributing_data.ipynb',
                 '06_training.ipynb')
CH8 = '08_where_the_time_goes.ipynb'

MUTATIONS = [
    Mutation('a-get_params-no-copy',
             'get_params without copy=True: replicas on one device share storage',
             'scratch.py', 'p.detach().to(device, copy=True)', 'p.detach().to(device)',
             SCRATCH_TESTS, (CH4, CH6)),
    Mutation('b-allreduce-rebinds-broadcast',
             "allreduce rebinds the broadcast loop's list entries (d2l's bug)",
             'scratch.py', 'data[i][:] = data[0].to(data[i].device)',
             'data[i] = data[0].to(data[i].device)', SCRATCH_TESTS, (CH4, CH6)),
    Mutation('c-split_batch-drops-remainder',
             'split_batch drops the len(X) % k examples of an uneven batch',
             'scratch.py',
             'X_shards = torch.tensor_split(X, len(devices))\n'
             '    y_shards = torch.tensor_split(y, len(devices))',
             'kept = len(X) - len(X) % len(devices)\n'
             '    X_shards = torch.tensor_split(X[:kept], len(devices))\n'
             '    y_shards = torch.tensor_split(y[:kept], len(devices))',
             SCRATCH_TESTS, (CH5, CH6)),
    Mutation('d-sgd-divides-by-shard',
             'train_batch: each replica divides its gradient by its shard size',
             'scratch.py',
             'for params in device_params:\n        sgd(params, lr, X.shape[0])',
             'for params, X_shard in zip(device_params, X_shards):\n'
             '        sgd(params, lr, len(X_shard))',
             SCRATCH_TESTS, (CH6,)),
    Mutation('e-ring-skips-a-hop',
             'ring_allreduce: reduce-scatter takes k - 2 hops instead of k - 1',
             'collectives.py', 'for step in range(k - 1):  # reduce-scatter',
             'for step in range(k - 2):  # reduce-scatter',
             ('tests/unit/test_performance.py',), (CH8,)),
]

# Which code cells of a chapter hold its checks. None: the whole chapter (it is quick).
# A list of needles: the chapter's setup, its #@save cells and, for each needle, the
# code cells that contain it, each with the hidden checks after it (see select_cells).
CHAPTER_CHECKS = {
    CH4: None,
    CH5: None,
    # k devices against 1 device after one step; the ten-epoch runs after it are skipped
    CH6: ['def one_step('],
    # star and ring against torch.distributed.all_reduce, checked by perf_workers
    CH8: ["launch.run(perf_workers, k, 'allreduce', '--mb', 25"],
}


def is_saved(cell):
    """Whether a cell is a code cell whose first line is #@save."""
    return cell['cell_type'] == 'code' and source(cell).lstrip().startswith('#@save')


def source(cell):
    """A cell's source as one string (notebooks store it as a list of lines)."""
    return ''.join(cell['source'])


def is_hidden_check(cell):
    """A code cell hidden from readers (tag remove-cell): the chapters' asserts."""
    tags = cell['metadata'].get('tags', [])
    return cell['cell_type'] == 'code' and 'remove-cell' in tags


def select_cells(cells, needles):
    """Indices of the cells whose code nbval runs: all code cells, or a selection.

    The selection keeps, in the chapter's order: the setup (code cells before the first
    `## ` heading), every #@save cell (definitions, quick to run) and, for each needle,
    every code cell whose source contains it together with the hidden-check cells
    (tag remove-cell) that follow it. A needle that matches nothing, or a selection
    without an assert, raises HarnessError: the chapter changed, update CHAPTER_CHECKS.
    """
    code = [i for i, c in enumerate(cells) if c['cell_type'] == 'code']
    if needles is None:
        return code
    heading = next((i for i, c in enumerate(cells) if c['cell_type'] == 'markdown'
                    and source(c).startswith('## ')), len(cells))
    keep = {i for i in code if i < heading or is_saved(cells[i])}
    checks = set()
    for needle in needles:
        found = [i for i in code if needle in source(cells[i])]
        if not found:
            raise HarnessError(f'no code cell contains {needle!r}: the chapter '
                               'changed, update CHAPTER_CHECKS in tests/mutations/mutations.py')
        for i in found:
            checks.add(i)
            while i + 1 < len(cells) and is_hidden_check(cells[i + 1]):
                i += 1
                checks.add(i)
    if not any('assert' in source(cells[i]) for i in checks):
        raise HarnessError(f'the cells selected by {needles} hold no assert, so none '
                           'can fail: update CHAPTER_CHECKS in tests/mutations/mutations.py')
    return sorted(keep | checks)


def mutate_text(text, mutation, where):
    """text with the mutation applied; HarnessError unless old occurs exactly once."""
    count = text.count(mutation.old)
    if count != 1:
        raise HarnessError(f'{mutation.name}: {mutation.old!r} occurs {count} times in '
                           f'{where}, not once: update MUTATIONS in tests/mutations/mutations.py')
    return text.replace(mutation.old, mutation.new)


def mutate_chapters(notebooks, mutation):
    """Apply the mutation to the one #@save cell that holds it; its chapter's name."""
    holders = [(name, cell) for name, nb in notebooks.items() for cell in nb['cells']
               if is_saved(cell) and mutation.old in source(cell)]
    if len(holders) != 1:
        raise HarnessError(f'{mutation.name}: {len(holders)} #@save cells hold '
                           f'{mutation.old!r}, not one: update tests/mutations/mutations.py')
    name, cell = holders[0]
    cell['source'] = mutate_text(source(cell), mutation, name).splitlines(keepends=True)
    return name


def probe_cell(book):
    """A code cell that fails unless the kernel imports data_parallel from book."""
    code = ('import data_parallel\n'
            f'assert data_parallel.__file__.startswith({str(book) + os.sep!r}), '
            'data_parallel.__file__\n')
    return {'cell_type': 'code', 'execution_count': None, 'metadata': {}, 'outputs': [],
            'source': code.splitlines(keepends=True)}


def trimmed(notebook, needles, book):
    """(a notebook of the probe and the selected code cells, their original indices)."""
    indices = select_cells(notebook['cells'], needles)
    cells = [probe_cell(book)] + [notebook['cells'][i] for i in indices]
    return {**notebook, 'cells': cells}, [None] + indices


def make_copy(folder, mutation=None):
    """Copy the repository's book/ and tests/ into folder, mutated; return the root."""
    root = Path(folder) / 'repo'
    for name in COPIED:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, root / name, ignore=SKIPPED)
        else:
            shutil.copy2(path, root / name)
    if mutation is not None:
        module = root / 'book' / 'data_parallel' / mutation.module
        module.write_text(mutate_text(module.read_text(), mutation, module.name))
    return root


def write_notebook(path, notebook):
    """Write a notebook as Jupyter does (nbformat JSON, one-space indent)."""
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + '\n')


def write_chapters(root, chapters, mutation=None):
    """Write each chapter's selection, mutated if asked; {chapter: original indices}."""
    book = root / 'book'
    notebooks = {path.name: json.loads(path.read_text())
                 for path in book.glob('[0-9][0-9]_*.ipynb')}
    if mutation is not None:  # the whole chapter, in case no selection replaces it
        name = mutate_chapters(notebooks, mutation)
        write_notebook(book / name, notebooks[name])
    origins = {}
    for chapter in chapters:
        if chapter not in notebooks:
            raise HarnessError(f'no chapter {chapter} in book/: '
                               'update tests/mutations/mutations.py')
        notebook, origins[chapter] = trimmed(
            notebooks[chapter], CHAPTER_CHECKS[chapter], book / 'data_parallel')
        write_notebook(book / chapter, notebook)
    return origins


def environment(root):
    """os.environ with the copy's package first on PYTHONPATH, and the data folder."""
    import data_parallel as dp  # the checkout's own package: where the data lies
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE='1')
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(root / 'book'),
                                                      env.get('PYTHONPATH')]))
    env.setdefault(dp.DATA_ENV, str(dp.data_root()))
    return env


@dataclass
class Outcome:
    """What one check (unit tests, or one chapter's selection) did on one copy."""
    place: str
    failed: bool
    failures: list
    seconds: float


def why(message, details):
    """The gist of a failed test: its message, or for a cell what went wrong in it."""
    message, details = ANSI.sub('', message).strip(), ANSI.sub('', details)
    if not message.startswith('Notebook cell execution failed'):
        return (message.splitlines() or [''])[0][:100]
    if 'Cell outputs differ' in message + details:
        return 'outputs differ from the stored ones'
    lines = [line.strip() for line in details.splitlines()]
    raised = [line for line in lines if EXCEPTION.match(line)]
    return (raised or ['cell failed'])[-1][:100]


def failures_in(junit_xml):
    """(test id, why) of each test that failed in a JUnit XML report."""
    found = []
    for case in ElementTree.parse(junit_xml).getroot().iter('testcase'):
        for problem in list(case.iter('failure')) + list(case.iter('error')):
            test = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
            found.append((test, why(problem.get('message') or '', problem.text or '')))
    return found


def pytest_run(root, args, place, stop_first=False, timeout=1200):
    """Run pytest in the copy after checking it imports the copy's package; Outcome."""
    report = root / f'junit-{place}.xml'
    book = str(root / 'book' / 'data_parallel') + os.sep
    code = ('import sys, data_parallel, pytest\n'
            f'if not data_parallel.__file__.startswith({book!r}):\n'
            '    print("imported", data_parallel.__file__, "not the copy")\n'
            f'    sys.exit({PROBE_FAILED})\n'
            'sys.exit(pytest.main(sys.argv[1:]))\n')
    command = [sys.executable, '-c', code, '-q', '-p', 'no:cacheprovider',
               f'--junitxml={report}', *(['-x'] if stop_first else []), *args]
    start = time.monotonic()
    done = subprocess.run(command, cwd=root, env=environment(root), capture_output=True,
                          text=True, timeout=timeout)
    seconds = time.monotonic() - start
    tail = '\n'.join((done.stdout + done.stderr).strip().splitlines()[-30:])
    if done.returncode not in (0, 1):
        raise HarnessError(f'{place}: pytest exited with {done.returncode}:\n{tail}')
    failures = failures_in(report)
    if done.returncode == 1 and not failures:
        raise HarnessError(f'{place}: pytest failed, naming no test:\n{tail}')
    return Outcome(place, done.returncode == 1, failures, seconds)


def run_chapter(root, chapter, origins, stop_first):
    """nbval on the chapter's selection; failures named by the original cell index."""
    outcome = pytest_run(root, [*NBVAL, f'book/{chapter}'], chapter[:2], stop_first)
    named = []
    for test, message in outcome.failures:
        number = int(test.rsplit(' ', 1)[-1])  # nbval names items 'Cell <n>', code only
        if origins[number] is None:
            raise HarnessError(f'{chapter}: the kernel imported another package: '
                               f'{message}')
        named.append((f'cell {origins[number]}', message))
    outcome.failures, outcome.place = named, f'checks of {chapter[:-6]}'
    return outcome


def run(folder, mutation=None, unit=None, chapters=None):
    """Outcomes of the unit tests and the chapters' checks on a (mutated) copy.

    Without a mutation, this is the control: every check must pass. A mutated run stops
    each chapter at its first failing cell (-x); the unit tests run in full, to name
    every test that notices.
    """
    unit = unit or mutation.unit
    chapters = chapters or mutation.chapters
    root = make_copy(folder, mutation)
    origins = write_chapters(root, chapters, mutation)
    outcomes = [pytest_run(root, list(unit), 'unit')]
    outcomes[0].place = 'unit tests'
    stop_first = mutation is not None
    for chapter in chapters:
        outcomes.append(run_chapter(root, chapter, origins[chapter], stop_first))
    return outcomes


def describe(outcome, expected_to_fail):
    """One line: place, verdict, seconds, and the first failures."""
    if expected_to_fail:
        verdict = 'caught' if outcome.failed else 'MISSED'
    else:
        verdict = 'FAILED' if outcome.failed else 'passed'
    shown = '; '.join(f'{test}: {message}' if message else test
                      for test, message in outcome.failures[:3])
    more = f' (+{len(outcome.failures) - 3} more)' if len(outcome.failures) > 3 else ''
    return (f'    {outcome.place:<36} {verdict:<7} {outcome.seconds:4.0f} s  '
            f'{shown}{more}').rstrip()
