#!/usr/bin/env python3
"""Writes the NumPy-made .npy fixtures test_npy.c reads (run from the repo root; needs numpy).

Each array's values follow a formula that test_npy.c recomputes, so the test checks tpusim's
reader against files NumPy itself wrote, and tpusim's writer byte for byte against np.save."""
import io
import os

import numpy as np

out = os.path.dirname(os.path.abspath(__file__))


def save(name, arr, version=None):
    path = os.path.join(out, name)
    if version is None:
        np.save(path, arr)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)


# f32 2x3: v = 0.5*i - 1 for C-order index i (np.save: the writer must match these bytes).
save("f32_2x3.npy", (np.arange(6, dtype="<f4") * 0.5 - 1).reshape(2, 3))
# Big-endian int16: [1, -2, 300, -32768].
save("i16_be.npy", np.array([1, -2, 300, -32768], dtype=">i2"))
# Fortran order f64 2x3x4: v = i for C-order index i.
save("f64_fortran.npy", np.asfortranarray(np.arange(24, dtype="<f8").reshape(2, 3, 4)))
# 0-d bool True.
save("bool_0d.npy", np.array(True))
# Empty u8 0x5.
save("u8_empty.npy", np.zeros((0, 5), dtype=np.uint8))
# Format 2.0 and 3.0 headers: f16 [0.5, -1.5, 65504] and u64 [2**64-1, 7].
save("f16_v2.npy", np.array([0.5, -1.5, 65504], dtype="<f2"), version=(2, 0))
save("u64_v3.npy", np.array([2**64 - 1, 7], dtype="<u8"), version=(3, 0))
# Big-endian f64 [1.25, -3e300].
save("f64_be.npy", np.array([1.25, -3e300], dtype=">f8"))
# i8 (int64) 3-d 2x1x2: v = -i*1e12.
save("i64_2x1x2.npy", (np.arange(4, dtype="<i8") * -1000000000000).reshape(2, 1, 2))
