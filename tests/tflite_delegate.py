#!/usr/bin/env python3
"""LiteRT with and without nnaccel's external delegate (libnnaccel_tflite_delegate.so).

Runs under either TFLite runtime the delegate serves: `ai_edge_litert` 2.3.0 (TFLite 2.22) or
`tflite_runtime` 2.14 (NNACCEL_TFLITE_RUNTIME=litert|tflite_runtime picks one; default: the
one installed, LiteRT first). tests/tflite_delegate.rs runs it in both venvs of
scripts/litert-venv.sh:

    NNACCEL_DELEGATE_SO=target/debug/libnnaccel_tflite_delegate.so \
    NNACCEL_MODELS_DIR=target/models  python tests/tflite_delegate.py [-v]
        the unittest suite below (the delegate on its embedded stack);
    python tests/tflite_delegate.py service SOCKET INVOKES
        MODEL through the service at SOCKET, INVOKES times, outputs checked against LiteRT
        (tests/tflite_delegate.rs reads the service's device job counter around it);
    python tests/tflite_delegate.py plain INVOKES
        the same model on LiteRT alone (the negative control of the service counter);
    python tests/tflite_delegate.py graphs DIR
        writes the small graphs of the Partitions and Folding cases into DIR (needs the
        schema module of the ai-edge-litert wheel, which tflite_runtime lacks); the suite reads
        them from NNACCEL_GRAPHS_DIR when it is set, and builds them itself otherwise.

A case that needs something the runtime lacks (an operator version its kernels do not
register) is skipped under tflite_runtime only, with the reason; under LiteRT it fails.

Every comparison is LiteRT without the delegate against LiteRT with it, on the same inputs:
float32 within 1e-5 of the reference output's range, int8 within 1 quantum of TFLite's
reference kernels (OpResolverType.BUILTIN_REF; XNNPACK's int8 path rounds differently, see
tests/litert.rs). The delegate's counters (nnaccel_tflite_delegate_stats, read with ctypes
from the same loaded library) say how many nodes it claimed, how many partitions it
prepared and how many executions ran through nnaccel.
"""

import ctypes
import os
import sys
import tempfile
import unittest

import numpy as np


def import_runtime(wanted):
    """The interpreter module of runtime `wanted` ("litert", "tflite_runtime" or "" for the
    first installed), and the runtime's name and version."""
    import importlib.metadata as metadata
    tried = []
    for name, module, dist in (("litert", "ai_edge_litert.interpreter", "ai-edge-litert"),
                               ("tflite_runtime", "tflite_runtime.interpreter",
                                "tflite-runtime")):
        if wanted and wanted != name:
            continue
        try:
            interp = __import__(module, fromlist=["Interpreter"])
        except ImportError as e:
            tried.append("%s: %s" % (module, e))
            continue
        return interp, name, metadata.version(dist)
    sys.exit("no TFLite runtime (NNACCEL_TFLITE_RUNTIME=%r): %s" % (wanted, "; ".join(tried)))


litert, RUNTIME, RUNTIME_VERSION = import_runtime(os.environ.get("NNACCEL_TFLITE_RUNTIME", ""))

SO = os.environ.get("NNACCEL_DELEGATE_SO", "")
MODELS = os.environ.get("NNACCEL_MODELS_DIR", "")
GRAPHS = os.environ.get("NNACCEL_GRAPHS_DIR", "")
FLOAT_TOLERANCE = 1e-5
SERVICE_MODEL = "mlp_b1_float32"


class Stats(ctypes.Structure):
    """NnaccelDelegateStats (driver/tflite/delegate/src/stats.rs): six u64."""

    _fields_ = [(name, ctypes.c_uint64) for name in (
        "delegates", "nodes_claimed", "partitions", "executions", "burst_executions",
        "failed_executions")]


def library():
    """The delegate library, the same handle load_delegate gets (dlopen of one path)."""
    return ctypes.CDLL(SO)


def stats():
    s = Stats()
    rc = library().nnaccel_tflite_delegate_stats(ctypes.byref(s))
    assert rc == 0, "nnaccel_tflite_delegate_stats returned %d" % rc
    return {name: getattr(s, name) for name, _ in Stats._fields_}


def delta(before, after):
    return {k: after[k] - before[k] for k in before}


def model_path(name):
    return os.path.join(MODELS, name + ".tflite")


def inputs_for(interp, seed=7):
    rng = np.random.default_rng(seed)
    out = []
    for d in interp.get_input_details():
        shape, dtype = d["shape"], d["dtype"]
        if dtype == np.float32:
            out.append(rng.standard_normal(shape).astype(np.float32))
        else:
            info = np.iinfo(dtype)
            out.append(rng.integers(info.min, info.max + 1, size=shape).astype(dtype))
    return out


def run(interp, inputs, invokes=1):
    interp.allocate_tensors()
    for d, x in zip(interp.get_input_details(), inputs):
        interp.set_tensor(d["index"], x)
    for _ in range(invokes):
        interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


# What an interpreter says when the model needs an operator (or an operator version) its
# kernels do not register: the only failure a case may be skipped for, and only under
# tflite_runtime (the older runtime); under LiteRT every case must run.
MISSING_KERNEL = ("Didn't find op for builtin opcode", "Op builtin_code out of range")


def interpreter(path, **kwargs):
    """litert.Interpreter(model_path=path, **kwargs); under tflite_runtime, a model needing a
    kernel the runtime lacks skips the case (unittest.SkipTest) with the runtime's reason."""
    try:
        return litert.Interpreter(model_path=path, **kwargs)
    except (ValueError, RuntimeError) as e:
        text = str(e)
        if RUNTIME == "tflite_runtime" and any(m in text for m in MISSING_KERNEL):
            reason = next(line for line in text.splitlines()
                          if any(m in line for m in MISSING_KERNEL))
            raise unittest.SkipTest("tflite_runtime %s lacks a kernel of %s: %s" % (
                RUNTIME_VERSION, os.path.basename(path), reason.strip()))
        raise


def reference(path, quantized):
    kind = (litert.OpResolverType.BUILTIN_REF if quantized
            else litert.OpResolverType.AUTO)
    return interpreter(path, experimental_op_resolver_type=kind)


def node_count(path):
    """The model's operators, as LiteRT's interpreter lists them before any delegate (the
    default XNNPACK delegate would add a node of its own)."""
    interp = interpreter(
        path,
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return len(interp._get_ops_details())


def with_delegate(path, options, quantized=False):
    d = litert.load_delegate(SO, options)
    kind = (litert.OpResolverType.BUILTIN_REF if quantized
            else litert.OpResolverType.AUTO)
    return interpreter(path, experimental_delegates=[d], experimental_op_resolver_type=kind), d


def assert_agree(test, ours, theirs, quantized, what):
    test.assertEqual(len(ours), len(theirs), what)
    for a, b in zip(ours, theirs):
        test.assertEqual(a.shape, b.shape, what)
        test.assertEqual(a.dtype, b.dtype, what)
        if quantized:
            worst = int(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
            test.assertLessEqual(worst, 1, "%s: %d quanta apart" % (what, worst))
        else:
            span = float(b.max() - b.min())
            test.assertGreater(span, 0.0, "%s: LiteRT's output is constant" % what)
            worst = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            test.assertLessEqual(worst, FLOAT_TOLERANCE * span,
                                 "%s: %g apart, range %g" % (what, worst, span))


class Graph:
    """A one-subgraph .tflite written with the wheel's schema module (object API)."""

    def __init__(self):
        from ai_edge_litert import schema_py_generated as S
        self.S = S
        self.buffers = [S.BufferT()]
        self.tensors = []
        self.codes = []
        self.ops = []

    def tensor(self, name, shape, ttype, data=None):
        t = self.S.TensorT()
        t.name, t.shape, t.type, t.buffer = name, list(shape), ttype, 0
        if data is not None:
            b = self.S.BufferT()
            b.data = np.frombuffer(data.tobytes(), dtype=np.uint8).tolist()
            self.buffers.append(b)
            t.buffer = len(self.buffers) - 1
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, code, version, inputs, outputs, options=None):
        """`options`: the name of the BuiltinOptions member (AddOptions, ...) or None."""
        S = self.S
        key = (code, version)
        if key not in [(c.builtinCode, c.version) for c in self.codes]:
            oc = S.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), version
            self.codes.append(oc)
        o = S.OperatorT()
        o.opcodeIndex = [(c.builtinCode, c.version) for c in self.codes].index(key)
        o.inputs, o.outputs = inputs, outputs
        if options is not None:
            o.builtinOptionsType = getattr(S.BuiltinOptions, options)
            o.builtinOptions = getattr(S, options + "T")()
        self.ops.append(o)

    def write(self, path, inputs, outputs, description):
        import flatbuffers
        S = self.S
        sg = S.SubGraphT()
        sg.tensors, sg.operators, sg.name = self.tensors, self.ops, "main"
        sg.inputs, sg.outputs = inputs, outputs
        m = S.ModelT()
        m.version, m.description = 3, "nnaccel tests/tflite_delegate.py: " + description
        m.operatorCodes, m.subgraphs, m.buffers = self.codes, [sg], self.buffers
        b = flatbuffers.Builder(1024)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        with open(path, "wb") as fh:
            fh.write(bytes(b.Output()))


def cumsum_model(path):
    """x[1,8] -> ADD(x, c1) -> CUMSUM(axis 1) -> MUL(., c2) -> y: CUMSUM has no NNAPI
    equivalent, so the delegate claims ADD and MUL, and TFLite makes two partitions with
    LiteRT's CUMSUM kernel between them."""
    g = Graph()
    S, f32 = g.S, g.S.TensorType.FLOAT32
    x = g.tensor("x", [1, 8], f32)
    c1 = g.tensor("c1", [1, 8], f32, np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8))
    a = g.tensor("a", [1, 8], f32)
    axis = g.tensor("axis", [], S.TensorType.INT32, np.array(1, dtype=np.int32))
    s = g.tensor("s", [1, 8], f32)
    c2 = g.tensor("c2", [1, 8], f32, np.full((1, 8), 0.5, dtype=np.float32))
    y = g.tensor("y", [1, 8], f32)
    g.op(S.BuiltinOperator.ADD, 1, [x, c1], [a], "AddOptions")
    g.op(S.BuiltinOperator.CUMSUM, 1, [a, axis], [s], "CumsumOptions")
    g.op(S.BuiltinOperator.MUL, 1, [s, c2], [y], "MulOptions")
    g.write(path, [x], [y], "ADD, CUMSUM, MUL")


def dequantize_model(path):
    """x[1,8] + DEQUANTIZE(w: float16 constant [1,8]) -> y: DEQUANTIZE of a constant lowers to
    no operation (it folds at import), so the delegate claims it with the ADD reading it."""
    g = Graph()
    S, f32 = g.S, g.S.TensorType.FLOAT32
    x = g.tensor("x", [1, 8], f32)
    wq = g.tensor("w16", [1, 8], S.TensorType.FLOAT16, W16)
    w = g.tensor("w", [1, 8], f32)
    y = g.tensor("y", [1, 8], f32)
    g.op(S.BuiltinOperator.DEQUANTIZE, 3, [wq], [w])
    g.op(S.BuiltinOperator.ADD, 1, [x, w], [y], "AddOptions")
    g.write(path, [x], [y], "DEQUANTIZE(float16), ADD")


# dequantize_model's float16 constant.
W16 = np.linspace(-2, 2, 8, dtype=np.float16).reshape(1, 8)


def densify_model(path):
    """x[2,4] + DENSIFY(w: a sparse float32 constant [2,4], row 0 dense, row 1 CSR) -> y."""
    g = Graph()
    S, f32 = g.S, g.S.TensorType.FLOAT32
    sp = S.SparsityParametersT()
    sp.traversalOrder = [0, 1]
    dense = S.DimensionMetadataT()
    dense.format, dense.denseSize = S.DimensionType.DENSE, 2
    csr = S.DimensionMetadataT()
    csr.format = S.DimensionType.SPARSE_CSR
    csr.arraySegmentsType = csr.arrayIndicesType = S.SparseIndexVector.Int32Vector
    csr.arraySegments, csr.arrayIndices = S.Int32VectorT(), S.Int32VectorT()
    # Row 0 holds columns 1 and 3, row 1 column 0.
    csr.arraySegments.values, csr.arrayIndices.values = [0, 2, 3], [1, 3, 0]
    sp.dimMetadata = [dense, csr]
    x = g.tensor("x", [2, 4], f32)
    ws = g.tensor("w_sparse", [2, 4], f32, np.array([1.5, -2.0, 3.25], dtype=np.float32))
    g.tensors[ws].sparsity = sp
    w = g.tensor("w", [2, 4], f32)
    y = g.tensor("y", [2, 4], f32)
    g.op(S.BuiltinOperator.DENSIFY, 1, [ws], [w], "DensifyOptions")
    g.op(S.BuiltinOperator.ADD, 1, [x, w], [y], "AddOptions")
    g.write(path, [x], [y], "DENSIFY, ADD")


# densify_model's sparse constant made dense, by hand.
DENSE = np.array([[0, 1.5, 0, -2.0], [3.25, 0, 0, 0]], dtype=np.float32)

# The small graphs the cases build, by file name.
GRAPHS_BUILT = {"cumsum": cumsum_model, "dequantize": dequantize_model,
                "densify": densify_model}


def graph_path(name, tmp):
    """The graph `name` (a key of GRAPHS_BUILT): the file in NNACCEL_GRAPHS_DIR when that is
    set (tflite_runtime has no schema module to build it), else built now into `tmp`."""
    if GRAPHS:
        path = os.path.join(GRAPHS, name + ".tflite")
        if not os.path.isfile(path):
            raise AssertionError("%s is missing (tests/tflite_delegate.py graphs %s)" % (
                path, GRAPHS))
        return path
    if RUNTIME != "litert":
        raise AssertionError("%s has no schema module to build %s: set NNACCEL_GRAPHS_DIR to "
                             "what `tests/tflite_delegate.py graphs DIR` wrote under LiteRT"
                             % (RUNTIME, name))
    path = os.path.join(tmp, name + ".tflite")
    GRAPHS_BUILT[name](path)
    return path


class Loading(unittest.TestCase):
    def test_unknown_option_fails_load_delegate_with_the_message(self):
        with self.assertRaises(ValueError) as cm:
            litert.load_delegate(SO, {"bogus": "1"})
        self.assertIn('unknown option "bogus"', str(cm.exception))

    def test_bad_option_value_fails_load_delegate_naming_it(self):
        with self.assertRaises(ValueError) as cm:
            litert.load_delegate(SO, {"burst": "yes"})
        self.assertIn('burst="yes"', str(cm.exception))

    def test_unreachable_service_fails_load_delegate(self):
        with self.assertRaises(ValueError) as cm:
            litert.load_delegate(SO, {"service": "/nonexistent/nnaccel.sock"})
        self.assertIn("cannot reach the service", str(cm.exception))

    def test_a_panic_inside_the_library_is_caught_and_the_process_lives_on(self):
        self.assertEqual(library().nnaccel_tflite_delegate_panic_probe(), 1)
        # Still alive, and the library still answers.
        self.assertGreaterEqual(stats()["delegates"], 0)


class Agreement(unittest.TestCase):
    """Each generated model: every node claimed in one partition, outputs as LiteRT's."""

    def check(self, name, invokes=3):
        quantized = name.endswith("int8")
        path = model_path(name)
        ref = reference(path, quantized)
        x = inputs_for(ref)
        theirs = run(ref, x)
        nodes = node_count(path)
        before = stats()
        interp, _d = with_delegate(path, {}, quantized)
        ours = run(interp, x, invokes)
        moved = delta(before, stats())
        assert_agree(self, ours, theirs, quantized, name)
        self.assertEqual(moved["nodes_claimed"], nodes, "%s: nodes claimed" % name)
        self.assertEqual(moved["partitions"], 1, "%s: partitions" % name)
        self.assertEqual(moved["executions"], invokes, "%s: executions" % name)
        self.assertEqual(moved["burst_executions"], invokes - 1, "%s: bursts" % name)
        self.assertEqual(moved["failed_executions"], 0, name)

    def test_mlp_b1_float32_all_nodes_claimed_outputs_within_1e5_of_range(self):
        self.check("mlp_b1_float32")

    def test_mlp_b1_int8_all_nodes_claimed_outputs_within_one_quantum(self):
        self.check("mlp_b1_int8")

    def test_mobilenet_v1_small_float32_all_nodes_claimed_outputs_within_1e5_of_range(self):
        self.check("mobilenet_v1_small_float32")

    def test_mobilenet_v1_small_int8_all_nodes_claimed_outputs_within_one_quantum(self):
        self.check("mobilenet_v1_small_int8")

    def test_mobilenet_v2_small_float32_all_nodes_claimed_outputs_within_1e5_of_range(self):
        self.check("mobilenet_v2_small_float32")

    def test_mobilenet_v2_small_int8_all_nodes_claimed_outputs_within_one_quantum(self):
        self.check("mobilenet_v2_small_int8")


class Partitions(unittest.TestCase):
    def test_unclaimable_node_in_the_middle_gives_two_partitions_and_litert_runs_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = graph_path("cumsum", tmp)
            ref = reference(path, False)
            x = [np.arange(8, dtype=np.float32).reshape(1, 8) - 3.0]
            theirs = run(ref, x)
            # By hand: a = x + linspace(-1, 1, 8); y = 0.5 * cumsum(a).
            a = x[0] + np.linspace(-1, 1, 8, dtype=np.float32)
            np.testing.assert_allclose(theirs[0], 0.5 * np.cumsum(a, axis=1), rtol=1e-6)
            before = stats()
            interp, _d = with_delegate(path, {})
            ours = run(interp, x, invokes=2)
            moved = delta(before, stats())
            assert_agree(self, ours, theirs, False, "ADD, CUMSUM, MUL")
            self.assertEqual(moved["nodes_claimed"], 2)
            self.assertEqual(moved["partitions"], 2)
            # Two partitions, two invokes: four executions through nnaccel.
            self.assertEqual(moved["executions"], 4)
            ops = [o["op_name"] for o in interp._get_ops_details()]
            self.assertIn("CUMSUM", ops)


class Folding(unittest.TestCase):
    """A node that folds into constants at import is claimed with the ADD that reads it."""

    def check(self, name, x, expected, what):
        with tempfile.TemporaryDirectory() as tmp:
            path = graph_path(name, tmp)
            ref = reference(path, False)
            theirs = run(ref, x)
            np.testing.assert_allclose(theirs[0], expected, rtol=1e-6)
            before = stats()
            interp, _d = with_delegate(path, {})
            ours = run(interp, x)
            moved = delta(before, stats())
            assert_agree(self, ours, theirs, False, what)
            self.assertEqual(moved["nodes_claimed"], 2, what)
            self.assertEqual(moved["partitions"], 1, what)
            self.assertEqual(moved["executions"], 1, what)

    def test_dequantize_of_a_constant_is_claimed_with_the_node_reading_it(self):
        x = [np.linspace(1, -1, 8, dtype=np.float32).reshape(1, 8)]
        # By hand: y = x + float32(w16).
        self.check("dequantize", x, x[0] + W16.astype(np.float32), "DEQUANTIZE, ADD")

    def test_densify_of_a_sparse_constant_is_claimed_with_the_node_reading_it(self):
        x = [np.arange(8, dtype=np.float32).reshape(2, 4)]
        # By hand: y = x + the dense constant DENSE spells out.
        self.check("densify", x, x[0] + DENSE, "DENSIFY, ADD")


class Resize(unittest.TestCase):
    def test_resizing_an_input_redelegates_with_the_new_shape_and_agrees(self):
        # The delegate does not handle dynamic tensors: TFLite applies it again after
        # resize_tensor_input, and the new partition is lowered at batch 3.
        path = model_path("mlp_b1_float32")
        ref = reference(path, False)
        before = stats()
        interp, _d = with_delegate(path, {})
        for i in (ref, interp):
            i.resize_tensor_input(i.get_input_details()[0]["index"], [3, 784])
        x = [np.random.default_rng(3).standard_normal((3, 784)).astype(np.float32)]
        theirs = run(ref, x)
        ours = run(interp, x)
        self.assertEqual(ours[0].shape, (3, 10))
        assert_agree(self, ours, theirs, False, "mlp_b1_float32 at batch 3")
        moved = delta(before, stats())
        self.assertEqual(moved["partitions"], 2, "one partition before the resize, one after")
        self.assertEqual(moved["executions"], 1)


class Options(unittest.TestCase):
    def test_burst_0_executes_without_a_burst(self):
        path = model_path("mlp_b1_float32")
        x = inputs_for(reference(path, False))
        before = stats()
        interp, _d = with_delegate(path, {"burst": "0"})
        run(interp, x, invokes=3)
        moved = delta(before, stats())
        self.assertEqual(moved["executions"], 3)
        self.assertEqual(moved["burst_executions"], 0)

    def test_cache_dir_saves_the_compilation_and_a_second_delegate_agrees(self):
        path = model_path("mlp_b1_float32")
        ref = reference(path, False)
        x = inputs_for(ref)
        theirs = run(ref, x)
        with tempfile.TemporaryDirectory() as cache:
            first, _d1 = with_delegate(path, {"cache_dir": cache})
            ours1 = run(first, x)
            saved = sorted(os.listdir(cache))
            self.assertTrue(saved, "nothing written to the cache directory")
            second, _d2 = with_delegate(path, {"cache_dir": cache})
            ours2 = run(second, x)
            self.assertEqual(sorted(os.listdir(cache)), saved, "the second run wrote new files")
        assert_agree(self, ours1, theirs, False, "cache_dir, first")
        assert_agree(self, ours2, theirs, False, "cache_dir, second")

    def test_cpu_fallback_0_claims_what_the_device_runs(self):
        # The embedded simulated device runs every operation of the MLP: all claimed.
        path = model_path("mlp_b1_float32")
        ref = reference(path, False)
        nodes = node_count(path)
        before = stats()
        interp, _d = with_delegate(path, {"cpu_fallback": "0"})
        run(interp, inputs_for(ref))
        self.assertEqual(delta(before, stats())["nodes_claimed"], nodes)

    def test_log_1_says_how_many_nodes_were_claimed(self):
        path = model_path("mlp_b1_float32")
        nodes = node_count(path)
        with tempfile.TemporaryFile() as log:
            saved = os.dup(2)
            os.dup2(log.fileno(), 2)
            try:
                interp, _d = with_delegate(path, {"log": "1"})
                run(interp, inputs_for(interp))
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            log.seek(0)
            text = log.read().decode("utf-8", "replace")
        self.assertIn("claimed %d of %d nodes" % (nodes, nodes), text)
        self.assertIn("partition 0", text)


class NegativeControl(unittest.TestCase):
    def test_litert_alone_moves_no_nnaccel_counter_and_the_delegate_does(self):
        path = model_path("mlp_b1_float32")
        plain = reference(path, False)
        x = inputs_for(plain)
        before = stats()
        run(plain, x, invokes=4)
        self.assertEqual(delta(before, stats())["executions"], 0)
        interp, _d = with_delegate(path, {})
        before = stats()
        run(interp, x, invokes=4)
        self.assertEqual(delta(before, stats())["executions"], 4)


def service_mode(socket, invokes):
    """MODEL through the service, `invokes` times; outputs and counters checked."""
    path = model_path(SERVICE_MODEL)
    ref = reference(path, False)
    x = inputs_for(ref)
    theirs = run(ref, x)
    before = stats()
    interp, _d = with_delegate(path, {"service": socket})
    ours = run(interp, x, invokes)
    moved = delta(before, stats())
    t = unittest.TestCase()
    assert_agree(t, ours, theirs, False, SERVICE_MODEL + " through the service")
    t.assertEqual(moved["executions"], invokes)
    t.assertEqual(moved["partitions"], 1)
    print("service: %d executions through %s, outputs agree" % (invokes, socket))


def plain_mode(invokes):
    path = model_path(SERVICE_MODEL)
    ref = reference(path, False)
    run(ref, inputs_for(ref), invokes)
    print("plain: %d invokes on LiteRT alone" % invokes)


if __name__ == "__main__":
    print("runtime: %s %s" % (RUNTIME, RUNTIME_VERSION), file=sys.stderr)
    if len(sys.argv) >= 3 and sys.argv[1] == "graphs":
        os.makedirs(sys.argv[2], exist_ok=True)
        for name, build in GRAPHS_BUILT.items():
            build(os.path.join(sys.argv[2], name + ".tflite"))
        print("graphs: %s written to %s" % (", ".join(GRAPHS_BUILT), sys.argv[2]))
        sys.exit(0)
    if not SO or not os.path.isfile(SO):
        sys.exit("NNACCEL_DELEGATE_SO must name the built delegate library (got %r)" % SO)
    if len(sys.argv) >= 2 and sys.argv[1] == "service":
        service_mode(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) >= 2 and sys.argv[1] == "plain":
        plain_mode(int(sys.argv[2]))
    else:
        unittest.main()
