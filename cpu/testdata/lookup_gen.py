"""Expected values for cpu/src/ops/lookup_tests.rs, computed independently of the kernels.

Needs pyfarmhash (`pip install pyfarmhash`), the Python binding of Google's FarmHash, whose
fingerprint64 is FarmHash's Fingerprint64. Run: python3 cpu/testdata/lookup_gen.py
"""
import struct

import farmhash

# Fingerprint64 of byte strings covering every length branch (0, 1-3, 4-7, 8-16, 17-32,
# 33-64, > 64 with one and several 64-byte blocks).
CASES = {
    "empty": b"",
    "a": b"a",
    "ab": b"ab",
    "test": b"test",
    "alphabet": b"alphabet",
    "range20": bytes(range(20)),
    "test_x8": b"test" * 8,
    "range50": bytes(range(50)),
    "range100": bytes(range(100)),
    "range200": bytes(range(200)),
}
for name, s in CASES.items():
    print(f"fp64 {name} len {len(s)}: {farmhash.fingerprint64(s)}")


def lsh(hash_rows, rows, weight, kind):
    """LSH_PROJECTION as NNAPI defines it; rows are the input rows' raw bytes."""
    def bit(seed):
        score = 0.0
        for i, r in enumerate(rows):
            h = farmhash.fingerprint64(struct.pack("<f", seed) + r)
            if h >= 1 << 63:
                h -= 1 << 64
            score += (weight[i] if weight else 1.0) * float(h)
        return 1 if score > 0 else 0

    bits = len(hash_rows[0])
    if kind == 2:
        return [bit(s) for row in hash_rows for s in row]
    out = []
    for t, row in enumerate(hash_rows):
        sig = 0
        for s in row:
            sig = (sig << 1) | bit(s)
        out.append(sig + (t << bits if kind == 3 else 0))
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


HASH = [[f32(v) for v in r] for r in [[0.123, 0.456], [-0.321, -0.654], [1.234, 5.678], [-4.321, -8.765]]]
I32_ROWS = [struct.pack("<2i", *r) for r in [[12345, 54321], [67890, 9876], [-12345678, -87654321]]]
W = [f32(0.12), f32(0.34), f32(0.56)]
print("lsh int32 dense weighted:", lsh(HASH, I32_ROWS, W, 2))
print("lsh int32 sparse-deprecated:", lsh(HASH, I32_ROWS, None, 1))
print("lsh int32 sparse:", lsh(HASH, I32_ROWS, None, 3))
F32_ROWS = [struct.pack("<3f", *r) for r in [[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]]]
print("lsh float32 dense:", lsh(HASH, F32_ROWS, None, 2))
print("lsh float32 sparse weighted:", lsh(HASH, F32_ROWS, [f32(-1.0), f32(0.5)], 3))
U8_ROWS = [bytes(r) for r in [[1, 200, 3, 4], [250, 0, 17, 99], [5, 6, 7, 8]]]
print("lsh quant8 sparse:", lsh(HASH, U8_ROWS, None, 3))
# float16 input: the rows hashed are the float16 bytes.
F16_ROWS = [struct.pack("<3e", *r) for r in [[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]]]
print("lsh float16-input dense:", lsh(HASH, F16_ROWS, None, 2))
# float16 hash functions: the seeds are the float16 values widened to float32.
H16 = [[struct.unpack("<e", struct.pack("<e", v))[0] for v in r] for r in HASH]
print("lsh float16-hash int32 sparse:", lsh(H16, I32_ROWS, None, 3))
