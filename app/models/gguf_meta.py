"""A GGUF file's facts read from its header, without its weights: what the model library shows.

The names and sizes of GGUF's value and tensor types come from the `gguf` package that the
llama.cpp project keeps. Its own `GGUFReader` is not used: it turns every tokenizer string into a
numpy view (1.6 s for SmolLM2-135M's 98k strings), where this walk skips them (about 20 ms) and
never touches a tensor's data. Any file, however broken, gives a `GgufMeta`; a problem is its
`error`, in one line.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass, field

from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType, LlamaFileType

_MAGIC = struct.pack("<I", GGUF_MAGIC)  # b"GGUF"
_SCALARS = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
_GUESSED_FILE_TYPE = 1024  # llama.cpp's flag on a file type it guessed rather than read
_MAX_STRING = 1 << 26  # 64 MiB: longer is a broken length field, not a string


class GgufError(Exception):
    """Why a file's header cannot be read, in one line."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int  # from the start of the data section

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def type_name(self) -> str:
        try:
            return GGMLQuantizationType(self.type_id).name
        except ValueError:
            return f"type {self.type_id}"

    @property
    def n_bytes(self) -> int | None:
        """The tensor's size in the file; None for a type this version of `gguf` does not know."""
        sizes = GGML_QUANT_SIZES.get(self.type_id)  # an IntEnum key matches its int
        if sizes is None:
            return None
        block, type_size = sizes
        return self.n_elements // block * type_size


@dataclass(frozen=True)
class GgufMeta:
    """One GGUF file's header. `metadata` holds its scalar values (an array is kept as its length)."""

    path: str
    size_bytes: int = 0
    version: int = 0
    metadata: dict[str, object] = field(default_factory=dict)
    tensors: tuple[TensorInfo, ...] = ()
    error: str = ""  # empty when the file reads as a whole GGUF model

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name", ""))

    @property
    def kind(self) -> str:
        """general.type: "model", or "adapter" / "mmproj" for files that are not a model on their own."""
        return str(self.metadata.get("general.type", "model"))

    @property
    def context_length(self) -> int:
        value = self.metadata.get(f"{self.architecture}.context_length", 0)
        return value if isinstance(value, int) else 0

    @property
    def has_chat_template(self) -> bool:
        """A model without one is a base model: it continues text rather than chats."""
        template = self.metadata.get("tokenizer.chat_template")
        return isinstance(template, str) and bool(template.strip())

    @property
    def split_count(self) -> int:
        value = self.metadata.get("split.count", 1)
        return value if isinstance(value, int) and value > 0 else 1

    @property
    def n_params(self) -> int:
        """The parameters counted from this file's tensor shapes (of one part, for a split model)."""
        return sum(t.n_elements for t in self.tensors)

    @property
    def size_label(self) -> str:
        """general.size_label as the file says it ("135M", "8x7B"); empty when absent."""
        return str(self.metadata.get("general.size_label", "")).strip()

    @property
    def quantization(self) -> str:
        """general.file_type's name (Q4_K_M, F16, ...), else the type holding most of the weights."""
        file_type = self.metadata.get("general.file_type")
        if isinstance(file_type, int):
            name = file_type_name(file_type & ~_GUESSED_FILE_TYPE)
            if name:
                return name
        return dominant_tensor_type(self.tensors)


def file_type_name(file_type: int) -> str:
    """LlamaFileType.MOSTLY_Q4_K_M -> "Q4_K_M", ALL_F32 -> "F32"; empty for a number it does not know."""
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return ""
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def dominant_tensor_type(tensors: tuple[TensorInfo, ...]) -> str:
    """The tensor type that holds the most bytes among the matrices (norms and biases stay F32)."""
    weight: dict[str, int] = {}
    for t in tensors:
        if len(t.shape) >= 2:
            weight[t.type_name] = weight.get(t.type_name, 0) + (t.n_bytes or t.n_elements)
    return max(weight, key=weight.__getitem__) if weight else ""


def format_params(n: float) -> str:
    """135_000_000 -> "135M", 1_540_000_000 -> "1.5B", as model names write them."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{suffix}".replace(".0", "") if value < 10 else f"{value:.0f}{suffix}"
    return str(int(n))


def read_gguf(path: str | os.PathLike) -> GgufMeta:
    """The header of `path`; never raises: a file that cannot be read as GGUF gets an `error`."""
    path = os.fspath(path)
    try:
        st = os.stat(path)  # never blocks, where opening a FIFO waits for a writer forever
        size = st.st_size
        if stat.S_ISDIR(st.st_mode):
            return GgufMeta(path, error="a folder, not a GGUF file")
        if not stat.S_ISREG(st.st_mode):
            return GgufMeta(path, error="not a regular file (a FIFO, socket or device)")
        if size == 0:
            return GgufMeta(path, error="empty file")
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _Header(buf, path, size).read()
    except OSError as e:
        return GgufMeta(path, error=f"cannot read the file: {e.strerror or e}")
    except GgufError as e:
        return GgufMeta(path, size_bytes=size, error=str(e))
    except Exception as e:  # a header broken in a way no check above foresaw: still a row, not a crash
        return GgufMeta(path, size_bytes=size, error=f"broken GGUF header ({type(e).__name__}: {e})")


class _Header:
    """A walk over the header: magic, version, counts, key-value pairs, tensor infos."""

    def __init__(self, buf: mmap.mmap, path: str, size: int):
        self.buf, self.path, self.size = buf, path, size
        self.pos = 0
        self.endian = "<"

    def read(self) -> GgufMeta:
        magic = bytes(self.buf[:4])
        if magic != _MAGIC:
            if len(magic) < 4 and _MAGIC.startswith(magic):
                raise GgufError(f"truncated: {len(magic)} bytes, too short for a GGUF header")
            raise GgufError(f"not a GGUF file (it starts with {magic.decode('latin-1')!r}, not 'GGUF')")
        self.pos = 4
        version = self._scalar("I")
        if version & 0xFFFF == 0:  # written big-endian (s390x): the same walk, other byte order
            self.endian = ">"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in (2, 3):
            raise GgufError(f"GGUF version {version} is not supported (2 and 3 are)")
        n_tensors, n_kv = self._scalar("Q"), self._scalar("Q")
        metadata = {}
        for _ in range(n_kv):
            key = self._string()
            metadata[key] = self._value(self._scalar("I"))
        tensors = tuple(self._tensor_info() for _ in range(n_tensors))
        meta = GgufMeta(self.path, self.size, version, metadata, tensors)
        return GgufMeta(self.path, self.size, version, metadata, tensors, error=self._data_problem(meta))

    def _data_problem(self, meta: GgufMeta) -> str:
        """A file cut short in its weights: the header says where they end, the file's size where it does."""
        alignment = meta.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0:
            alignment = GGUF_DEFAULT_ALIGNMENT
        data_start = -(-self.pos // alignment) * alignment
        ends = [t.offset + n for t in meta.tensors if (n := t.n_bytes) is not None]
        needed = data_start + max(ends, default=0)
        if needed > self.size:
            return f"truncated: the file has {self.size / 1e6:.1f} MB of the {needed / 1e6:.1f} MB its header describes"
        return ""

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GgufError(f"truncated: the header ends early (the file has {self.size:,} bytes)")

    def _scalar(self, fmt: str):
        n = struct.calcsize(fmt)
        self._need(n)
        value = struct.unpack_from(self.endian + fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def _string(self) -> str:
        n = self._scalar("Q")
        if n > _MAX_STRING:
            raise GgufError(f"broken GGUF header: a string of {n:,} bytes at byte {self.pos - 8:,}")
        self._need(n)
        text = self.buf[self.pos : self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return text

    def _value(self, kind: int):
        if kind == GGUFValueType.STRING:
            return self._string()
        if kind == GGUFValueType.ARRAY:
            item_kind, count = self._scalar("I"), self._scalar("Q")
            self._skip_array(item_kind, count)
            return count  # an array is kept as its length: the tokenizer's are large and not shown
        fmt = _SCALARS.get(kind)
        if fmt is None:
            raise GgufError(f"broken GGUF header: unknown value type {kind} at byte {self.pos - 4:,}")
        return self._scalar(fmt)

    def _skip_array(self, item_kind: int, count: int) -> None:
        fmt = _SCALARS.get(item_kind)
        if fmt is not None:
            n = struct.calcsize(fmt) * count
            self._need(n)
            self.pos += n
        elif item_kind == GGUFValueType.STRING:
            unpack, buf, endian = struct.unpack_from, self.buf, self.endian + "Q"
            pos, end = self.pos, self.size
            for _ in range(count):  # the hot loop of a scan: a tokenizer's vocabulary and merges
                if pos + 8 > end:
                    break
                pos += 8 + unpack(endian, buf, pos)[0]
            else:
                if pos <= end:
                    self.pos = pos
                    return
            raise GgufError(f"truncated: the header ends early (the file has {self.size:,} bytes)")
        else:
            for _ in range(count):
                self._value(item_kind)

    def _tensor_info(self) -> TensorInfo:
        name = self._string()
        n_dims = self._scalar("I")
        if n_dims > 8:
            raise GgufError(f"broken GGUF header: tensor {name!r} has {n_dims} dimensions")
        shape = tuple(self._scalar("Q") for _ in range(n_dims))
        return TensorInfo(name, shape, self._scalar("I"), self._scalar("Q"))
