"""Where unprivileged user namespaces are refused (GitHub's ubuntu-24.04 runners, most
containers): the tests of the throttled wire skip with one line, or fail with one line
where MULTIGPU_REQUIRE_THROTTLE demands the wire, and chapter 10 still passes nbval.
A stand-in `unshare`, first on PATH, fails as the kernel does there."""
import os
import re
import subprocess
import sys

import pytest

from tests.chapters import ROOT
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
    assert len(skips) >= 2 and all(REFUSED in line for line in skips), out
    assert not re.search(r'\d+ failed', out), out


def test_a_ci_that_requires_the_wire_fails_in_one_line():
    rc, out = without_namespaces('tests/unit/test_network.py', require=True)
    assert rc == 1, out
    assert out.count('MULTIGPU_REQUIRE_THROTTLE is set, yet: ') >= 3, out
    assert REFUSED in out


@pytest.mark.slow  # chapter 10's jobs that need no wire (about 2 minutes)
def test_chapter_10_passes_nbval_without_a_throttled_wire():
    rc, out = without_namespaces(
        '--nbval', '--nbval-current-env', '--nbval-sanitize-with',
        'tests/nbval_sanitize.cfg', 'book/10_when_the_network_is_the_bottleneck.ipynb',
        timeout=900)
    assert rc == 0, out[-3000:]
