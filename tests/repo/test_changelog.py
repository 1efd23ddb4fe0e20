"""CHANGELOG.md's newest entry is the version pyproject.toml names (eco.md §7)."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_newest_entry_is_pyprojects_version():
    project = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']
    text = (ROOT / 'CHANGELOG.md').read_text()
    versions = re.findall(r'^## (\d+\.\d+\.\d+)\b', text, re.MULTILINE)
    assert versions and versions[0] == project['version'], (
        f'CHANGELOG.md starts at {versions[:1]}, pyproject.toml says '
        f'{project["version"]}: add its entry')
