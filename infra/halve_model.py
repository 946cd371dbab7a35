"""Rewrite all-MiniLM-L6-v2's model.zip with its weights in float16 (half the bytes):
    python infra/halve_model.py vendor/all_minilm_l6_v2/model.zip

infra/build.sh runs this on the vendored copy: the F32 model.safetensors (87 MB) is most of the
package's weight against Lambda's 250 MB limit. Every F32 tensor becomes F16, rounded as numpy's
astype rounds (to nearest, ties to even), which is exactly how chalicelib/search/embedder.py rounds an
F32 file at load: local runs and Lambda compute the same vectors. Other tensors (the int64
position ids), the metadata and the zip's other members are kept as they are. A file with no F32
tensor is left untouched, so running it twice is harmless. Needs only numpy.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

MEMBER = "model.safetensors"


def halve_safetensors(raw: bytes) -> bytes | None:
    """The safetensors file with every F32 tensor as F16; None when it holds no F32 tensor.

    Layout: 8-byte little-endian header size, JSON header (dtype, shape, data_offsets per
    tensor), then the tensors' bytes.
    """
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8: 8 + header_len])
    data = memoryview(raw)[8 + header_len:]
    tensors = {name: meta for name, meta in header.items() if name != "__metadata__"}
    if not any(meta["dtype"] == "F32" for meta in tensors.values()):
        return None
    blobs: list[bytes] = []
    offset = 0
    out_header: dict[str, object] = {"__metadata__": header["__metadata__"]} if "__metadata__" in header else {}
    for name, meta in sorted(tensors.items(), key=lambda item: item[1]["data_offsets"][0]):
        start, end = meta["data_offsets"]
        blob = bytes(data[start:end])
        if meta["dtype"] == "F32":
            blob = np.frombuffer(blob, dtype="<f4").astype("<f2").tobytes()
            meta = {**meta, "dtype": "F16"}
        out_header[name] = {**meta, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(out_header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header so the data is 8-aligned
    return len(encoded).to_bytes(8, "little") + encoded + b"".join(blobs)


def halve_zip(path: Path) -> bool:
    """Replace the zip's model.safetensors by its F16 version, other members unchanged, in the
    same order and with the same dates (the same input always gives the same bytes); False when
    it was F16 already."""
    with zipfile.ZipFile(path) as source:
        halved = halve_safetensors(source.read(MEMBER))
        if halved is None:
            return False
        handle, scratch = tempfile.mkstemp(dir=path.parent, suffix=".zip")
        os.close(handle)
        try:
            with zipfile.ZipFile(scratch, "w") as target:
                for info in source.infolist():
                    body = halved if info.filename == MEMBER else source.read(info)
                    target.writestr(info, body, compress_type=info.compress_type)
            os.replace(scratch, path)
        except BaseException:
            os.unlink(scratch)
            raise
    return True


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python infra/halve_model.py PATH/model.zip")
    path = Path(sys.argv[1])
    before = path.stat().st_size
    if halve_zip(path):
        print(f"{path}: weights in float16, {before / 2**20:.1f} -> {path.stat().st_size / 2**20:.1f} MiB")
    else:
        print(f"{path}: weights already float16")


if __name__ == "__main__":
    main()
