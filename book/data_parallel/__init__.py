"""The helper package of *Training on Multiple GPUs*: every chapter imports it as ``dp``.

A function that a chapter teaches and a later one reuses is written out in that chapter
(in a cell starting with ``#@save``) and kept identical here; ``tests/book/test_sync.py``
fails when the two differ. The modules, in layers (a module imports only from its own
layer or those below it; ``tests/repo/test_layout.py`` checks it):

1. machinery: ``paths`` (repository, data and results folders), ``cli`` (checks on
   command-line values), ``results`` (a job's ``RESULT <json>`` line, results a chapter
   leaves for a later one), ``files`` (crash-safe files, output paths checked early),
   ``snapshot`` (train_ddp's snapshot file: two generations, its flags, a lock),
   ``devices`` (the book's one device policy, a process's ``setup``, synchronising,
   timing), ``data`` (Fashion-MNIST in memory, the article's
   per-image loader), ``launch`` (torchrun jobs from a notebook or a test),
   ``processes`` (what a job started, found and ended), ``network`` (a command
   behind a loopback of a set bandwidth), ``slurm`` (a two-node SLURM cluster on this
   machine, and the batch script ``train_ddp.sbatch``), ``cluster_watchdog`` (what
   a cluster whose owner was killed leaves, ended and removed);
2. taught code, the ``#@save`` mirrors: ``scratch`` (the article's code, LeNet to the
   data-parallel trainer), ``collectives`` (star and ring allreduce, reduce-scatter,
   all-gather), ``performance`` (flat buffers, the improved step, the cost model),
   ``sharding`` (memory formulas, ZeRO-1), ``tensor_parallel`` (a layer split over
   processes: channels, Megatron's column and row layers), ``pipeline`` (the bubble's
   formulas, a GPipe and 1F1B schedule simulator, activations held per stage),
   ``experts`` (a mixture-of-experts layer, its experts across processes); and
   ``models`` (LeNet as a module, ResNet-18, an MLP: one definition each);
3. the taught program ``train_ddp``, which ``torchrun -m data_parallel.train_ddp`` starts;
4. ``figures`` (the chapters' diagrams and plots) and ``jobs`` (the measuring programs
   that torchrun starts, ``torchrun -m data_parallel.jobs.NAME``).

One vocabulary throughout: ``world_size`` is the number of processes of a job (``rank``,
``local_rank`` one of them), ``devices`` the list of devices one process drives and
``num_devices`` its length, ``k`` the number of replicas in a formula; ``batch_size`` is
always the global minibatch, and a per-device or per-process batch says so in its name
(``per_device_batch``). Every job reports back through one ``RESULT <json>`` line.

Importing the package changes no global setting (no seeds, no thread counts, no style).
"""
from .collectives import (exchange, own_shard, ring_all_gather, ring_allreduce,
                          ring_reduce_scatter, star_allreduce)
from .data import (DataUnavailableError, TensorBatches, load_fashion_mnist,
                   per_image_loader, read_fashion_mnist)
from .devices import (CPU_ONLY, Timer, cpu_cores, describe_devices,
                      describe_environment, get_devices, process_device, sweep_backend,
                      sweep_environment, synchronize, use_one_core)
from .experts import (AllToAll, all_to_all_rows, expert_parallel_layer,
                      load_balancing_loss, moe_layer, route, rows_per_rank,
                      within_capacity)
from .figures import (plot_accuracy, plot_allreduce, plot_bandwidth,
                      plot_data_parallel_steps, plot_lenet_shapes, plot_pipeline_schedule,
                      plot_ring_allreduce, plot_scaling, plot_scatter,
                      plot_sharded_memory, plot_split_strategies,
                      plot_tensor_parallel_pair, plot_timeline, write_book_figures)
from .models import LeNet, deep_mlp, mlp, resnet18
from .network import throttle_problem, throttled_command
from .paths import DATA_ENV, data_root, repo_root, results_dir, work_dir
from .performance import (FlatParams, allreduce_seconds, forward_backward, loop,
                          median_seconds, one_pass, passes, step_seconds,
                          train_batch_flat)
from .pipeline import (activations_held, bubble_fraction, bubble_overhead,
                       idle_times, simulate, stage_layers, stage_order)
from .results import glue, load_result, read_result, save_result
from .sharding import OPTIMIZER_STATES, bytes_per_device, replica_bytes, zero1_step
from .tensor_parallel import (ColumnParallelLinear, CopyToParallel,
                              ReduceFromParallel, RowParallelLinear,
                              channel_parallel_conv, check_split, conv_channel_shard,
                              parallel_mlp)
from .scratch import (allreduce, evaluate_accuracy, get_params, init_lenet_params,
                      lenet, loss, sgd, split_batch, train, train_batch)
