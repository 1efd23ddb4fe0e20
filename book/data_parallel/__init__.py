"""The helper package of *Training on Multiple GPUs*: every chapter imports it as ``dp``.

A function that a chapter teaches and a later one reuses is written out in that chapter
(in a cell starting with ``#@save``) and kept identical here; ``tests/test_sync.py``
fails when the two differ. The modules, by concern:

- ``scratch``: the article's code, LeNet to the data-parallel trainer (chapters 3-6);
- ``performance``: chapter 8's flat buffers, improved step, allreduces, cost model;
- ``devices``: which devices a job gets (the book's one policy), synchronising, timing;
- ``data``: Fashion-MNIST in memory, and the per-image loader of the article;
- ``paths``: the repository, data and results folders;
- ``sharding``: chapter 9's memory formulas, reduce-scatter, all-gather and ZeRO-1;
- ``figures``: the chapters' diagrams and plots;
- ``launch``: starting torchrun jobs from a notebook or a test;
- ``train_ddp``, ``faults``, ``perf_workers``, ``shard_workers``: programs that
  ``torchrun -m`` starts.

Importing the package changes no global setting (no seeds, no thread counts, no style).
"""
from .data import (DataUnavailableError, TensorBatches, load_fashion_mnist,
                   per_image_loader, read_fashion_mnist)
from .devices import (Timer, cpu_cores, describe_devices, describe_environment,
                      get_devices, process_device, synchronize, use_one_core)
from .figures import (plot_accuracy, plot_allreduce, plot_data_parallel_steps,
                      plot_lenet_shapes, plot_ring_allreduce, plot_scaling, plot_scatter,
                      plot_sharded_memory, plot_split_strategies, write_book_figures)
from .paths import DATA_ENV, data_root, repo_root, results_dir, work_dir
from .performance import (FlatParams, allreduce_seconds, forward_backward,
                          ring_allreduce, star_allreduce, step_seconds, train_batch_flat)
from .results import glue, load_result, save_result
from .sharding import (OPTIMIZER_STATES, bytes_per_device, own_shard, replica_bytes,
                       ring_all_gather, ring_reduce_scatter, zero1_step)
from .scratch import (allreduce, evaluate_accuracy, get_params, init_lenet_params,
                      lenet, loss, sgd, split_batch, train, train_batch)
