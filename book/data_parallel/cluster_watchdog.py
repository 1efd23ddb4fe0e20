"""A local SLURM cluster's watchdog: what the cluster (slurm.py) leaves when the process
that owns it dies without stopping it is ended and removed.

The cluster's daemons end with their owner (processes.guarded), but not what they
started: slurmd starts each job step's slurmstepd as a daemon (its parent is pid 1),
which outlives the owner with its job and then retries its last message to the
controller every 15 s for up to an hour (RETRY_DELAY, MAX_RETRY in slurmstepd/mgr.c);
the cluster's folders, munge key included, stay too. An owner killed outright (SIGKILL:
the OOM killer, a restart of a notebook kernel busy in a cell) runs no exit hook, so
LocalCluster.start starts this watchdog in a session of its own (a signal to the
owner's process group misses it). It polls its parent, noting what the nodes' slurmd
hold; once the owner is gone it SIGKILLs every process of the cluster (those noted
too: slurmd, ended with the owner, no longer holds them) and removes the cluster's
folders, then ends.
LocalCluster.stop ends it after its own clean-up.

It runs by its path (`python -P cluster_watchdog.py OWNER FOLDER SOCKETS`) and imports
no other module of the package: importing the package imports torch (seconds, memory).
"""
import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

OWNER = 'owner.json'  # in the cluster's folder: who owns it, and its socket folder
PREFIX = 'slurm-cluster-'  # LocalCluster's default folders: tempfile.mkdtemp(PREFIX)
POLL = 0.5  # seconds between two looks at the owner
# prctl(PR_SET_CHILD_SUBREAPER), which execve keeps: a process of a job that leaves its
# parents behind (setsid, a double fork, env -i) is adopted by the daemon, not pid 1
ADOPT = ('import ctypes, os, sys\n'
         'ctypes.CDLL(None).prctl(36, 1)\n'
         'os.execvp(sys.argv[1], sys.argv[1:])')


def adopting(argv):
    """argv as a daemon that adopts its descendants' orphans (Linux only)."""
    return [sys.executable, '-P', '-c', ADOPT, *argv]


def members(folder):
    """Every readable process of the cluster in folder (daemons, steps, jobs) by pid.

    A job's processes carry SLURM_CONF; slurmstepd and slurmscriptd overwrite their
    environment with their titles, but hold a log file of the folder open; a job's
    daemon that dropped both (setsid env -i) is slurmd's, which adopted it.
    """
    conf, found = str(Path(folder) / 'slurm.conf'), {}
    for proc in psutil.process_iter(['environ', 'open_files']):
        files = [f.path for f in proc.info['open_files'] or []]
        if ((proc.info['environ'] or {}).get('SLURM_CONF') == conf
                or any(Path(f).is_relative_to(folder) for f in files)):
            found[proc.pid] = proc
    for proc in list(found.values()):  # and what the daemons adopted (ADOPT)
        with contextlib.suppress(psutil.Error):
            found.update((child.pid, child) for child in proc.children(recursive=True)
                         if child.status() != psutil.STATUS_ZOMBIE)
    # never this process nor its ancestors (an owner inside a Slurm job, a caller or its
    # parent with a log of the folder open): stop would SIGKILL its own caller
    me = psutil.Process()
    for proc in (me, *me.parents()):
        found.pop(proc.pid, None)
    return found


def kill(found):
    """SIGKILL each process in found (pid: psutil.Process), skipping those gone."""
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()


def remove(folder, sockets, timeout=30):
    """SIGKILL the cluster's processes until none is left, then remove its folders."""
    deadline = time.monotonic() + timeout
    # all at once: slurmstepd blocks SIGTERM, and the daemons would wait on each other;
    # look again after each round, as slurmd may start a step between a look and a kill
    while (found := members(folder)) and time.monotonic() < deadline:
        kill(found)
        time.sleep(0.1)
    for path in (folder, sockets):
        shutil.rmtree(path, ignore_errors=True)


def watch(folder, sockets):
    """Record this process as the cluster's owner and start its watchdog (a Popen)."""
    me = psutil.Process()
    (Path(folder) / OWNER).write_text(json.dumps(
        {'pid': me.pid, 'started': me.create_time(), 'sockets': str(sockets)}))
    # its own session: a signal to the owner's group (a kernel restart) misses it; no
    # output pipe of the owner's, which a caller reading it to its end would wait on
    return subprocess.Popen(
        [sys.executable, '-P', Path(__file__).resolve(), str(me.pid), str(folder),
         str(sockets)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)


def end(watchdog):
    """End a watchdog after a normal stop (it ends at SIGTERM, cleaning nothing)."""
    if watchdog is not None and watchdog.poll() is None:
        watchdog.terminate()
        watchdog.wait()


def owner_alive(record):
    """Whether the process an owner record names still runs (same pid, same start)."""
    try:
        proc = psutil.Process(record['pid'])
        return (proc.create_time() == record['started']
                and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def abandoned(folder):
    """The owner record of a cluster folder of this user whose owner is gone, or None.

    Only a folder that is provably a LocalCluster's: named by its PREFIX, owned by this
    user and private (start makes it so: no other user can have made or changed it),
    holding the record that watch writes (a cluster still starting has none yet).
    """
    try:
        info = folder.lstat()
        record = json.loads((folder / OWNER).read_text())
    except (OSError, ValueError):  # gone, unreadable, not one of ours, half-written
        return None
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
            or info.st_mode & 0o077 or owner_alive(record)):
        return None
    return record


def sweep():
    """Remove what default-folder clusters whose owner and watchdog both died left."""
    for folder in Path(tempfile.gettempdir()).glob(f'{PREFIX}*'):
        if record := abandoned(folder):
            remove(folder, Path(record['sockets']))


def adopted(folder, seen):
    """seen's processes still running, and those below the folder's slurmd now."""
    found = {pid: proc for pid, proc in seen.items() if proc.is_running()}
    for pid_file in Path(folder).glob('slurmd-*.pid'):
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            slurmd = psutil.Process(int(pid_file.read_text()))
            found.update((proc.pid, proc) for proc in slurmd.children(recursive=True))
    return found


def main(owner, folder, sockets):
    """Wait while the owner, this process's parent, lives; then end its cluster."""
    # the parent, not a pid: the owner's pid may be reused once it is free, while an
    # orphan goes to init (or a subreaper) for good
    seen = {}
    while os.getppid() == owner:
        # the owner's end ends slurmd too, and what slurmd adopted (ADOPT) goes to
        # pid 1, where only this record finds it
        seen = adopted(folder, seen)
        time.sleep(POLL)
    kill(seen)
    remove(Path(folder), Path(sockets))


if __name__ == '__main__':
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
