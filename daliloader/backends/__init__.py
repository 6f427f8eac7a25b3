"""The backends, named once: the loaders, the bench and the CLI all read this registry.

A backend is a name, what it needs, and what it builds from a :class:`~daliloader.plan.Plan`, as
functions ``build(plan, **options)`` named by ``"module:function"`` and imported only when used (as
timm's reader factory does), so that importing daliloader costs neither TensorFlow nor DALI.

What a backend can build (its "products", :class:`Product`):

=========  ==============================================  ======================================
product    what                                            used by
=========  ==============================================  ======================================
tf.data    a ``tf.data.Dataset`` of batches, in epochs      ``tf_dataset``, ``distribute``
stream     the batches, endless (evaluation: one epoch)     ``distribute`` (per-worker input)
keras      a ``keras.utils.PyDataset`` of numpy batches     ``keras_sequence``
dali       a DALI pipeline, run without TensorFlow          ``dali_pipeline``
batches    numpy batches in epochs, without Keras           the bench (where Keras is missing),
                                                            ``predict``, ``preview``
=========  ==============================================  ======================================

Adding a backend is one entry in :data:`BACKENDS` and a module here that builds its products from a
plan, implementing each stage of :mod:`daliloader.stages`.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.util import find_spec

from ..errors import MissingDependency, SpecError, ValueEnum, user_stacklevel
from ..parts import FORMAT_OF_SUFFIX, MAGIC, image_suffix, in_record

log = logging.getLogger("daliloader")


class Need(ValueEnum):
    """What a backend or a product needs on this machine: a package, or a CUDA GPU that DALI sees."""

    DALI = "dali"
    GPU = "gpu"
    TENSORFLOW = "tensorflow"
    KERAS = "keras"
    DALI_TF_PLUGIN = "dali-tf-plugin"

    @property
    def module(self) -> str | None:
        """The module that provides it (None: the GPU, which DALI counts)."""
        return {Need.DALI: "nvidia.dali", Need.TENSORFLOW: "tensorflow", Need.KERAS: "keras",
                Need.DALI_TF_PLUGIN: "nvidia.dali_tf_plugin"}.get(self)

    @property
    def words(self) -> str:
        """How a message names it."""
        return {Need.DALI: "DALI", Need.GPU: "a CUDA GPU that DALI can see", Need.TENSORFLOW: "TensorFlow",
                Need.KERAS: "Keras", Need.DALI_TF_PLUGIN: "DALI's TF plugin"}[self]

    @property
    def install(self) -> str:
        """How to get it: the command, or what is missing."""
        return {Need.DALI: "`pip install nvidia-dali-cuda120==2.4.0` (nvidia-dali-cuda130 for a CUDA 13 driver)",
                Need.GPU: "a machine with an NVIDIA GPU and its driver (or backend='dali-cpu', or 'auto' to choose)",
                Need.TENSORFLOW: "`pip install tensorflow`", Need.KERAS: "`pip install keras` (TensorFlow brings it)",
                Need.DALI_TF_PLUGIN: "`pip install --no-build-isolation nvidia-dali-tf-plugin-cuda120==2.4.0`, "
                                     "after TensorFlow"}[self]


class Device(ValueEnum):
    """Where a DALI graph runs (``dali-gpu``: GPU, ``dali-cpu``: CPU), or where it hands its outputs over."""

    CPU = "cpu"
    GPU = "gpu"

    @property
    def decoder(self) -> str:
        """DALI's ``device`` for its image decoders here: on a GPU, ``"mixed"`` (nvJPEG reads bytes from the
        host and decodes on the GPU)."""
        return "mixed" if self == Device.GPU else "cpu"


class Product(ValueEnum):
    """What a backend builds (the table above). The registry's functions also take a product's value
    (``"tf.data"``)."""

    TF_DATA = "tf.data"
    STREAM = "stream"
    KERAS = "keras"
    DALI = "dali"
    BATCHES = "batches"

    @property
    def needs(self) -> tuple[Need, ...]:
        """What the product needs beyond its backend's own needs."""
        return {Product.TF_DATA: (Need.TENSORFLOW,), Product.STREAM: (Need.TENSORFLOW,),
                Product.KERAS: (Need.KERAS,)}.get(self, ())

    @property
    def call(self) -> str:
        """What the user calls to get the product."""
        return {Product.TF_DATA: "tf_dataset", Product.STREAM: "distribute", Product.KERAS: "keras_sequence",
                Product.DALI: "dali_pipeline", Product.BATCHES: "numpy batches (the bench, predict, preview)"}[self]

    @property
    def feeds_tensorflow(self) -> bool:
        """Whether the product hands its batches to TensorFlow (a DALI backend then needs DALI's plugin)."""
        return self in (Product.TF_DATA, Product.STREAM)

    @property
    def indexed(self) -> bool:
        """Whether the product is read by index, as Keras reads a PyDataset (numpy batches)."""
        return self in (Product.KERAS, Product.BATCHES)



#: Image formats (Pillow's names) each family of decoders reads: every format the loaders recognise
#: (:data:`daliloader.parts.MAGIC`), but that tf.io.decode_image has no TIFF.
DALI_FORMATS = OPENCV_FORMATS = tuple(MAGIC)
TF_FORMATS = tuple(f for f in MAGIC if f != "TIFF")


@dataclass(frozen=True)
class Backend:
    """One backend: its name, what it needs installed, and the function that builds each of its products."""

    name: str
    about: str
    needs: tuple[Need, ...]  # DALI, a GPU; TensorFlow and Keras come with the product
    builds: Mapping[Product, str] = field(default_factory=dict)  # product -> "module:function"
    options: Mapping[str, object] = field(default_factory=dict)  # given to every builder (DALI's Device)
    formats: tuple[str, ...] = OPENCV_FORMATS  # the image and mask formats its decoders read
    per_replica: bool = False  # builds a pipeline on each replica's own device (plan.placement)
    reads_packs: bool = False  # reads a prepared copy's packs itself (the others read its files)
    decodes_windows: bool = False  # decodes only a JPEG's crop window (DALI's region decode, decode_and_crop_jpeg)

    @property
    def gpu(self) -> bool:
        return Need.GPU in self.needs

    @property
    def uses_dali(self) -> bool:
        return Need.DALI in self.needs

    def requirements(self, product: Product | str) -> tuple[Need, ...]:
        product = Product(product)
        plugin = (Need.DALI_TF_PLUGIN,) if self.uses_dali and product.feeds_tensorflow else ()
        return self.needs + product.needs + plugin

    def can_build(self, product: Product | str) -> None:
        """Refuses, saying which backends can, a product this backend does not build."""
        product = Product(product)
        if product not in self.builds:
            able = [p.call for p in self.builds]
            raise SpecError(f"backend={self.name!r} has no {product.call}: it serves {', '.join(able)}. "
                            f"{product.call} takes backend={' or '.join(map(repr, names(product)))}")

    def build(self, product: Product | str, plan, **options):
        """The ``product`` of this backend for ``plan``; refuses, saying what to do, what it cannot build or
        what is not installed."""
        product = Product(product)
        self.can_build(product)
        require(self.requirements(product), self.name)
        module, function = self.builds[product].split(":")
        built = getattr(importlib.import_module(module), function)(plan, **self.options, **options)
        named = built[0] if isinstance(built, tuple) else built  # dali: (pipeline, steps)
        with contextlib.suppress(AttributeError):
            named.backend = self.name  # ds.backend: which backend "auto" chose
        return built


_DALI_PRODUCTS = {Product.TF_DATA: "daliloader.backends.dali_tf:dataset",
                  Product.STREAM: "daliloader.backends.dali_tf:stream",
                  Product.DALI: "daliloader.backends.dali_graph:pipeline"}
#: Every backend, by name: what it needs and what it builds.
BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("dali-gpu", "DALI on a CUDA GPU: nvJPEG decoding, every stage on the GPU, batches on the GPU",
            needs=(Need.DALI, Need.GPU), builds=_DALI_PRODUCTS, options={"device": Device.GPU}, formats=DALI_FORMATS,
            per_replica=True, reads_packs=True),
    Backend("dali-cpu", "the same DALI graph on DALI's CPU backend", needs=(Need.DALI,),
            builds=_DALI_PRODUCTS, options={"device": Device.CPU}, formats=DALI_FORMATS, per_replica=True,
            reads_packs=True, decodes_windows=True),
    Backend("tfdata", "plain tf.data + tf.image on the CPU", needs=(),
            builds={Product.TF_DATA: "daliloader.backends.tfdata:dataset"}, formats=TF_FORMATS, decodes_windows=True),
    Backend("opencv", "OpenCV kernels on the CPU, in Keras' PyDataset", needs=(),
            builds={Product.KERAS: "daliloader.backends.keras_sequence:sequence",
                    Product.BATCHES: "daliloader.backends.opencv:batches"}),
)}


def pair_guard(data, backend: str, **options):
    """The :class:`~daliloader.guard.PairGuard` a backend vets its pairs with: files of a format its
    decoders cannot read are refused, naming the backends that can."""
    from ..guard import PairGuard

    decoders = {name: b.formats for name, b in BACKENDS.items()}
    return PairGuard(data, backend=backend, decoders=decoders, **options)


def unread_format(formats: tuple[str, ...], parts) -> tuple[str, str] | None:
    """The first of ``parts`` whose name says it holds a format not among ``formats`` (a backend's
    ``Backend.formats``), as (format, file); None where every one is (a record's picture, which has
    no name, is not judged: a backend's vetting refuses it, naming it)."""
    for part in parts:
        if in_record(part):
            return None
        fmt = FORMAT_OF_SUFFIX.get(image_suffix(part))
        if fmt is not None and fmt not in formats:
            return fmt, str(part)
    return None


def names(product: Product | str | None = None) -> list[str]:
    """The backends that build ``product`` (all, when None), "auto" first where it applies."""
    product = None if product is None else Product(product)
    found = [n for n, b in BACKENDS.items() if product is None or product in b.builds]
    return (["auto"] if product is not None and not product.indexed else []) + found


def resolve(name: str, product: Product | str, plan=None) -> Backend:
    """The backend called ``name``, which must build ``product``; ``"auto"`` is dali-gpu where DALI sees
    a CUDA GPU (and, for the TF products, TensorFlow sees one to receive the batches), dali-cpu
    otherwise, and opencv for Keras. The choice is logged (logger ``daliloader``, INFO) with its reason;
    ``plan`` (the recipe) adds what is known to be faster for it."""
    product = Product(product)
    backend = _named(name, product)
    backend.can_build(product)
    if name == "auto":
        log.info("backend='auto' chose %s for %s: %s%s", backend.name, product.call, backend.about,
                 _why_on_the_cpu(plan) if backend.name == "dali-cpu" else "")
    return backend


def _why_on_the_cpu(plan) -> str:
    """Why auto takes dali-cpu without a GPU, and what the committed measurements say of the others
    (docs/benchmarks.md, whose figures stay there, with their machine)."""
    why = ("; without a GPU it runs on the CPU the DALI graph that dali-gpu runs. In the committed benchmarks "
           "(docs/benchmarks.md) tfdata was as fast or faster on the plain recipe, and faster with augmentation: "
           "compare on this machine and recipe with `daliloader bench --backends dali-cpu,tfdata,opencv`")
    if plan is not None and (plan.spec.rotates or plan.spec.colours):
        why += (". With rotation or colour jitter, keras_sequence (OpenCV, a Keras PyDataset) was the fastest "
                "there: DALI's CPU kernels for them are slow")
    return why


def _named(name: str, product: Product) -> Backend:
    if name == "auto":
        if product.indexed:
            return BACKENDS["opencv"]
        if dali_gpu_count() == 0:
            return BACKENDS["dali-cpu"]
        if product.feeds_tensorflow and not _tensorflow_gpus():
            warnings.warn("backend='auto': DALI sees a GPU but TensorFlow does not (a TensorFlow without CUDA: "
                          "pip install 'tensorflow[and-cuda]'), so batches cannot arrive on the GPU; using dali-cpu",
                          stacklevel=user_stacklevel())
            return BACKENDS["dali-cpu"]
        return BACKENDS["dali-gpu"]
    if name not in BACKENDS:
        raise SpecError(f"backend={name!r} is not known; use one of {', '.join(map(repr, names(product)))}")
    return BACKENDS[name]


def missing(needs) -> list[Need]:
    """The needs, of ``needs`` (:class:`Need` or their values), that this machine lacks."""
    needs = [Need(n) for n in needs]
    lacking = [n for n in needs if n.module is not None and not installed(n.module)]
    if Need.GPU in needs and Need.DALI not in lacking and dali_gpu_count() == 0:
        lacking.append(Need.GPU)
    return lacking


def require(needs, backend: str) -> None:
    """Refuse what this machine lacks of ``needs`` for ``backend``: a GPU as a bad argument (SpecError), a
    package as a MissingDependency, each saying how to get it (or to run ``make install`` in a clone)."""
    lacking = missing(needs)
    if Need.GPU in lacking:
        raise SpecError(f"backend={backend!r} needs {Need.GPU.words}; none was found (use backend='dali-cpu', or "
                        "'auto' to choose)")
    if lacking:
        raise MissingDependency(f"backend={backend!r} needs {' and '.join(n.words for n in lacking)}, not installed: "
                                f"{'; then '.join(n.install for n in lacking)}; or run `make install` in a clone")


def available(name: str, products) -> Product | None:
    """The first of ``products`` that backend ``name`` builds and this machine can run, or None."""
    backend = BACKENDS[name]
    return next((p for p in map(Product, products) if p in backend.builds and not missing(backend.requirements(p))),
                None)


def installed(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package; a module set to None in sys.modules
        return False


def dali_gpu_count() -> int:
    """CUDA devices that DALI sees (0 without DALI or a driver)."""
    if not installed("nvidia.dali"):
        return 0
    from nvidia.dali import backend as dali_backend

    try:
        return dali_backend.GetCUDADeviceCount()
    except RuntimeError:  # no driver at all
        return 0


def _tensorflow_gpus() -> list:
    import tensorflow as tf

    return tf.config.list_physical_devices("GPU")
