"""The article's code, written from raw tensors in chapters 3-6 (each function #@save).

LeNet and its initialisation (chapter 3), copying parameters and the allreduce
(chapter 4), splitting a minibatch (chapter 5), the data-parallel step and trainer
(chapter 6). ``tests/book/test_sync.py`` keeps every function identical to its chapter.
"""
import torch
from torch import nn
from torch.nn import functional as F

from .data import load_fashion_mnist
from .devices import Timer, get_devices, synchronize


def init_lenet_params(seed=0):
    """LeNet's eight parameter tensors: weights ~ 0.01 * N(0, 1), biases zero."""
    generator = torch.Generator().manual_seed(seed)
    shapes = [(20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,),
              (800, 128), (128,), (128, 10), (10,)]
    return [torch.randn(shape, generator=generator) * 0.01 if len(shape) > 1
            else torch.zeros(shape) for shape in shapes]


def lenet(X, params):
    """LeNet on raw tensors: two conv/ReLU/avg-pool blocks, then two dense layers."""
    W1, b1, W2, b2, W3, b3, W4, b4 = params
    h = F.avg_pool2d(F.relu(F.conv2d(X, W1, b1)), kernel_size=2, stride=2)
    h = F.avg_pool2d(F.relu(F.conv2d(h, W2, b2)), kernel_size=2, stride=2)
    h = F.relu(h.flatten(start_dim=1) @ W3 + b3)
    return h @ W4 + b4


loss = nn.CrossEntropyLoss(reduction='none')


def get_params(params, device):
    """Copy every parameter to device (always a new copy) and track its gradient."""
    # copy=True: .to() on the same device returns the very same tensor, and replicas
    # that share storage would silently update each other.
    return [p.detach().to(device, copy=True).requires_grad_() for p in params]


def allreduce(data):
    """Sum one tensor per device and write the sum back into every tensor, in place."""
    for i in range(1, len(data)):
        data[0][:] += data[i].to(data[0].device)
    for i in range(1, len(data)):
        # [:] writes into the tensor we were given; `data[i] = ...` would only rebind
        # the list entry and leave that device's gradient unsynchronised.
        data[i][:] = data[0].to(data[i].device)


def split_batch(X, y, devices):
    """Split X and y along dim 0 into a shard per device; sizes differ by at most 1."""
    if len(X) != len(y):
        raise ValueError(f'X holds {len(X)} examples but y holds {len(y)} labels: '
                         'pass the features and labels of the same minibatch.')
    if not devices:
        raise ValueError('devices=[]: pass one device or more: dp.get_devices(1).')
    if len(X) < len(devices):
        raise ValueError(f'a batch of {len(X)} examples cannot feed '
                         f'{len(devices)} devices: use a batch of at least '
                         f'{len(devices)} examples, or fewer devices.')
    X_shards = torch.tensor_split(X, len(devices))
    y_shards = torch.tensor_split(y, len(devices))
    # To a GPU from pinned memory (the book's batches on a GPU machine), non_blocking
    # only queues the copy and the host goes on; the GPU's own queue orders it before
    # the kernels that read the shard. To the CPU it must block: the host reads it next.
    return ([shard.to(device, non_blocking=device.type == 'cuda')
             for shard, device in zip(X_shards, devices)],
            [shard.to(device, non_blocking=device.type == 'cuda')
             for shard, device in zip(y_shards, devices)])


def sgd(params, lr, batch_size):
    """One SGD step on gradients summed over batch_size examples, then zero them."""
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


def train_batch(X, y, device_params, devices, lr):
    """One data-parallel step: split the batch, backward per device, allreduce, SGD."""
    X_shards, y_shards = split_batch(X, y, devices)
    losses = [loss(lenet(X_shard, params), y_shard).sum()
              for X_shard, y_shard, params in zip(X_shards, y_shards, device_params)]
    for shard_loss in losses:  # each device back-propagates its own shard
        shard_loss.backward()
    with torch.no_grad():
        for i in range(len(device_params[0])):
            allreduce([params[i].grad for params in device_params])
    for params in device_params:
        sgd(params, lr, X.shape[0])  # divide by full batch: uneven shards stay exact


def evaluate_accuracy(net, data_iter, device):
    """Fraction of examples that net classifies correctly, computed on one device."""
    correct, total = torch.zeros((), dtype=torch.int64, device=device), 0
    with torch.no_grad():
        for X, y in data_iter:
            X, y = X.to(device), y.to(device)
            correct += (net(X).argmax(dim=1) == y).sum()  # on device: no wait per batch
            total += y.numel()
    return correct.item() / total


def train(num_devices, batch_size, lr, num_epochs=10, data=None, params=None,
          devices=None):
    """Train LeNet on num_devices devices; return test accuracy per epoch, a Timer."""
    train_iter, test_iter = data or load_fashion_mnist(batch_size)
    devices = devices or get_devices(num_devices)  # or those a caller chose
    params = init_lenet_params() if params is None else params  # or resume from them
    device_params = [get_params(params, device) for device in devices]
    timer, accuracies = Timer(), []
    for epoch in range(num_epochs):
        timer.start()
        for X, y in train_iter:
            train_batch(X, y, device_params, devices, lr)
        synchronize(devices)
        timer.stop()
        net = lambda X: lenet(X, device_params[0])  # evaluate on device 0 only
        accuracies.append(evaluate_accuracy(net, test_iter, devices[0]))
        print(f'epoch {epoch + 1}: test accuracy {accuracies[-1]:.3f}, '
              f'{timer.times[-1]:.1f} s')  # as it happens: a running job shows it
    print(f'test accuracy {accuracies[-1]:.2f}, {timer.avg():.1f} s/epoch '
          f'on {[str(d) for d in devices]}')
    return accuracies, timer
