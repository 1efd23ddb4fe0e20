"""pyproject.toml's floors are the ones the code needs: what `pip install` promises
(Colab, a download) must hold on the oldest Python and torch it accepts. Its version
is CHANGELOG.md's newest entry (eco.md §7); CITATION.cff names the same project."""
import re
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
import yaml

from tests.repo.helpers import ROOT, load
from tools import reader_copies

PROJECT = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']


def floor(spec):
    """The lower bound of a '>=X.Y' specifier, as a tuple of ints."""
    bound, = [s.version for s in SpecifierSet(spec) if s.operator == '>=']
    return tuple(int(part) for part in bound.split('.'))


def dependency(name):
    """The dependency of the package called name, as a packaging Requirement."""
    found, = [r for r in map(Requirement, PROJECT['dependencies']) if r.name == name]
    return found


def test_python_floor_is_the_makefiles_check():
    check = re.search(r'sys\.version_info < \((\d+), (\d+)\)',
                      (ROOT / 'Makefile').read_text())
    assert check, 'the Makefile checks no Python version'
    assert floor(PROJECT['requires-python']) == tuple(map(int, check.groups()))


def test_the_floors_are_what_the_job_torch_floor_installs():
    """ci.yml runs the reader copies on exactly the oldest torch that pip accepts."""
    env = load('ci.yml')['jobs']['torch-floor']['env']
    for name in ('torch', 'torchvision'):
        bound = str(dependency(name).specifier).removeprefix('>=')
        assert Version(env[name.upper()]) == Version(bound), (name, env, bound)


def test_floors_and_pins_pair_torchvision_with_its_torch_and_the_pins_satisfy():
    """torchvision 0.(N+15) is the release made with torch 2.N."""
    text = (ROOT / 'requirements.txt').read_text()
    pins = dict(re.findall(r'^([\w-]+)==(\S+)$', text, re.MULTILINE))
    names = ('torch', 'torchvision')
    floors = [floor(str(dependency(name).specifier)) for name in names]
    pinned = [tuple(map(int, pins[name].split('.')[:2])) for name in names]
    for torch, vision in (floors, pinned):
        assert vision == (0, torch[1] + 15), (torch, vision)
    for requirement in map(Requirement, PROJECT['dependencies']):
        if requirement.name in pins:
            assert requirement.specifier.contains(pins[requirement.name]), requirement


def test_the_newest_changelog_entry_is_pyprojects_version():
    text = (ROOT / 'CHANGELOG.md').read_text()
    versions = re.findall(r'^## (\d+\.\d+\.\d+)\b', text, re.MULTILINE)
    assert versions and versions[0] == PROJECT['version'], (
        f'CHANGELOG.md starts at {versions[:1]}, pyproject.toml says '
        f'{PROJECT["version"]}: add its entry')


def test_the_citation_names_this_repository_its_book_and_licence():
    """GitHub's "Cite this repository" (no version: pyproject.toml has it)."""
    cff = yaml.safe_load((ROOT / 'CITATION.cff').read_text())
    config = yaml.safe_load((ROOT / '_config.yml').read_text())
    assert cff['cff-version'] == '1.2.0' and cff['message'] and cff['authors']
    assert cff['title'].startswith(config['title'])
    assert cff['repository-code'] == config['repository']['url']
    assert cff['url'] == reader_copies.book_url()
    assert cff['license'] == PROJECT['license'] and 'version' not in cff
