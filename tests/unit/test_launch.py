"""launch: rank 0's lines come as they are said; however a job ends, all of it ends."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

from data_parallel import CPU_ONLY, launch, network, processes
from tests.helpers import REQUIRE_THROTTLE

# Rank 0 says ready and sleeps argv[1] s; the other waits at a barrier. torchrun starts
# each in a session of its own.
JOB = '''
import sys, time
import torch.distributed as dist
dist.init_process_group('gloo')
if dist.get_rank() == 0:
    print('ready', flush=True)
    time.sleep(float(sys.argv[1]))
dist.barrier()
'''


def torchrun_job(marker, sleeps=300):
    """Two JOB workers under torchrun: marker is their program."""
    Path(marker).write_text(JOB)
    return launch.torchrun_command([sleeps], world_size=2, script=marker)


def sleeper(marker, sleeps=0, own_session=False):
    """A launcher: starts a child sleeping 300 s, says ready, sleeps. With own_session
    the child starts a session of its own after launch's first walk: no walk sees it."""
    code = (f'import subprocess, sys, time\ntime.sleep({0.15 * own_session})\n'
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', "
            f"sys.argv[1]], start_new_session={own_session})\n"
            "print('ready', flush=True)\ntime.sleep(float(sys.argv[2]))")
    return [sys.executable, '-c', code, marker, str(sleeps)]


@pytest.fixture
def marker(tmp_path, leftovers):
    """A path that a test's processes mention; those still left are killed after it."""
    path = str(tmp_path / 'job.py')
    yield path
    for pid, _ in leftovers(path, 0):  # a failed test leaves nothing either
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize('kwargs, shown', [({'echo': True}, 'a\nb\n'), ({}, '')],
                         ids=['echo-true', 'quiet-by-default'])
def test_echo_prints_the_first_commands_lines_and_only_then(capsys, kwargs, shown):
    """Its stdout alone (torchrun's rank 0 lines, not the warnings on stderr)."""
    commands = [[sys.executable, '-c', 'import sys; print("a"); print("b", end=""); '
                 'print("on stderr", file=sys.stderr)'],
                [sys.executable, '-c', 'print("from command 1")']]
    outs = launch.launch(*commands, timeout=60, **kwargs)
    assert outs == ['a\nb\n', 'from command 1\n']  # a last line gets its newline
    assert capsys.readouterr().out == shown


def test_failure_shows_what_every_process_said():
    code = ('import sys\nprint("rank 0: epoch 1 done")\n'
            'print("ValueError: the batch was empty", file=sys.stderr)\nsys.exit(1)')
    with pytest.raises(RuntimeError) as error:
        launch.launch([sys.executable, '-c', code], timeout=60, echo=lambda line: None)
    message = str(error.value)
    assert message.startswith('torchrun exited with code 1:')
    assert 'rank 0: epoch 1 done' in message and 'the batch was empty' in message


# --- Ending a job. CALLER launches one (argv: command, time limit, bandwidth if any):
# says whether it sees /proc, then how it ended.
CALLER = '''
import ast, os, sys
from data_parallel import CPU_ONLY, launch
print('/proc exists:', os.path.exists('/proc'), flush=True)
try:
    launch.launch(ast.literal_eval(sys.argv[1]), env=CPU_ONLY,
                  timeout=int(sys.argv[2]), echo=True,
                  bandwidth=ast.literal_eval(sys.argv[3]) if sys.argv[3:] else None)
    print('ended')
except RuntimeError as error:
    print(error)
'''


@pytest.mark.slow
@pytest.mark.parametrize('job, limit, bandwidth', [
    (sleeper, 3, None), (torchrun_job, 25, None), (torchrun_job, 25, 100e6)],
    ids=['a-launcher-and-its-child', 'torchrun', 'torchrun-throttled'])
def test_time_limit_ends_the_job_and_all_it_started(request, marker, leftovers, job,
                                                    limit, bandwidth):
    """Behind a throttled wire (unshare, then sh, then torchrun: one PID) as without."""
    if bandwidth:
        request.getfixturevalue('throttle')  # skips where none can be made
    command, seen, start = job(marker, 300), [], time.monotonic()
    with pytest.raises(RuntimeError, match=f'ran past its {limit} s limit'):
        launch.launch(command, env=CPU_ONLY, timeout=limit, echo=seen.append,
                      bandwidth=bandwidth)
    assert time.monotonic() - start < limit + 20
    # the workers were up (behind the wire) and rank 0's line came while they ran:
    # launch passes lines on as they come, not when the job ends
    assert seen == ['ready\n']
    # a network namespace lives as long as a process in it: none left, none of it
    assert leftovers(marker) == []


@pytest.mark.slow
@pytest.mark.parametrize('bandwidth', [None, 100e6], ids=['open', 'throttled'])
def test_a_caller_killed_outright_ends_the_job(request, marker, leftovers, bandwidth):
    """SIGKILL (no finally runs) as from nbval's teardown after Ctrl-C, or a kernel shut
    down; throttled, the guard's SIGTERM must reach torchrun through unshare and sh.
    A Ctrl-C: test_a_kernel_interrupted_ends_the_job."""
    if bandwidth:
        request.getfixturevalue('throttle')  # skips where none can be made
    caller = subprocess.Popen([sys.executable, '-c', CALLER, repr(torchrun_job(marker)),
                               '300', repr(bandwidth)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert caller.stdout.readline() == '/proc exists: True\n'
    assert caller.stdout.readline() == 'ready\n', caller.stderr.read()
    assert len(leftovers(marker, 0)) >= 3  # torchrun and its two workers: running
    caller.kill()
    caller.communicate(timeout=60)
    assert leftovers(marker) == []


# A caller whose Ctrl-C lands inside Popen.poll after it took its lock, as it can
# between the acquire and the try of CPython's _internal_poll: the lock stays held,
# and Popen.wait would wait on it for ever. A launch that never polls gets its
# Ctrl-C from a timer instead, 2 s after the job said ready. SIGINT raises
# KeyboardInterrupt as in a terminal, even where the tests were started with it ignored
# (a shell's background job: `nohup make test &`), which Python keeps ignoring.
INTERRUPTED_IN_POLL = '''
import ast, os, signal, subprocess, sys, threading
signal.signal(signal.SIGINT, signal.default_int_handler)
from data_parallel import launch
ready, interrupted = threading.Event(), threading.Event()
poll = subprocess.Popen.poll
def poll_interrupted_once(self):
    if ready.is_set() and not interrupted.is_set():
        interrupted.set()
        self._waitpid_lock.acquire()
        raise KeyboardInterrupt
    return poll(self)
subprocess.Popen.poll = poll_interrupted_once
def ctrl_c():
    if not interrupted.is_set():
        interrupted.set()
        os.kill(os.getpid(), signal.SIGINT)
def echo(line):
    ready.set()
    threading.Timer(2, ctrl_c).start()
try:
    launch.launch(ast.literal_eval(sys.argv[1]), timeout=300, echo=echo)
except KeyboardInterrupt:
    print('interrupted')
'''


@pytest.mark.slow
def test_a_ctrl_c_inside_popen_poll_still_ends_the_job(marker, leftovers):
    caller = subprocess.run([sys.executable, '-c', INTERRUPTED_IN_POLL,
                             repr(sleeper(marker, 300))],
                            capture_output=True, text=True, timeout=60)
    assert caller.stdout == 'interrupted\n', caller.stderr
    assert leftovers(marker) == []


def said(kc, wanted):
    """The content of the kernel's first iopub message that wanted accepts."""
    # iopub, not shell: the shell queues replies to wait_for_ready's kernel_info
    # requests (one a second) before the cell's, when the kernel was slow to start
    deadline = time.monotonic() + 120
    while not wanted(content := kc.get_iopub_msg(timeout=120)['content']):
        assert time.monotonic() < deadline, 'the kernel never said it'
    return content


@pytest.mark.slow
def test_a_kernel_interrupted_ends_the_job(marker, leftovers):
    """A reader's Ctrl-C: the cell raises KeyboardInterrupt and its job ends (a kernel
    shut down gets SIGKILL: the killed-outright caller above)."""
    km, kc = start_new_kernel(kernel_name='python3')
    try:
        job = torchrun_job(marker)
        kc.execute(f'from data_parallel import launch\nlaunch.launch('
                   f'{job!r}, env={CPU_ONLY!r}, timeout=300, echo=True)')
        said(kc, lambda content: 'ready' in content.get('text', ''))  # a stream's text
        km.interrupt_kernel()
        error = said(kc, lambda content: 'ename' in content)  # the cell's error
        assert error['ename'] == 'KeyboardInterrupt'
        assert leftovers(marker) == []
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.parametrize('patch, kwargs, line', [
    ((network, 'throttle_problem', lambda: 'tc not found: ...'), {'bandwidth': 200e6},
     'bandwidth=2e+08 cannot be set on this machine: tc not found: ...'),
    ((os, 'name', 'nt'), {}, 'launch runs jobs on Linux and macOS only: on Windows, '
                             'run the chapters in WSL (Windows Subsystem for Linux)')],
    ids=['cannot-throttle', 'windows'])
def test_what_cannot_be_done_is_said_in_one_line(monkeypatch, patch, kwargs, line):
    monkeypatch.setattr(*patch)
    with pytest.raises(RuntimeError, match=f'^{re.escape(line)}$'):
        launch.launch(['true'], **kwargs)


def test_the_orphan_guard_is_linux_only(monkeypatch):
    """PR_SET_PDEATHSIG is Linux's: elsewhere the launcher starts as it is."""
    monkeypatch.setattr(sys, 'platform', 'darwin')
    assert processes.guarded(['torchrun', '-m', 'x']) == ['torchrun', '-m', 'x']


@pytest.mark.skipif(sys.platform != 'linux', reason='a guard on Linux only')
def test_the_orphan_guard_refuses_a_thread_other_than_the_main_one():
    """PR_SET_PDEATHSIG fires when the thread that started the child ends (prctl(2)): a
    guarded sleep started from a thread that then ended was SIGTERMed (rel L6)."""
    line = re.escape('start jobs and clusters from the main thread: Linux ends a '
                     'guarded process when the thread that started it ends '
                     '(PR_SET_PDEATHSIG)')
    with ThreadPoolExecutor(1) as thread, pytest.raises(RuntimeError, match=line):
        thread.submit(processes.guarded, ['sleep']).result()  # raises its error here
    assert processes.guarded(['sleep'])[-1] == 'sleep'  # the main thread's: guarded


# --- Where the process table cannot be read (macOS has no /proc): a job still ends,
# through torchrun's SIGTERM and the launchers' process groups.

TREE = '''
import signal, subprocess, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps a child as it ends
children = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
            for _ in range(2)]
print(*[child.pid for child in children], flush=True)
time.sleep(60)
'''


@pytest.fixture
def tree():
    """(launcher, its two children's pids): a process tree, killed after the test."""
    with subprocess.Popen([sys.executable, '-c', TREE], stdout=subprocess.PIPE,
                          text=True, start_new_session=True) as launcher:  # waited for
        yield launcher, [int(pid) for pid in launcher.stdout.readline().split()]
        os.killpg(launcher.pid, signal.SIGKILL)


def test_the_walk_survives_a_process_that_ends_in_the_middle(tree, monkeypatch):
    launcher, (ends, stays) = tree
    table, gone = psutil._ppid_map, psutil.Process(ends)

    def table_then_an_end():  # children() reads the table first, then each child
        ppids = table()
        gone.kill()
        gone.wait(timeout=5)
        return ppids
    monkeypatch.setattr(psutil, '_ppid_map', table_then_an_end)
    assert processes.descendants([launcher.pid]) == {processes.started(stays)}
    assert processes.started(ends) is None


@pytest.mark.parametrize('error', [psutil.NoSuchProcess, psutil.AccessDenied,
                                   PermissionError])
def test_a_process_that_cannot_be_read_is_left_alone(tree, monkeypatch, error):
    launcher, (unreadable, readable) = tree
    remembered = processes.started(unreadable)
    read = psutil.Process.create_time

    def create_time(self):
        if self.pid == unreadable:
            raise error(self.pid)
        return read(self)
    monkeypatch.setattr(psutil.Process, 'create_time', create_time)
    # AccessDenied ends psutil's walk (children() lets it through): nothing is found
    assert processes.descendants([launcher.pid]) <= {processes.started(readable)}
    assert processes.started(unreadable) is None
    processes.kill([], {remembered})  # not killed: it may no longer be the same process
    assert psutil.pid_exists(unreadable)


@pytest.mark.parametrize('own_session', [False, True],
                         ids=['proc', 'own-session-never-walked'])
def test_a_child_that_outlives_its_launcher_does_not_hold_the_job(marker, leftovers,
                                                                  own_session):
    """It holds the output pipe: its launcher's group ends it (without /proc too:
    test_with_no_proc_...); in a session of its own, launch's mark finds it."""
    start, job = time.monotonic(), sleeper(marker, own_session=own_session)
    assert launch.launch(job, timeout=30) == ['ready\n']
    assert time.monotonic() - start < 20
    assert leftovers(marker) == []


def test_a_second_ctrl_c_in_the_grace_period_still_ends_the_job(
        monkeypatch, marker, leftovers):
    """The child is in its launcher's group: only SIGKILL after the grace ends it."""
    def ctrl_c(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(processes, 'wait_ended', ctrl_c)  # the second, in the grace
    with pytest.raises(KeyboardInterrupt):  # the first, once the job is up
        launch.launch(sleeper(marker, 300), timeout=60, echo=ctrl_c)
    assert leftovers(marker) == []


# This machine's files without /proc, as on macOS: in a user and mount namespace, /proc
# is covered with a tmpfs that gets every other top folder bound into it, and chroot
# goes there. os.listdir('/proc') and psutil.pids() raise FileNotFoundError.
WITHOUT_PROC = r'''
mount -t tmpfs no-proc /proc && mkdir /proc/root || exit 1
for path in /*; do
  name=${path#/}
  if [ "$name" = proc ]; then continue
  elif [ -L "$path" ]; then cp -P "$path" "/proc/root/$name" || exit 1
  elif [ -d "$path" ]; then
    mkdir "/proc/root/$name" && mount --rbind "$path" "/proc/root/$name" || exit 1
  fi
done
exec chroot /proc/root sh -c 'cd "$0" && exec "$@"' "$PWD" "$@"
'''


def without_proc(argv):
    """argv run on this machine's files without /proc (unshare, then WITHOUT_PROC)."""
    return ['unshare', '--user', '--map-root-user', '--mount', 'sh', '-c', WITHOUT_PROC,
            'sh', *map(str, argv)]


@pytest.fixture
def hidden_proc():
    """without_proc; skip where no user namespace can be made, fail where it must."""
    try:
        result = subprocess.run(without_proc(['test', '!', '-e', '/proc']),
                                capture_output=True, text=True, timeout=60)
        problem = result.returncode and (result.stderr.strip() or 'unshare failed')
    except OSError as error:  # no unshare
        problem = str(error)
    if problem and os.environ.get(REQUIRE_THROTTLE):  # as conftest's throttle
        pytest.fail(f'user namespaces are required, yet: {problem}')
    if problem:
        pytest.skip(f'/proc cannot be hidden here: {problem}')
    return without_proc


@pytest.mark.slow
@pytest.mark.parametrize('job, said', [
    (torchrun_job, ['ready', 'the job ran past its 25 s limit and was stopped: give '
                              'it more time (timeout=...)']),
    (sleeper, ['ready', 'ended'])], ids=['torchrun-at-its-limit', 'a-child-outlives'])
def test_with_no_proc_a_job_still_ends_with_nothing_left(job, said, hidden_proc,
                                                         marker, leftovers):
    caller = subprocess.run(hidden_proc([sys.executable, '-c', CALLER,
                                         repr(job(marker)), 25]),
                            capture_output=True, text=True, timeout=180)
    assert caller.stdout.splitlines() == ['/proc exists: False', *said], caller.stderr
    assert leftovers(marker) == []


def test_left_by_finds_what_outlived_a_launch_of_this_process(marker):
    """A launch's mark begins with its caller's pid; left_by finds what carries it."""
    show = "import os; print(os.environ['MULTIGPU_LAUNCH'])"
    mark, = launch.launch([sys.executable, '-c', show], timeout=60)
    assert mark.startswith(f'{os.getpid()}-'), mark  # (chapter 7's last cell: none)
    env = {**os.environ, processes.MARK: f'{os.getpid()}-left'}
    with subprocess.Popen(sleeper(marker, 300), env=env,
                          stdout=subprocess.PIPE) as child:
        try:
            child.stdout.readline()  # ready: past the exec, its environment is env
            assert child.pid in dict(processes.left_by(os.getpid()))
            assert child.pid not in dict(processes.left_by(os.getpid() + 1))
        finally:
            child.kill()


def _never_ends(rank):
    """A rank that waits forever, as one whose peer skipped a collective does."""
    time.sleep(600 if rank else 0)


def test_spawned_processes_that_never_end_fail_the_test_in_time(spawn):
    start = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match='ran past 5 s'):
        spawn(_never_ends, (), 2, timeout=5)
    assert time.monotonic() - start < 60


@pytest.mark.parametrize('other, lo', [('en0', 'lo0'), ('eth0', 'lo')],
                         ids=['macos', 'linux'])
def test_the_loopback_is_found_by_its_address(monkeypatch, other, lo):
    """Chapter 7's two "nodes" bind to it: lo on Linux, lo0 on macOS."""
    table = {other: [types.SimpleNamespace(address='10.0.0.2')],  # psutil's snicaddr
             lo: [types.SimpleNamespace(address='127.0.0.1')]}  # in short
    monkeypatch.setattr(psutil, 'net_if_addrs', lambda: table)
    assert launch.loopback_interface() == lo
