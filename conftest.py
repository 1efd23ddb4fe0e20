"""How make test shares the work among pytest-xdist's workers: --dist loadfile, as xdist
does it. Each file is a unit of work, whole on one worker, so a notebook's cells run in
order on one kernel. xdist takes the files in the order of tests/book/conftest.py's
hook: those that last longest first, then those with the most tests. No chapter reads
what another one stores, so the chapters may run in any order, side by side. The facts
that set chapters apart (which need root and SLURM or user namespaces, which the GPU
check runs, whose reader copies run alone, which run long) are data in
book/chapters.toml, read by tests/chapters.py and tools/gpu_check.py."""
