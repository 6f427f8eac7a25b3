"""Check the dali-gpu path on a machine without CUDA: what the public API builds, traced, not run.

``pretend_gpu`` lets ``tf_dataset``/``distribute`` build for ``backend="dali-gpu"`` as they would on a
GPU machine, with three stand-ins for what needs CUDA: DALI reports one GPU, and the plugin *traces*
the pipeline (``Pipeline._build_graph``, which needs no CUDA) where it would serialize and build it.
Built inside a ``tf.Graph``, nothing runs: the graph holds the DALIDataset op where TensorFlow placed
it, and everything placed after it.

The checks compare what was built with the sources of truth:

* :func:`dali_problems`: every op of the DALI graph against DALI's own schemas (the op's device is
  one of its backends; each input sits on the device the schema asks for and argument inputs on the
  CPU, which DALI 2.4 itself already enforces while tracing, so these two only guard against a DALI
  that stops doing so), every pipeline output on the device the TF dataset expects, and the GPU
  decoders' arguments that decide parity with the CPU decoders and whether nvJPEG decodes at all.
* :func:`tf_problems`: every TensorFlow op that consumes a GPU-placed DALI dataset against TF's kernel
  registry (a dataset op with no GPU kernel cannot follow it), the dataset's inputs on its device
  (the plugin's rule), and the ``device_id`` DALI is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tensorflow as tf
from nvidia.dali.pipeline import Pipeline
from tensorflow.python.framework import kernels

#: The op type the DALI TF plugin registers for DALIDataset / DALIDatasetWithInputs.
DALI_OP = "DALIDataset"
#: Mixed decoder arguments that decide whether nvJPEG decodes like libjpeg-turbo on the CPU.
PARITY_ARGS = {"jpeg_fancy_upsampling": True}
#: Decoders that decode a region: with PARITY_ARGS, nvJPEG < 13.2 (DALI's CUDA 12 build) refuses them on the
#: GPU and falls back to a slower decoder with a warning per picture (see dali_graph.decode_window).
ROI_DECODERS = {"decoders__ImageSlice", "decoders__ImageCrop", "decoders__ImageRandomCrop"}
#: daliloader's own operator that chooses the cat_max_ratio window, on the CPU (daliloader.backends.dali_native).
CHOOSES_WINDOW = "daliloader__CatMaxRatioWindow"


@dataclass
class Built:
    """What one call of the public API built: its result, the TF graph, and the DALI pipelines traced."""

    result: object
    graph: tf.Graph
    pipelines: list = field(default_factory=list)

    def dali_ops(self) -> list:
        return [op for op in self.graph.get_operations() if op.type == DALI_OP]


def pretend_gpu(monkeypatch, gpus: int = 1, visible: list[int] | None = None):
    """Patch what needs CUDA; returns ``build(make) -> Built`` running ``make()`` inside a fresh tf.Graph.

    DALI and TensorFlow see ``gpus`` CUDA devices; TensorFlow uses those in ``visible`` (default: all,
    in the order given), as after ``tf.config.set_visible_devices(visible)``.
    """
    import nvidia.dali.plugin.tf as dali_tf

    import daliloader.backends as registry

    traced: list = []

    def trace(pipeline):  # as Pipeline.build and serialize do: the graph is defined once
        if not pipeline._py_graph_built:
            pipeline._build_graph()

    def serialize(pipeline):
        trace(pipeline)
        traced.append(pipeline)
        return b""

    monkeypatch.setattr(registry, "dali_gpu_count", lambda: gpus)
    monkeypatch.setattr(dali_tf, "serialize_pipeline", serialize)
    # the plugin builds the pipeline to look up its external sources; tracing gives it the same graph
    monkeypatch.setattr(Pipeline, "build", trace)
    def gpu(i):
        return tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU")

    physical = [gpu(i) for i in range(gpus)]
    used = physical if visible is None else [gpu(i) for i in visible]
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: physical if kind in ("GPU", None) else [])
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind=None: used if kind in ("GPU", None) else [])
    monkeypatch.setattr(tf.config, "get_logical_device_configuration", lambda device: None)
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", lambda device, on: None)

    def build(make) -> Built:
        traced.clear()
        graph = tf.Graph()
        with graph.as_default():
            result = make()
        return Built(result, graph, list(traced))

    return build


# ---------------------------------------------------------------- the DALI graph
def _schema(op):
    return op._op._schema


def dali_problems(pipe, outputs_on: str) -> list[str]:
    """Where the traced pipeline ``pipe`` breaks DALI's schemas or hands TF an output on another device."""
    problems = []
    gpu_pipeline = pipe.device_id is not None
    # cat_max_ratio chooses the window from the whole mask's classes on the CPU (daliloader's operator is a
    # CPU one): there, and only there, one decoder (the mask's) runs on the CPU
    masks_on_cpu = any(_schema(op).Name() == CHOOSES_WINDOW for op in pipe._ops)
    cpu_decoders = [op for op in pipe._ops if _schema(op).Name().startswith("decoders__") and op._op.device == "cpu"]
    if gpu_pipeline and masks_on_cpu and len(cpu_decoders) > 1:
        problems.append(f"{len(cpu_decoders)} decoders on the CPU: only the mask's may be, for cat_max_ratio")
    for op in pipe._ops:
        schema, device, spec = _schema(op), op._op.device, op.spec
        name = f"{op.name} ({schema.Name()}, {device})"
        if device not in schema.GetSupportedBackends():
            problems.append(f"{name}: {schema.Name()} has no {device} backend ({schema.GetSupportedBackends()})")
        for i in range(spec.NumInput()):
            actual = spec.InputDevice(i)
            if i < spec.NumRegularInput():
                needed = schema.GetInputDevice(i, actual, device) or actual
                needed = "cpu" if needed == "mixed" else needed  # a mixed op reads its inputs on the host
            else:
                needed = "cpu"  # argument inputs are always on the CPU
            if actual != needed:
                problems.append(f"{name}: input {i} ({spec.InputName(i)}) is on {actual}, the schema needs {needed}")
        if schema.Name().startswith("decoders__"):
            if gpu_pipeline and device == "cpu" and not masks_on_cpu:
                problems.append(f"{name}: a GPU pipeline decodes on the CPU")
            if device == "mixed" and schema.Name() in ROI_DECODERS:
                problems.append(f"{name}: a region decode on the GPU, which nvJPEG < 13.2 refuses with "
                                "jpeg_fancy_upsampling (it falls back to a slower decoder and warns per picture)")
            if device == "mixed":
                args = {**op._op._init_args, **op._op._call_args}
                for arg, value in PARITY_ARGS.items():
                    if args.get(arg) != value:
                        problems.append(f"{name}: {arg}={args.get(arg)!r}; "
                                        f"parity with the CPU decoders needs {value!r}")
    for node in pipe._graph_outputs:
        if node.device != outputs_on:
            problems.append(f"output {node.name} is on {node.device}; the TF dataset expects {outputs_on}")
    return problems


# ---------------------------------------------------------------- the TensorFlow side
def kernel_devices(op_type: str) -> set[str]:
    return {k.device_type for k in kernels.get_registered_kernels_for_op(op_type).kernel}


def downstream(op) -> list:
    """Every op that consumes ``op``'s outputs, transitively, in breadth-first order."""
    seen, order, queue = {op.name}, [], [op]
    while queue:
        for out in queue.pop(0).outputs:
            for consumer in out.consumers():
                if consumer.name not in seen:
                    seen.add(consumer.name)
                    order.append(consumer)
                    queue.append(consumer)
    return order


def device_type(op) -> str:
    return tf.DeviceSpec.from_string(op.device).device_type or "CPU"


def placed(op) -> str:
    """``"GPU:1"`` for an op placed on any job's ``/device:GPU:1``."""
    spec = tf.DeviceSpec.from_string(op.device)
    return f"{spec.device_type or 'CPU'}:{spec.device_index or 0}"


def tf_problems(built: Built, device_ids: dict[str, int] | None = None) -> list[str]:
    """Ops after a GPU-placed DALI dataset without a GPU kernel; inputs placed elsewhere than the dataset;
    a ``device_id`` other than the CUDA ordinal in ``device_ids`` (TF device, ``"GPU:1"`` -> ordinal)."""
    problems = []
    dali = built.dali_ops()
    if not dali:
        return ["no DALIDataset op was built"]
    for op in dali:
        where = device_type(op)
        if not op.get_attr("fail_on_device_mismatch"):
            problems.append(f"{op.name}: fail_on_device_mismatch is off")
        for inp in op.inputs:
            if device_type(inp.op) != where:
                problems.append(f"{op.name} on {where}: its input {inp.op.type} is on {device_type(inp.op)}")
        if where == "GPU":
            for after in downstream(op):
                if "GPU" not in kernel_devices(after.type):
                    problems.append(f"{after.type} follows the GPU-placed DALI dataset {op.name} but has no GPU "
                                    f"kernel ({sorted(kernel_devices(after.type))})")
        if device_ids is not None:
            name = placed(op)
            want = device_ids.get(name)
            if want is not None and op.get_attr("device_id") != want:
                problems.append(f"{op.name} on {name}: DALI device_id={op.get_attr('device_id')}, the CUDA "
                                f"ordinal of that device is {want}")
    return problems


def multi_device_iterator(options) -> bool:
    """Whether TF reads a distributed dataset with these InputOptions through a MultiDeviceIterator
    (CPU kernels only), by TF's own rule."""
    from tensorflow.python.distribute.input_lib import _should_use_multi_device_iterator

    return _should_use_multi_device_iterator(options)
