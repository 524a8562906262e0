#!/usr/bin/env python3
"""Writes the .npz/.npy fixtures of driver/cli/src/npz.rs's unit tests with NumPy itself, so
the reader is tested against files NumPy made, not against its own writer.

Run: target/litert-venv/bin/python3 driver/cli/testdata/gen_npz.py   (any Python with numpy)

The unit tests' model has two inputs: 'x' float32 [1, 2, 2, 1] and 'y' int32 [3]."""

import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

x = np.array([1.0, 2.0, 3.0, 4.0], dtype="<f4").reshape(1, 2, 2, 1)
y = np.array([7, -8, 9], dtype="<i4")


def out(name):
    return os.path.join(HERE, name)


# By name, by position, and compressed (savez_compressed deflates each member).
np.savez(out("named.npz"), x=x, y=y)
np.savez(out("positional.npz"), x, y)
np.savez_compressed(out("compressed.npz"), y=y, x=x)
# A mix of the two namings, a name the model does not have, a missing and an extra array.
np.savez(out("mixed.npz"), x, y=y)
np.savez(out("unknown.npz"), x=x, z=y)
np.savez(out("missing.npz"), x=x)
np.savez(out("extra.npz"), x, y, y)
# Wrong dtype (float64 for x), wrong shape (x as [1, 4]).
np.savez(out("wrong_dtype.npz"), x=x.astype("<f8"), y=y)
np.savez(out("wrong_shape.npz"), x=x.reshape(1, 4), y=y)
# Byte order and layout: x big-endian, and a [2, 3] Fortran-order int32 array.
np.savez(out("big_endian.npz"), x=x.astype(">f4"), y=y)
np.savez(out("fortran.npz"), arr_0=np.asfortranarray(np.arange(6, dtype="<i4").reshape(2, 3)))
# One .npy file (taken as arr_0).
np.save(out("single.npy"), y)

# Inputs of the cli_*.tflite models (gen_tflite.py) for tests/nnaccelctl.rs.
ax = np.array([1, -2, 3, 4], dtype="<f4").reshape(1, 2, 2, 1)
ay = np.array([0.5, 0.5, -5, 1], dtype="<f4").reshape(1, 2, 2, 1)
np.savez(out("cli_add_mul.inputs.npz"), x=ax, y=ay)
np.savez(out("cli_add_mul.positional.npz"), ax, ay)
np.savez(out("cli_state.inputs.npz"), x=np.ones((1, 4), dtype="<f4"))
# The input of examples/add.json (a JSON model: by position only).
np.savez(out("add.inputs.npz"), np.array([1, 2, 3, 4], dtype="<f4").reshape(1, 2, 2, 1))
