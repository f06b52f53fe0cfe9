"""``gpubuf.zarr_pipeline.CodecPipeline``: zarr's batched codec pipeline, with device
chunks read to the host before a zarr v2 codec encodes them.

zarr 3's v2 codec (``zarr.codecs._v2.V2Codec``) hands a chunk's array itself to numcodecs,
whose codecs read it as host memory (``numpy.array(buf, copy=False)``). A chunk held in
device memory cannot be read that way, and no array can answer that call with a copy
without breaking numpy's no-copy contract. This pipeline reads such chunks to the host
first, one copy a chunk, which the encoding would need anyway (numcodecs runs on the
host); every other codec gets the chunks as they are. ``gpubuf.zarr.enable`` makes it
zarr's pipeline together with gpubuf's buffer classes; it is the same pipeline as zarr's
for arrays that are not v2 or chunks that are on the host.
"""

from zarr.codecs._v2 import V2Codec
from zarr.core.codec_pipeline import BatchedCodecPipeline

from . import NDBuffer as _Array

__all__ = ["CodecPipeline"]


def _on_host(chunk):
    """``chunk`` (a zarr ``NDBuffer`` or None) with its data in host memory: itself when
    they are there (numpy arrays, the CPU backend's arrays), else the same class over a
    copy read from the device."""
    if chunk is None:
        return chunk
    data = chunk.as_ndarray_like()
    if not isinstance(data, _Array) or data.backend.name == "cpu":
        return chunk
    return chunk.__class__(data.to_numpy())


class CodecPipeline(BatchedCodecPipeline):
    """zarr's ``BatchedCodecPipeline``; v2 chunks in device memory are read to the host
    before they are encoded."""

    async def encode_batch(self, chunk_arrays_and_specs):
        if isinstance(self.array_bytes_codec, V2Codec):
            chunk_arrays_and_specs = [(_on_host(a), spec) for a, spec in chunk_arrays_and_specs]
        return await super().encode_batch(chunk_arrays_and_specs)
