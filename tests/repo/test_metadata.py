"""pyproject.toml's floors are the ones the code needs: what `pip install` promises
(Colab, a download) must hold on the oldest Python and torch it accepts."""
import re
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tests.repo.helpers import ROOT

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


def test_torch_floor_has_the_public_fully_shard():
    """FSDP2's fully_shard is public in torch.distributed.fsdp from torch 2.6."""
    sources = '\n'.join(path.read_text()
                        for path in (ROOT / 'book' / 'data_parallel').rglob('*.py'))
    if 'from torch.distributed.fsdp import fully_shard' in sources:
        assert floor(str(dependency('torch').specifier)) >= (2, 6)


def test_torchvision_floor_is_the_release_made_with_the_torch_floor():
    torch_floor = floor(str(dependency('torch').specifier))
    assert floor(str(dependency('torchvision').specifier)) == (0, torch_floor[1] + 15)


def test_the_pins_of_requirements_satisfy_the_floors():
    text = (ROOT / 'requirements.txt').read_text()
    pins = dict(re.findall(r'^([\w-]+)==(\S+)$', text, re.MULTILINE))
    assert pins['torchvision'].split('.')[1] == str(
        int(pins['torch'].split('.')[1]) + 15)  # the same pairing as the floors
    for requirement in map(Requirement, PROJECT['dependencies']):
        if requirement.name in pins:
            assert requirement.specifier.contains(pins[requirement.name]), requirement
