"""Where unprivileged user namespaces are refused (GitHub's ubuntu-24.04 runners, most
containers): the tests of the throttled wire skip with one line, or fail with one line
where MULTIGPU_REQUIRE_THROTTLE demands the wire, and the chapters that need them
(book/chapters.toml) still pass nbval.
A stand-in `unshare`, first on PATH, fails as the kernel does there."""
import os
import re
import subprocess
import sys

import pytest

from tests.chapters import ROOT, chapters_with

STANDIN = ROOT / 'tests' / 'standins' / 'no-userns'
REFUSED = 'unshare: write failed /proc/self/uid_map: Operation not permitted'


def without_namespaces(*args, require=False, timeout=120):
    """pytest args, run with the stand-in unshare first on PATH; (exit code, output)."""
    env = {k: v for k, v in os.environ.items() if k != 'MULTIGPU_REQUIRE_THROTTLE'}
    env['PATH'] = f'{STANDIN}{os.pathsep}{env["PATH"]}'
    env['CI'] = 'true'  # as every GitHub runner sets it: no demand for the wire
    if require:
        env['MULTIGPU_REQUIRE_THROTTLE'] = '1'
    run = subprocess.run([sys.executable, '-m', 'pytest', '-rs', '-p', 'no:xdist',
                          *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    return run.returncode, run.stdout + run.stderr


def test_the_wire_tests_skip_with_the_kernels_reason():
    rc, out = without_namespaces('tests/unit/test_network.py')
    assert rc == 0, out
    skips = [line for line in out.splitlines() if line.startswith('SKIPPED')]
    assert skips and all(REFUSED in line for line in skips), out
    assert not re.search(r'\d+ failed', out), out


def test_a_ci_that_requires_the_wire_fails_in_one_line():
    rc, out = without_namespaces('tests/unit/test_network.py', require=True)
    assert rc == 1, out
    assert 'MULTIGPU_REQUIRE_THROTTLE is set, yet: ' in out, out
    assert REFUSED in out


NEEDY = chapters_with('needs', 'user namespaces')


@pytest.mark.slow  # its jobs that need no wire (chapter 10's: about 2 minutes)
@pytest.mark.parametrize('chapter', NEEDY, ids=[p.name[:2] for p in NEEDY])
def test_the_chapter_passes_nbval_without_a_throttled_wire(chapter):
    rc, out = without_namespaces(
        '--nbval', '--nbval-current-env', '--nbval-sanitize-with',
        'tests/nbval_sanitize.cfg', str(chapter.relative_to(ROOT)), timeout=900)
    assert rc == 0, out[-3000:]
