"""What several unit test modules share: a random batch, the texts of a figure."""
import torch


def batch(n, seed=0):
    """A random minibatch shaped like Fashion-MNIST."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 1, 28, 28, generator=generator),
            torch.randint(0, 10, (n,), generator=generator))


def texts(fig):
    """Every string drawn in the figure's axes, in drawing order."""
    return [t.get_text() for ax in fig.axes for t in ax.texts]
