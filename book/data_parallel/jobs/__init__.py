"""Programs that torchrun starts for the book's measurements, and their shared kit.

Each program is a leaf: it imports the machinery, the taught code and the models, never
another program nor the taught program ``data_parallel.train_ddp`` (``faults`` is the
one exception: it wraps that program to kill one of its workers). ``measure`` holds
what they share. Start one with ``torchrun -m data_parallel.jobs.NAME``, or from Python
with ``data_parallel.launch.run``; rank 0 ends with one ``RESULT <json>`` line.
"""
