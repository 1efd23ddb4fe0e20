"""Names that tests in several folders share (fixtures: tests/conftest.py)."""

# Set by a CI that made sure of user namespaces (.ci/run): a test that needs them (a
# throttled wire, a hidden /proc) fails there instead of skipping
REQUIRE_THROTTLE = 'MULTIGPU_REQUIRE_THROTTLE'
# Drops to uid 65534 (nobody), a stand-in for a reader who is not root: root ignores
# file modes, so only another user meets a folder it may not enter or write in
AS_READER = ('setpriv', '--reuid=65534', '--regid=65534', '--clear-groups')

# Modules whose code takes another path where CUDA is available (device policy, pinned
# memory, cuda snapshots): `make gpu-check` runs them on the GPU (-m cuda). The job
# tests run gloo on the CPU even there (tests/jobs/helpers.py); gpu-check's own steps
# run the jobs on NCCL.
CUDA_PATH = ('unit/test_devices.py', 'unit/test_scratch.py', 'unit/test_data.py',
             'unit/test_models.py', 'unit/test_train_ddp.py',
             'unit/test_performance.py', 'unit/test_snapshots_cpu.py')
