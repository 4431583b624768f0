"""`Vision`: a model's projector (an mmproj GGUF) through llama.cpp's mtmd: a picture's pixels read,
cut into the model's image tokens, and encoded into embeddings of the model's size.

Threads: loaded with its model (the engine or the loader thread); read and encoded on the prompt
thread only (`read`, `encode`: mtmd's context keeps one encode's output at a time), freed with the
model. The engine thread decodes the embeddings (context.py's `decode_images`), never calling mtmd.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass, field

import llama_cpp as ll
import llama_cpp.mtmd_cpp as mtmd
import numpy as np

from ..errors import ModelLoadError, RequestError
from ..image_file import ImageError, check_image
from ..images import IMAGE_MARKER, Image
from ..model_file import check_gguf_file
from ..positions import SECTIONS, PictureLayout
from .log_capture import forget_tail, last_error, on_log

_MARKER = IMAGE_MARKER.encode()
_log_routed = False
_PROBE_SIZES = ((448, 448), (1024, 1024), (4096, 4096), (4096, 1024), (1024, 4096))


@dataclass
class ImageRead:
    """A picture cut into the model's tokens, ready to encode: mtmd's texts around it (Gemma 3's
    <start_of_image>), how many image tokens, how many positions they take (M-RoPE: fewer), and
    where they sit (M-RoPE's 2D layout; None: a position a token)."""

    before: tuple[int, ...]
    n_tokens: int
    after: tuple[int, ...]
    n_pos: int
    chunk: object = field(default=None, repr=False)  # mtmd's image chunk (owned), until encoded
    layout: PictureLayout | None = None


def _on_a_thread_of_its_own(call, *args):
    """`call(*args)` on a thread that ends with it. An encode's CPU work runs in an OpenMP team of
    the thread that asks for it; a team outlives its encode while its thread lives, and once the
    process holds more OpenMP workers than cores, libgomp makes every team sleep at its barriers,
    the engine thread's decodes too: after one picture encoded on the prompt thread, 8 panes'
    decode steps took 0.44 s where they took 1.0 s before (a 2-core machine under a load of 6, where
    sleeping beats spinning; docs/architecture.md: a second model's idle team cost a busy one 29%).
    A thread of its own takes its team with it when it ends: the steps stay as they were."""
    result = []
    worker = threading.Thread(target=lambda: result.append(call(*args)), name="llama-encode")
    worker.start()
    worker.join()
    if not result:
        raise RequestError("the projector's encode failed (see the log)")
    return result[0]


class Vision:
    """One model's projector: whether its tokens decode causally, and its reads and encodes."""

    def __init__(self, path: str, model, n_threads: int, use_gpu: bool, flash_attn_type: int):
        global _log_routed
        try:
            check_gguf_file(path)
        except ModelLoadError as e:
            raise ModelLoadError(f"the projector (--mmproj): {str(e).replace('model file', 'file')}") from None
        if not _log_routed:  # mtmd logs apart from llama.cpp: kept quiet the same way
            mtmd.mtmd_helper_log_set(on_log, ctypes.c_void_p(0))
            _log_routed = True
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.media_marker = _MARKER
        params.flash_attn_type = flash_attn_type
        forget_tail()
        self.ctx = mtmd.mtmd_init_from_file(path.encode(), model, params)
        name = os.path.basename(path)
        if not self.ctx:
            reason = last_error() or "llama.cpp could not read it"
            raise ModelLoadError(f"cannot load the projector {name}: {reason}")
        if not mtmd.mtmd_support_vision(self.ctx):
            self.close()
            raise ModelLoadError(f"the projector {name} has no vision encoder (an audio one?): images need one")
        self.path = path
        # the model's image tokens attend to each other both ways (Gemma 3): each image is decoded
        # whole, in a decode of its own
        self.non_causal = bool(mtmd.mtmd_decode_use_non_causal(self.ctx, None))
        self.mrope = bool(mtmd.mtmd_decode_use_mrope(self.ctx))  # Qwen-VL's 2D positions (positions.py)
        self.sections = SECTIONS if self.mrope else 1  # positions an embedding row takes in a batch
        self.n_embd = ll.llama_model_n_embd_inp(model)
        # the most tokens a picture may take: a whole one must fit a decode when they attend both ways
        self.max_tokens = max(self._count(w, h) for w, h in _PROBE_SIZES) if self.non_causal else 0

    def _count(self, width: int, height: int) -> int:
        """The image tokens of a picture of this size (mtmd counts them without pixels)."""
        bitmap = mtmd.mtmd_bitmap_init(width, height, None)
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            text = mtmd.mtmd_input_text(_MARKER, len(_MARKER), False, True)
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            if mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), bitmaps, 1) != 0:
                return 0
            return max(
                mtmd.mtmd_input_chunk_get_n_tokens(mtmd.mtmd_input_chunks_get(chunks, i))
                for i in range(mtmd.mtmd_input_chunks_size(chunks))
                if mtmd.mtmd_input_chunk_get_type(mtmd.mtmd_input_chunks_get(chunks, i)) != mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT
            )
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    def read(self, image: Image) -> ImageRead:
        """The picture's pixels decoded and cut into the model's tokens (RequestError: not a picture it reads)."""
        try:
            facts = check_image(image.data)
        except ImageError as e:
            raise RequestError(str(e)) from None
        buf = (ctypes.c_uint8 * len(image.data)).from_buffer_copy(image.data)
        forget_tail()
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(image.data), False)
        if not bitmap:
            raise RequestError(f"the {facts.format} image could not be decoded: its pixel data is corrupt or cut short")
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            mtmd.mtmd_bitmap_set_id(bitmap, image.digest.encode())
            text = mtmd.mtmd_input_text(_MARKER, len(_MARKER), False, True)
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), bitmaps, 1)
            if rc != 0:
                raise RequestError(f"the {facts} image could not be prepared for the model (mtmd code {rc}): {last_error()}")
            return self._read_chunks(chunks)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    def _read_chunks(self, chunks) -> ImageRead:
        before: list[int] = []
        after: list[int] = []
        image = None
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                (after if image is not None else before).extend(tokens[j] for j in range(n.value))
            elif image is None:
                image = chunk
            else:
                raise RequestError("the projector cut one picture into several: this engine takes one chunk a picture")
        if image is None:
            raise RequestError("the projector gave no image tokens for the picture")
        n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(image)
        n_pos = mtmd.mtmd_input_chunk_get_n_pos(image)
        layout = self._layout(image, n_tokens, n_pos) if self.mrope else None
        return ImageRead(tuple(before), n_tokens, tuple(after), n_pos, mtmd.mtmd_input_chunk_copy(image), layout)

    @staticmethod
    def _layout(chunk, n_tokens: int, n_pos: int) -> PictureLayout:
        """Where mtmd places the picture's tokens, as llama.cpp's helper gives them to a decode
        (`mtmd_helper_image_get_decoder_pos`, then `set_position_mrope_2d`'s sections: time, y, x, z),
        asked at first positions 0 and 1: each is the one plus, or not, the picture's first position."""
        image = mtmd.mtmd_input_chunk_get_tokens_image(chunk)

        def at(first: int) -> np.ndarray:
            out = (mtmd.mtmd_decoder_pos * n_tokens)()
            mtmd.mtmd_helper_image_get_decoder_pos(image, first, out)
            t, x, y, z = np.frombuffer(out, dtype=np.uint32).reshape(n_tokens, SECTIONS).astype(np.int32).T
            return np.stack([t, y, x, z])

        base = at(0)
        try:
            return PictureLayout(n_pos, base, at(1) - base)
        except ValueError as e:
            raise RequestError(f"the projector places the picture's tokens in a way this engine does not read: {e}") from None

    def encode(self, read: ImageRead) -> tuple[np.ndarray, float]:
        """The picture's embeddings, (n_tokens, n_embd) float32, and the seconds the encode took;
        the read's chunk is freed."""
        if read.chunk is None:
            raise ValueError("this read was encoded already")
        try:
            t0 = time.perf_counter()
            forget_tail()
            if _on_a_thread_of_its_own(mtmd.mtmd_encode_chunk, self.ctx, read.chunk) != 0:
                raise RequestError(f"the projector could not encode the picture: {last_error() or 'mtmd failed'}")
            out = mtmd.mtmd_get_output_embd(self.ctx)
            embd = np.ctypeslib.as_array(out, shape=(read.n_tokens, self.n_embd)).copy()
            return embd, time.perf_counter() - t0
        finally:
            self.free(read)

    @staticmethod
    def free(read: ImageRead) -> None:
        if read.chunk is not None:
            mtmd.mtmd_input_chunk_free(read.chunk)
            read.chunk = None

    def close(self) -> None:
        if self.ctx:
            mtmd.mtmd_free(self.ctx)
            self.ctx = None
