"""A network you can dial: a command run behind a private loopback of a given bandwidth.

``unshare -rn`` starts the command in a user and network namespace of its own (no sudo
where the kernel allows unprivileged user namespaces, as most Linux distributions do),
with a loopback that nothing else uses. ``tc``'s token bucket filter (tbf) limits that
loopback to the rate asked for. Every process the command starts (torchrun, its
workers) inherits the namespace and talks over that wire; the namespace ends with its
last process, so nothing is left to clean up. The loopback is one wire shared by both
directions. GPUs on one machine talk through NVLink or PCIe, not sockets: NCCL jobs
are not slowed by it, gloo jobs are.
"""
import functools
import numbers
import shutil
import subprocess

MTU = 9000  # lo's MTU must stay below tbf's burst, or every full-size packet is dropped
BURST = '512kb'  # bytes tbf lets through at once: a larger bucket, a burstier wire
LATENCY = '200ms'  # the longest a packet may wait in tbf's queue before it is dropped


def throttled_command(argv, bandwidth):
    """argv, run behind a private loopback limited to bandwidth bits per second."""
    if (isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real)
            or not 1e3 <= bandwidth <= 1e12):
        raise ValueError(f'bandwidth={bandwidth!r}: give bits per second between 1e3 '
                         'and 1e12, e.g. 200e6 for 200 Mbit/s.')
    setup = (f'ip link set lo mtu {MTU} up && tc qdisc add dev lo root tbf rate '
             f'{round(bandwidth)}bit burst {BURST} latency {LATENCY}')
    # sh sets up the wire, then becomes argv (exec): the job keeps the command's PID
    return ['unshare', '--user', '--map-root-user', '--net', 'sh', '-c',
            f'{setup} && exec "$@"', 'sh', *map(str, argv)]


@functools.cache
def throttle_problem():
    """None when throttled_command works on this machine, else one line saying why not."""
    missing = [tool for tool in ('unshare', 'ip', 'tc') if shutil.which(tool) is None]
    if missing:
        return (f'{", ".join(missing)} not found: a throttled wire needs Linux with '
                'util-linux and iproute2 (apt install iproute2).')
    try:
        probe = subprocess.run(throttled_command(['true'], 1e9), capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f'a private network namespace could not be made here: {error}'
    if probe.returncode:
        said = (probe.stderr.strip().splitlines() or ['no message'])[-1]
        return (f'a private network namespace could not be made here ({said}): '
                'unprivileged user namespaces may be disabled (some distributions and '
                'containers; on Ubuntu 24.04 AppArmor forbids them unless sysctl '
                'kernel.apparmor_restrict_unprivileged_userns=0).')
    return None
