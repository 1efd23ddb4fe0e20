"""The launch helper: rank 0's lines arrive while the job runs; failures, time limits,
Ctrl-C and a killed caller end every process and say what happened."""
import contextlib
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

from data_parallel import launch, network

CPU_ONLY = {'CUDA_VISIBLE_DEVICES': ''}

# Rank 0 prints a line, then waits for a file that only someone who has read that line
# can create. If launch held the output back until the end, the job would never end on
# its own: it gives up after 60 s with exit code 3, and the test fails.
WAITS_FOR_READER = '''
import os, sys, time
import torch.distributed as dist
dist.init_process_group('gloo')
if dist.get_rank() == 0:
    print('epoch 1 done', flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]):
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.05)
    print('epoch 2 done', flush=True)
else:
    print('rank 1 says nothing on stdout', file=sys.stderr)
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_first_line_arrives_before_the_job_ends(tmp_path):
    program, marker = tmp_path / 'job.py', tmp_path / 'reader_saw_epoch_1'
    program.write_text(WAITS_FOR_READER)
    seen = []

    def echo(line):
        seen.append(line)
        if line == 'epoch 1 done\n':
            marker.touch()  # lets the job go on: it is still running at this point

    command = launch.torchrun_command([marker], world_size=2, script=program)
    out, = launch.launch(command, env=CPU_ONLY, timeout=120, echo=echo)
    assert seen == ['epoch 1 done\n', 'epoch 2 done\n']
    assert out == ''.join(seen)  # the whole output is returned as well


def test_echo_true_prints_the_first_commands_lines(capsys):
    commands = [[sys.executable, '-c', f'print("from command {i}")'] for i in (0, 1)]
    outs = launch.launch(*commands, echo=True, timeout=60)
    assert outs == ['from command 0\n', 'from command 1\n']
    assert capsys.readouterr().out == 'from command 0\n'


def test_quiet_by_default_and_lines_without_a_final_newline(capsys):
    out, = launch.launch([sys.executable, '-c', 'print("a"); print("b", end="")'],
                         timeout=60)
    assert out == 'a\nb\n'
    assert capsys.readouterr().out == ''


def test_failure_shows_what_every_process_said():
    code = textwrap.dedent('''
        import sys
        print('rank 0: epoch 1 done')
        print('ValueError: the batch was empty', file=sys.stderr)
        sys.exit(1)''')
    with pytest.raises(RuntimeError) as error:
        launch.launch([sys.executable, '-c', code], timeout=60, echo=lambda line: None)
    message = str(error.value)
    assert message.startswith('torchrun exited with code 1:')
    assert 'rank 0: epoch 1 done' in message and 'the batch was empty' in message


@pytest.mark.slow
def test_time_limit_stops_the_job_and_its_children(tmp_path):
    pid_file = tmp_path / 'child.pid'
    code = textwrap.dedent(f'''
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
        open({str(pid_file)!r}, 'w').write(str(child.pid))
        print('started', flush=True)
        time.sleep(120)''')
    start = time.monotonic()
    with pytest.raises(RuntimeError, match='ran past its 3 s limit'):
        launch.launch([sys.executable, '-c', code], timeout=3)
    assert time.monotonic() - start < 30
    assert not alive(int(pid_file.read_text()))  # killed with its group, not left behind


def alive(pid):
    """Whether pid still runs 5 s on (a killed child nobody has reaped is a zombie: not)."""
    deadline = time.monotonic() + 5  # SIGKILL is delivered, not waited for
    while time.monotonic() < deadline:
        try:
            with open(f'/proc/{pid}/stat') as f:
                if f.read().rsplit(')', 1)[1].split()[0] == 'Z':
                    return False
        except FileNotFoundError:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
def test_a_worker_that_outlives_its_launcher_does_not_hold_the_job(tmp_path):
    # The launcher exits while a process it started still holds the output pipe open.
    code = textwrap.dedent('''
        import subprocess, sys
        child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
        print(child.pid)''')
    start = time.monotonic()
    out, = launch.launch([sys.executable, '-c', code], timeout=60)
    assert time.monotonic() - start < 30
    assert not alive(int(out))


# --- Ending a job: a real torchrun job whose two workers sleep -----------------------
# torchrun starts each worker in a session of its own, so these tests use real torchrun
# workers: plain children of the launcher would die with its process group anyway.

SLEEPS = '''
import time
import torch.distributed as dist
dist.init_process_group('gloo')
if dist.get_rank() == 0:
    print('ready', flush=True)
time.sleep(300)
'''

CALLER = '''
import ast, sys
from data_parallel import launch, network
launch.launch(ast.literal_eval(sys.argv[1]), env={'CUDA_VISIBLE_DEVICES': ''},
              timeout=300, echo=True)
'''


def end_leftovers(leftovers, marker):
    """SIGKILL what a test left running: a failed test leaves nothing either."""
    for pid, _ in leftovers(marker, 0):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def sleeping_job(tmp_path, leftovers):
    """(command, marker) of a torchrun job that never ends; killed after the test."""
    program = tmp_path / 'sleeps.py'
    program.write_text(SLEEPS)
    yield launch.torchrun_command([], world_size=2, script=program), str(program)
    end_leftovers(leftovers, str(program))


OUTLIVES = ('import subprocess, sys\n'
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', "
            'sys.argv[1]])')


@pytest.fixture
def outliving_job(tmp_path, leftovers):
    """(command, marker) of a launcher that exits at once while its child sleeps on."""
    marker = str(tmp_path / 'outlives')
    yield [sys.executable, '-c', OUTLIVES, marker], marker
    end_leftovers(leftovers, marker)


def start_caller(command):
    """A Python process that launches command; returns once rank 0 said 'ready'."""
    caller = subprocess.Popen([sys.executable, '-c', CALLER, repr(command)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert caller.stdout.readline() == 'ready\n', caller.stderr.read()
    return caller


@pytest.mark.slow
def test_time_limit_ends_torchrun_and_its_workers(sleeping_job, leftovers):
    command, marker = sleeping_job
    seen = []
    with pytest.raises(RuntimeError, match='ran past its 25 s limit'):
        launch.launch(command, env=CPU_ONLY, timeout=25, echo=seen.append)
    assert seen == ['ready\n']  # the workers were up when time ran out
    assert leftovers(marker) == []


@pytest.mark.slow
def test_ctrl_c_in_the_caller_ends_the_job(sleeping_job, leftovers):
    command, marker = sleeping_job
    caller = start_caller(command)
    assert len(leftovers(marker, 0)) >= 3  # torchrun and its two workers: running
    caller.send_signal(signal.SIGINT)
    _, err = caller.communicate(timeout=60)
    assert 'KeyboardInterrupt' in err
    assert leftovers(marker) == []


@pytest.mark.slow
def test_a_caller_killed_outright_still_ends_the_job(sleeping_job, leftovers):
    """As nbval's teardown after Ctrl-C, or a kernel shut down: no finally runs."""
    command, marker = sleeping_job
    caller = start_caller(command)
    caller.kill()
    caller.communicate(timeout=60)
    assert leftovers(marker) == []


def kernel_running(command):
    """A Jupyter kernel, its client and the id of its cell that launches command."""
    km, kc = start_new_kernel(kernel_name='python3')
    msg_id = kc.execute(f'from data_parallel import launch\n'
                        f'launch.launch({command!r}, env={CPU_ONLY!r}, timeout=300, '
                        f'echo=True)')
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=120)
        if msg['msg_type'] == 'stream' and 'ready' in msg['content']['text']:
            return km, kc, msg_id
    raise AssertionError('the job in the kernel never said ready')


def reply_to(kc, msg_id, timeout):
    """The shell reply to request msg_id, past the replies to earlier requests."""
    # wait_for_ready sends a kernel_info request each second until one is answered: a
    # kernel slow to start (a busy CI) answers them all, and those replies come first.
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
        if reply['parent_header'].get('msg_id') == msg_id:
            return reply


@pytest.mark.slow
def test_interrupting_the_kernel_ends_the_job(sleeping_job, leftovers):
    command, marker = sleeping_job
    km, kc, msg_id = kernel_running(command)
    try:
        km.interrupt_kernel()
        reply = reply_to(kc, msg_id, timeout=60)
        assert reply['content']['ename'] == 'KeyboardInterrupt'
        assert leftovers(marker) == []
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_shutting_the_kernel_down_ends_the_job(sleeping_job, leftovers):
    command, marker = sleeping_job
    km, kc, _ = kernel_running(command)
    kc.stop_channels()
    km.shutdown_kernel(now=True)  # SIGKILL: the cell's finally never runs
    assert leftovers(marker) == []


@pytest.mark.slow
def test_a_throttled_job_ends_whole_at_its_time_limit(throttle, sleeping_job,
                                                     leftovers):
    """Behind a throttled wire (unshare, then sh, then torchrun: one PID) as without."""
    command, marker = sleeping_job
    seen = []
    with pytest.raises(RuntimeError, match='ran past its 25 s limit'):
        launch.launch(command, env=CPU_ONLY, timeout=25, echo=seen.append,
                      bandwidth=100e6)
    assert seen == ['ready\n']  # the workers were up, behind the wire, at the limit
    # a network namespace lives as long as a process in it: none left, none of it
    assert leftovers(marker) == []


def test_a_machine_that_cannot_throttle_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(network, 'throttle_problem', lambda: 'tc not found: ...')
    with pytest.raises(RuntimeError, match=r'^bandwidth=2e\+08 cannot be set on this '
                                           r'machine: tc not found: \.\.\.$'):
        launch.launch(['true'], bandwidth=200e6)


def test_reply_to_skips_the_replies_to_earlier_requests():
    """As after a slow kernel start: kernel_info replies queued before the cell's."""
    class Client:
        replies = [{'parent_header': {'msg_id': 'info-2'}, 'content': {'status': 'ok'}},
                   {'parent_header': {'msg_id': 'cell'}, 'content': {'ename': 'X'}}]

        def get_shell_msg(self, timeout):
            return self.replies.pop(0)
    assert reply_to(Client(), 'cell', timeout=1)['content'] == {'ename': 'X'}


# --- Where the process table cannot be read: macOS has no /proc ---------------------
# launch reads the process table through psutil; a process that vanishes or cannot be
# read must not stop a job's end, and where none can be read, torchrun's SIGTERM and
# the launchers' process groups still end it.

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
    launcher = subprocess.Popen([sys.executable, '-c', TREE], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
    pids = [int(pid) for pid in launcher.stdout.readline().split()]
    yield launcher, pids
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
    launcher.stdout.close()


def test_the_walk_survives_a_process_that_ends_in_the_middle(tree, monkeypatch):
    launcher, (ends, stays) = tree
    table = psutil._ppid_map  # children() reads the table first, then each child

    def table_then_an_end():
        ppids = table()
        os.kill(ends, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while psutil.pid_exists(ends) and time.monotonic() < deadline:
            time.sleep(0.01)
        return ppids
    monkeypatch.setattr(psutil, '_ppid_map', table_then_an_end)
    assert launch._descendants([launcher.pid]) == {launch._started(stays)}
    assert launch._started(ends) is None


@pytest.mark.parametrize('error', [psutil.NoSuchProcess, psutil.ZombieProcess,
                                   psutil.AccessDenied, PermissionError])
def test_a_process_that_cannot_be_read_is_left_alone(tree, monkeypatch, error):
    launcher, (unreadable, readable) = tree
    remembered = launch._started(unreadable)
    read = psutil.Process.create_time

    def create_time(self):
        if self.pid == unreadable:
            raise error(self.pid)
        return read(self)
    monkeypatch.setattr(psutil.Process, 'create_time', create_time)
    # AccessDenied ends psutil's walk (children() lets it through): nothing is found
    assert launch._descendants([launcher.pid]) <= {launch._started(readable)}
    assert launch._started(unreadable) is None
    launch._kill([], {remembered})  # not killed: it may no longer be the same process
    assert psutil.pid_exists(unreadable)


def no_proc(*args, **kwargs):
    """psutil.Process where there is no /proc to read, as os.listdir('/proc') fails."""
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), '/proc')


def test_with_no_process_readable_the_launchers_group_still_ends(monkeypatch,
                                                                 outliving_job,
                                                                 leftovers):
    monkeypatch.setattr(psutil, 'Process', no_proc)
    command, marker = outliving_job
    start = time.monotonic()
    assert launch.launch(command, timeout=30) == ['']
    assert time.monotonic() - start < 20
    assert leftovers(marker) == []


# This machine's file tree without /proc, as on macOS: in a user and mount namespace,
# /proc is covered with a tmpfs that gets every other top folder bound into it, and
# chroot goes there. os.listdir('/proc') and psutil.pids() raise FileNotFoundError.
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
    if problem and os.environ.get('MULTIGPU_REQUIRE_THROTTLE'):  # as conftest's
        pytest.fail(f'user namespaces are required, yet: {problem}')
    if problem:
        pytest.skip(f'/proc cannot be hidden here: {problem}')
    return without_proc


CALLER_WITHOUT_PROC = '''
import ast, os, sys
from data_parallel import launch
print('/proc exists:', os.path.exists('/proc'), flush=True)
try:
    launch.launch(ast.literal_eval(sys.argv[1]), env={'CUDA_VISIBLE_DEVICES': ''},
                  timeout=int(sys.argv[2]), echo=True)
    print('ended')
except RuntimeError as error:
    print(error)
'''


@pytest.mark.slow
@pytest.mark.parametrize('job, said', [
    ('sleeping_job', ['ready', 'the job ran past its 25 s limit and was stopped: give '
                               'it more time (timeout=...)']),
    ('outliving_job', ['ended'])], ids=['torchrun-at-its-limit', 'a-child-outlives'])
def test_with_no_proc_a_job_still_ends_with_nothing_left(job, said, hidden_proc,
                                                         request, leftovers):
    command, marker = request.getfixturevalue(job)
    caller = subprocess.run(hidden_proc([sys.executable, '-c', CALLER_WITHOUT_PROC,
                                         repr(command), 25]),
                            capture_output=True, text=True, timeout=180)
    assert caller.stdout.splitlines() == ['/proc exists: False', *said], caller.stderr
    assert leftovers(marker) == []


def test_launch_on_windows_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(os, 'name', 'nt')
    with pytest.raises(RuntimeError, match=r'^launch runs jobs on Linux and macOS '
                                           r'only: on Windows, run the chapters in WSL '
                                           r'\(Windows Subsystem for Linux\)$'):
        launch.launch(['true'])


def test_the_orphan_guard_is_linux_only(monkeypatch):
    """PR_SET_PDEATHSIG is Linux's: elsewhere the launcher starts as it is."""
    monkeypatch.setattr(sys, 'platform', 'darwin')
    assert launch._guarded(['torchrun', '-m', 'x']) == ['torchrun', '-m', 'x']
