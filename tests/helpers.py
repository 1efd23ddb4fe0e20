"""Names that tests in several folders share (fixtures: tests/conftest.py)."""

# Set by a CI that made sure of user namespaces (.ci/run): a test that needs them (a
# throttled wire, a hidden /proc) fails there instead of skipping
REQUIRE_THROTTLE = 'MULTIGPU_REQUIRE_THROTTLE'
# Drops to uid 65534 (nobody), a stand-in for a reader who is not root: root ignores
# file modes, so only another user meets a folder it may not enter or write in
AS_READER = ('setpriv', '--reuid=65534', '--regid=65534', '--clear-groups')
