"""The chapters' figures, drawn by code; ``write_book_figures('book')`` redraws files.

``draw``: the drawing kit (sizes, colours, boxes, arrows, labels, ``figure_svg``).
``diagrams``: split strategies, data-parallel steps, allreduce, scatter, LeNet shapes.
``ring``: ring allreduce, a panel per step.
``tensor_parallel``: Megatron's column-row pair on two devices, with f and g.
``plots``: accuracy, scaling, sharded-memory and bandwidth plots of measured data, and
the timeline of one training step.
"""
from .diagrams import (BOOK_FIGURES, plot_allreduce, plot_data_parallel_steps,
                       plot_lenet_shapes, plot_scatter, plot_split_strategies,
                       write_book_figures)
from .draw import COLUMN_PX, FIGURE_DPI, MIN_LABEL_PX, figure_svg
from .plots import (plot_accuracy, plot_bandwidth, plot_scaling, plot_sharded_memory,
                    plot_timeline)
from .ring import plot_ring_allreduce
from .tensor_parallel import plot_tensor_parallel_pair
from .pipeline import plot_pipeline_schedule

__all__ = ['BOOK_FIGURES', 'COLUMN_PX', 'FIGURE_DPI', 'MIN_LABEL_PX', 'figure_svg',
           'plot_accuracy', 'plot_allreduce', 'plot_bandwidth',
           'plot_data_parallel_steps', 'plot_lenet_shapes', 'plot_pipeline_schedule',
           'plot_ring_allreduce', 'plot_scaling', 'plot_scatter',
           'plot_sharded_memory', 'plot_split_strategies', 'plot_tensor_parallel_pair',
           'plot_timeline', 'write_book_figures']
