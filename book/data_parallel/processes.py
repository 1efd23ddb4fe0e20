"""The processes a job started: found, and ended, so that none outlives its launch.

launch (launch.py) starts each command as a launcher in a session of its own; these
functions find what the launchers start (below them in the process table, or by the
mark each inherits) and end it all, torchrun's way first.
"""
import contextlib
import os
import signal
import sys
import threading
import time

import psutil

MARK = 'MULTIGPU_LAUNCH'
"""Environment variable that carries a launch's own mark to every process it starts.

The mark is the launching process's pid, a dash and a random token: `left_by` finds
what any launch of one process left, `marked` what one launch left.
"""


# Reading the process table is best effort. A process that vanishes or is not ours
# raises NoSuchProcess, ZombieProcess or AccessDenied (psutil.Error); a table that
# cannot be read raises OSError (psutil.pids() lists /proc on Linux), IndexError (an
# empty /proc: `_LOWEST_PID = ret[0]` in psutil/__init__.py) or what psutil's C code
# raises elsewhere (RuntimeError on macOS, psutil#910). None of them may stop a job's
# end: a process that cannot be read is not killed by pid, and stop still ends the job
# through torchrun's SIGTERM and the launchers' process groups.


def started(pid):
    """(pid, start time) of a live process, or None: a pid reused later differs."""
    try:
        return pid, psutil.Process(pid).create_time()
    except Exception:  # gone, or unreadable (see above)
        return None


def descendants(pids):
    """Every process below the given ones that can be read, as started pairs."""
    found = set()
    for pid in pids:
        try:  # children() skips a child that vanishes mid-walk, and a reused pid
            found |= {(child.pid, child.create_time())  # cached by children()
                      for child in psutil.Process(pid).children(recursive=True)}
        except Exception:  # gone, or unreadable (see above)
            pass
    return found


def marked(mark):
    """Every readable process whose environment carries mark, as started pairs.

    The mark is inherited by every process a job starts, in any session, even one whose
    parent ended before a walk could see it.
    """
    return _carrying(lambda found: found == mark)


def left_by(pid):
    """Every readable process that a launch by process pid started, as started pairs."""
    return _carrying(lambda found: found.startswith(f'{pid}-'))


def _carrying(wanted):
    """The readable processes whose mark passes wanted(mark), as started pairs."""
    try:
        return {(proc.pid, proc.info['create_time'])
                for proc in psutil.process_iter(['environ', 'create_time'])
                if wanted((proc.info['environ'] or {}).get(MARK, ''))}
    except Exception:  # a table that cannot be read (see above)
        return set()


def unreaped(procs):
    """The pids of the launchers not yet reaped: none of them can belong to another."""
    return [p.pid for p in procs if p.returncode is None]


def _killpg(p):
    """SIGKILL launcher p's process group, which its pid names."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)


def ended(p):
    """Whether launcher p has ended; as it is reaped, SIGKILL what is left of its group.

    Once reaped, its pid may in time name another process's group: its group is killed
    then, at once, and never later (kill leaves it alone). Reaped with os.waitpid, not
    Popen.poll: poll takes a lock before its try (_internal_poll in CPython's
    subprocess.py), so a Ctrl-C that lands just then leaves the lock held, and
    Popen.wait then waits on it for ever.
    """
    if p.returncode is None:
        try:
            pid, status = os.waitpid(p.pid, os.WNOHANG)
        except ChildProcessError:  # reaped, its status lost (to an interrupt, or
            pid, status = p.pid, 0  # SIGCHLD ignored): 0, as Popen.poll says then
        if pid == p.pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            _killpg(p)
    return p.returncode is not None


def wait_ended(procs, deadline=float('inf')):
    """Wait until every launcher has ended, or until deadline (time.monotonic)."""
    while not all(map(ended, procs)) and time.monotonic() < deadline:
        time.sleep(0.05)


def kill(procs, family):
    """SIGKILL the launchers' process groups and every remembered descendant."""
    for p in procs:
        if p.returncode is None:  # not reaped: its pid, and so its group, is still its
            _killpg(p)
    for pid, start in family:
        if started(pid) == (pid, start):  # not a new process that got the same pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def stop(procs, family, mark, grace=10):
    """End a job as torchrun expects: SIGTERM to each launcher, wait, then SIGKILL all.

    torchrun starts each worker in a session of its own (start_new_session in
    torch/distributed/elastic/multiprocessing/subprocess_handler/subprocess_handler.py),
    so killing the launcher's group does not reach them; on SIGTERM its agent shuts its
    workers down ("Received ... death signal, shutting down workers" in
    torch/distributed/elastic/agent/server/api.py). What survives the grace period is
    killed: the processes found before any signal was sent, and those marked.
    """
    family = set(family) | descendants(unreaped(procs))
    for p in procs:
        if not ended(p):  # not reaped yet (send_signal could reap it: see ended)
            os.kill(p.pid, signal.SIGTERM)
    try:
        wait_ended(procs, time.monotonic() + grace)
    finally:  # a second Ctrl-C may cut the grace period short, never the kill
        kill(procs, family | marked(mark))


# Run first in each launcher: it asks Linux to send it SIGTERM when the process that
# started it dies (PR_SET_PDEATHSIG), so that a notebook kernel killed outright (a
# shutdown, nbval after Ctrl-C) still ends its jobs, then it becomes the launcher.
ORPHAN_GUARD = ('import ctypes, os, signal, sys\n'
                 'ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n'
                 'if os.getppid() != int(sys.argv[1]):\n'
                 '    sys.exit(1)  # the parent died before the request was made\n'
                 'try:\n'
                 '    os.execvp(sys.argv[2], sys.argv[2:])\n'
                 'except OSError as error:\n'
                 '    sys.exit(f"cannot start {sys.argv[2]}: {error.strerror}")')


def guarded(argv):
    """argv behind ORPHAN_GUARD on Linux; unchanged elsewhere."""
    if not sys.platform.startswith('linux'):
        return list(argv)
    # the guard's signal comes when the starting *thread* ends (prctl(2)), so a
    # worker thread's launch would lose its processes while Python goes on
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError('start jobs and clusters from the main thread: Linux ends a '
                           'guarded process when the thread that started it ends '
                           '(PR_SET_PDEATHSIG)')
    return [sys.executable, '-c', ORPHAN_GUARD, str(os.getpid()), *map(str, argv)]
