"""The package's floor plan, which its docstring tells in words: layers of modules
(LAYERS), imports only downwards or sideways, jobs that import no other job but the
kits (KITS) nor the taught program (but ALLOWED_UPWARD), small modules."""
import ast
import re
from pathlib import Path

import pytest

import data_parallel as dp
from tests.repo.helpers import ROOT

PACKAGE = Path(dp.__file__).parent
LAYERS = {
    'machinery': (0, {'paths', 'cli', 'results', 'files', 'snapshot', 'devices',
                      'data', 'launch', 'network', 'processes', 'slurm',
                      'cluster_watchdog'}),
    'taught': (1, {'scratch', 'collectives', 'performance', 'sharding', 'models',
                  'tensor_parallel', 'pipeline', 'experts'}),
    'program': (2, {'train_ddp'}),
    'top': (3, {'figures', 'jobs'}),
}
ALLOWED_UPWARD = {('jobs.faults', 'train_ddp')}  # faults wraps the taught program
# what jobs share, no program of their own: measuring, timelines, DCP snapshots
KITS = {'jobs.measure', 'jobs.timeline', 'jobs.dcp_snapshot'}
MAX_LINES = 300
MODULES = sorted(PACKAGE.rglob('*.py'))


def module_name(path):
    """'jobs.measure' for book/data_parallel/jobs/measure.py; '' for __init__.py."""
    parts = path.relative_to(PACKAGE).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


NAMES = {module_name(p) for p in MODULES}


def import_names(path, package):
    """What the file imports, modules and names; package: its own package's parts."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):  # `from . import a` imports module a
            base = package[:len(package) + 1 - node.level] if node.level else []
            module = '.'.join(base + [node.module] if node.module else base)
            names.update([module] + [f'{module}.{alias.name}' for alias in node.names])
    return names


def imported(path):
    """Names of the package's modules that the file at path imports."""
    package = ['data_parallel', *path.parent.relative_to(PACKAGE).parts]
    return {name.removeprefix('data_parallel.') for name in import_names(path, package)
            if name.startswith('data_parallel.')} & NAMES


def layer(name):
    """(layer number, group) of a module, by its top-level name."""
    top = name.split('.')[0]
    for group, (number, members) in LAYERS.items():
        if top in members:
            return number, group
    raise LookupError(f'{name} is in no layer: add it to LAYERS in {__file__}')


GRAPH = {module_name(p): imported(p) for p in MODULES}


def violations(graph):
    """One line per import that breaks the layering, in a {module: imports} graph."""
    found = []
    for name, targets in sorted(graph.items()):
        if not name:  # the package's face, __init__, may import anything
            continue
        mine, _ = layer(name)
        for target in sorted(targets):
            if (name, target) in ALLOWED_UPWARD:
                continue
            theirs, group = layer(target)
            if theirs > mine:
                found.append(f'{name} (layer {mine}) imports {target} ({group})')
            elif name.startswith('jobs.') and target.startswith('jobs.') \
                    and target not in KITS:
                found.append(f'job {name} imports job {target}')
            elif name.startswith('jobs.') and target == 'train_ddp':
                found.append(f'job {name} imports the taught program')
    return found


def test_imports_go_down_or_sideways():  # also: every module has a layer, or it raises
    assert violations(GRAPH) == []


def test_the_layering_check_catches_a_planted_import():
    assert violations({'collectives': {'jobs.measure', 'scratch'}}) == [
        'collectives (layer 1) imports jobs.measure (top)']


@pytest.mark.parametrize('where, spelled, allowed', [
    # import the installed package, never edit the import path (chapters included)
    (['book/**/*.py', 'book/[0-9][0-9]_*.ipynb', 'tools/*.py', 'tests/**/*.py'],
     'sys' + '.path', []),  # spelled apart, so that this file does not find itself
    # one definition of the repository root: dp.repo_root(), work_dir(), data_root()
    (['book/data_parallel/*.py', 'tools/*.py', 'tests/*.py'], 'parents' + '[',
     ['paths.py']),
    # inside the package `import data_parallel as dp` hides what a module needs
    (['book/data_parallel/**/*.py'], 'import data_parallel as dp', []),
], ids=['import-path', 'repo-root', 'package-face'])
def test_a_spelling_only_its_one_home_uses(where, spelled, allowed):
    found = [path.name for pattern in where for path in ROOT.glob(pattern)
             if spelled in path.read_text()]
    assert found == allowed, f'{spelled!r} in {found}'


def test_modules_are_small():
    sizes = {p.relative_to(PACKAGE): len(p.read_text().splitlines()) for p in MODULES}
    large = [f'{path}: {lines} lines' for path, lines in sizes.items()
             if lines > MAX_LINES]
    assert not large, f'{large}; split them by concern'


def test_readme_layout_lists_every_module():
    """The README's layout section names every module of the package and every tool."""
    text = (ROOT / 'README.md').read_text()
    section = text.split('\n## Layout', 1)[1].split('\n## ', 1)[0]
    names = {p.stem for p in MODULES if p.name != '__init__.py'}
    names |= {p.parent.name + '/' for p in MODULES if p.name == '__init__.py'
              and p.parent != PACKAGE}
    names |= {p.name for p in (ROOT / 'tools').glob('*.py') if p.name != '__init__.py'}
    names |= {p.name + '/' for p in (ROOT / 'tests').iterdir()
              if p.is_dir() and not p.name.startswith(('_', '.'))}
    missing = sorted(n for n in names if not re.search(rf'\b{re.escape(n)}', section))
    assert not missing, f'README.md ## Layout does not list: {missing}'


def test_no_test_module_imports_a_test_module_and_no_tool_imports_tests():
    """Shared helpers live in modules of their own (tests/chapters.py, helpers.py);
    tests/ may drive tools/ (tools/browser.py's Chromium), never the other way."""
    found = [f'{path.relative_to(ROOT)}: {name}'
             for path in sorted([*ROOT.glob('tests/**/*.py'), *ROOT.glob('tools/*.py')])
             for name in import_names(path, [*path.parent.relative_to(ROOT).parts])
             if re.search(r'(^|\.)(test_\w+|conftest)(\.|$)', name)
             or path.parent.name == 'tools' and re.match(r'tests(\.|$)', name)]
    assert not found, found
