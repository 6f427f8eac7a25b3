"""The backends as the bench builds and reads them: which product of each it times on this machine,
the baseline pipeline people write first, and one plan for all of them.

Every backend is built from one plan (:func:`bench_plan`, random crops, seed 0) through the backend
registry, so all of them run the same settings; each is read as a stream of batches that
:mod:`daliloader.bench.timing` times.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from .. import backends
from ..backends import Need, Product
from ..classes import MaskKind
from ..data import Container, SegmentationData
from ..guard import PairGuard
from ..parallel import threaded_map
from ..plan import Plan, make_plan
from .timing import endless, ordered_parallel

#: The baseline a user would write first (the reference of the first performance goal, kept as history);
#: not a product backend.
BASELINE = "tfdata-naive"
#: The reference every backend is judged against: the tf.data pipeline an expert writes (:mod:`.expert`).
EXPERT = "tf-expert"
#: Pipelines the bench times beside the backends, not built from the registry.
REFERENCES = (EXPERT, BASELINE)
#: Backends ``bench`` knows: the registry's, then the references.
BENCH_BACKENDS = tuple(backends.BACKENDS) + REFERENCES
#: What the bench feeds from each backend, in order of preference: what Keras is fed (tf.data,
#: PyDataset), else, where TensorFlow or Keras is missing, DALI's own pipeline or numpy batches.
PRODUCTS = (Product.TF_DATA, Product.KERAS, Product.DALI, Product.BATCHES)
#: How each product is read, in the JSON ("via").
VIA = {Product.TF_DATA: "tf.data", Product.KERAS: "keras PyDataset", Product.BATCHES: "OpenCV loader (no Keras)",
       Product.DALI: "DALI pipeline.run (no TensorFlow)"}


def has_tensorflow() -> bool:
    """Whether TensorFlow, Keras and DALI's TensorFlow plugin are installed. Without them (a GPU machine
    with DALI alone) the DALI backends are timed through ``pipeline.run`` and opencv without Keras."""
    return not backends.missing((Need.TENSORFLOW, Need.KERAS, Need.DALI_TF_PLUGIN))


def product(name: str) -> Product | None:
    """What the bench builds of a backend (see :data:`PRODUCTS`); None when it cannot run here."""
    if name in REFERENCES:
        return Product.TF_DATA if has_tensorflow() else None
    return backends.available(name, PRODUCTS)


def lacks(name: str) -> list[Need]:
    """What this machine lacks to run backend ``name``."""
    needs = (Need.TENSORFLOW,) if name in REFERENCES else backends.BACKENDS[name].requirements(
        next(iter(backends.BACKENDS[name].builds)))
    return backends.missing(needs)


def via(name: str) -> str:
    """How the bench reads backend ``name`` here (:data:`VIA`)."""
    return VIA[product(name)]


def sequence_like(name: str) -> bool:
    """Whether the bench reads a backend's product by index, as Keras reads a PyDataset."""
    made = product(name)
    return made is not None and made.indexed


def reads_packs(name: str) -> bool:
    """Whether backend ``name`` reads a prepared copy's packs (DALI's webdataset reader)."""
    return name in backends.BACKENDS and backends.BACKENDS[name].reads_packs


def decodes_windows(name: str) -> bool:
    """Whether backend ``name`` decodes only the crop window of a JPEG photo (the expert's pipeline too),
    which can take it past a ceiling of whole pictures decoded."""
    return name == EXPERT or (name in backends.BACKENDS and backends.BACKENDS[name].decodes_windows)


def on_gpu(name: str) -> bool:
    """Whether backend ``name`` decodes on the GPU (nvJPEG)."""
    return name in backends.BACKENDS and backends.BACKENDS[name].gpu


def bench_plan(data: SegmentationData, batch_size: int, image_size, label_mode: str, **options) -> Plan:
    """The one plan every backend is built from: random crops, seed 0."""
    return make_plan(data, batch_size, image_size, crop="random", label_mode=label_mode, seed=0, caller="bench",
                     **options)


def backend_source(name: str, plan: Plan, workers: int):
    """One backend's product, built as a user would build it from ``plan`` (the references from the
    dataset's own masks, never daliloader's mask cache)."""
    if name in REFERENCES:
        plan = replace(plan, data=reference_data(plan))
    if name == BASELINE:
        return naive_tfdata(plan.data, plan.batch_size, plan.spec.image_size, plan.spec.label_mode)
    if name == EXPERT:
        from .expert import expert_dataset

        return expert_dataset(plan)
    options = {"workers": workers} if product(name) is Product.KERAS else {}
    return backends.resolve(name, product(name)).build(product(name), plan, **options)


def backend_stream(name: str, plan: Plan, workers: int, guard: PairGuard | None = None):
    """An endless iterator of batches from one backend (opencv: ``workers`` threads, as PyDataset);
    closing it stops its workers and drops its pipeline. ``guard``: a reference's (:func:`vetted`), which
    explains a failure of TensorFlow's decoders by naming the files (:func:`explained`)."""
    source = backend_source(name, plan, workers)
    if product(name) is Product.DALI:
        pipe, _ = source
        return (pipe.run() for _ in itertools.count())
    stream = ordered_parallel(source.batch_of, len(source), workers) if sequence_like(name) else endless(source)
    return stream if guard is None else explained(stream, guard)


def reference_data(plan: Plan) -> SegmentationData:
    """The pairs a reference reads: the dataset's own, never daliloader's mask cache."""
    return plan.data if plan.data.mask_cache is None else plan.data.mask_cache.original


def vetted(data: SegmentationData, workers: int) -> PairGuard:
    """A guard that vetted every pair of ``data`` on ``workers`` threads, as the loaders vet each pair they
    read (:class:`~daliloader.guard.PairGuard`): for the references, which read the files with TensorFlow's
    own ops, where a bad file (a truncated JPEG, a mask of another size) fails naming none. Raises the
    guard's LoadError, which names the pair and says to run ``daliloader check``; the guard remembers
    every pair, so that :func:`explained` can decode them all when a decoder fails anyway."""
    guard = PairGuard(data, remember=len(data))
    list(threaded_map(guard.verify, range(len(data)), workers))
    return guard


def explained(stream, guard: PairGuard):
    """``stream``'s batches; a TensorFlow error on the way is raised as the guard's LoadError, which
    names the bad files among the pairs it vetted (:meth:`~daliloader.guard.PairGuard.explain`)."""
    import tensorflow as tf

    try:
        yield from stream
    except tf.errors.OpError as e:
        raise guard.explain(e) from None


def naive_tfdata(data: SegmentationData, batch_size: int, image_size, label_mode: str):
    """The tf.data pipeline people write first (the 4x baseline of the performance goal).

    Per sample: ``decode_image``, ``resize_with_crop_or_pad``, then labels as :func:`naive_labels` makes
    them (colours compared with each class colour, or ids mapped through the class map's id table): the
    loaders' labels, on every kind of mask; parallel map, batch, prefetch. Centre crops, no augmentation.
    """
    import tensorflow as tf

    h, w = image_size

    def load(image_bytes, mask_bytes):
        image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
        image = tf.image.resize_with_crop_or_pad(image, h, w)
        return tf.cast(image, tf.float32) / 255.0, labels(mask_bytes)

    labels = naive_labels(data, (h, w), label_mode)
    if data.container is Container.OBJECTS:
        from .expert import fetched_pairs

        ds = fetched_pairs(data)
    else:
        ds = _naive_records(data) if data.records is not None else _naive_files(data)
    ds = ds.shuffle(len(data), seed=0).repeat().map(load, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def naive_labels(data: SegmentationData, image_size, label_mode: str):
    """The baseline's labels of one encoded mask, centre-cropped to ``image_size``, as people first write
    them: colour masks (:attr:`MaskKind.RGB`) decoded as RGB and compared with each class colour; id masks
    (Cityscapes' labelIds, ADE20K, id folders) decoded as ids (one channel, or the map's ``mask_channel``
    of a colour picture; 16 bits where the dataset's masks are) and mapped through the class map's id
    table. Unknown values are ``ignore_index`` (int labels) or an all-zero row (one-hot), as in the loaders."""
    import tensorflow as tf

    (h, w), classes = image_size, data.classes
    if classes.kind is MaskKind.RGB:
        palette = tf.constant(classes.palette(), tf.uint8)
        channels, dtype = 3, tf.uint8
    else:
        lut = tf.constant(classes.lookup_table.astype(np.int32))  # id -> class, ignore_index elsewhere
        channels = 1 if classes.mask_channel is None else 3
        dtype = tf.uint16 if data.mask_depth == 16 else tf.uint8

    def colours(mask):  # one comparison per class colour
        onehot = tf.stack([tf.reduce_all(mask == palette[c], axis=-1) for c in range(classes.num_classes)], -1)
        if label_mode == "onehot":
            return tf.cast(onehot, tf.float32)
        found = tf.argmax(tf.cast(onehot, tf.int32), -1, output_type=tf.int32)
        return tf.where(tf.reduce_any(onehot, -1), found, classes.ignore_index)

    def ids(mask):  # one gather per pixel
        index = tf.gather(lut, tf.cast(mask[..., classes.mask_channel or 0], tf.int32))
        return index if label_mode == "int" else tf.one_hot(index, classes.num_classes)

    def labels(mask_bytes):
        mask = tf.io.decode_image(mask_bytes, channels=channels, dtype=dtype, expand_animations=False)
        mask = tf.image.resize_with_crop_or_pad(mask, h, w)
        return colours(mask) if classes.kind is MaskKind.RGB else ids(mask)

    return labels


def _naive_files(data: SegmentationData):
    """(image bytes, mask bytes) of the files, as people first read them."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((list(data.images), list(data.masks))).map(
        lambda image, mask: (tf.io.read_file(image), tf.io.read_file(mask)))


def _naive_records(data: SegmentationData):
    """(image bytes, mask bytes) of TFRecords, as people first read them (TFRecordDataset)."""
    import tensorflow as tf

    from ..backends.tfdata import record_stream

    keys = data.records
    features = {key: tf.io.FixedLenFeature([], tf.string) for key in (keys.image_key, keys.mask_key)}
    return record_stream(data.images).map(lambda _, s: tf.io.parse_single_example(s, features)).map(
        lambda f: (f[keys.image_key], f[keys.mask_key]))
