"""GGUF checkpoints (llama.cpp) through the ``gguf`` package's ``GGUFWriter`` and ``GGUFReader``.

- MXFP4 weights (fp4_e2m1, blocks of 32, E8M0) are written as GGUF type MXFP4 and NVFP4 weights
  (fp4_e2m1, blocks of 16, UE4M3, tensor scale) as type NVFP4 with their tensor scale in an F32
  tensor ``<name>.scale``: block layouts in :mod:`.gguf_blocks`. A quantized layer of another
  format (MXFP6, MXFP8, MXINT8, ...) has no GGUF type of the same bits and raises
  :class:`CheckpointError` naming the layer and the format; so does an NVFP4 weight whose input
  dim is not a multiple of 64 (the NVFP4 super-block) or a weight with a NaN block.
- Float tensors are F32 (F16 where the model holds float16); integer tensors keep their type
  (I8 / I16 / I32 / I64; unsigned ones and bools are stored in the signed type of their width and
  read back as they were); quantizer state is not written.
- ``general.file_type`` says what the weights are (llama.cpp's ``LlamaFileType``): ``MOSTLY_MXFP4_MOE``
  (38) or ``MOSTLY_NVFP4`` (39) by the larger share of the packed weights, ``ALL_F32`` / ``MOSTLY_F16``
  for a file without any; ``general.quantization_version`` is ``gguf.GGML_QUANT_VERSION``.
- A model with an online rotation (``rotate_model``) is refused: llama.cpp would compute another
  function (:func:`.contents.refuse_online_rotations`).
- The file is written beside the path and renamed onto it (:mod:`.atomic_write`).
- A model with a Hugging Face Llama config gets llama.cpp's tensor names, architecture keys and
  query / key row order (:mod:`.gguf_llama`; no tokenizer); any other model gets its state-dict
  keys as tensor names (at most 63 characters) and ``general.architecture = groupquant``, which
  llama.cpp does not run.
- ``tokenizer_from``: a GGUF file whose ``tokenizer.*`` keys are copied (llama.cpp needs them).
- The string key ``groupquant.checkpoint`` holds a JSON header (GGUF name -> state key, dtypes,
  shapes of the float / integer tensors, tied / shared aliases, permuted rows, the tensors written
  for llama.cpp only such as ``rope_freqs.weight``, the model's config)
  so that groupquant reads its files back bit for bit; a GGUF file without it is read with its
  tensor names as keys.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch

from ...formats import E8M0, get_format, get_scale_format
from ...ops import GroupLayout
from ...ops.bitstream import pack_bits
from ...packing import PackedTensor
from .atomic_write import written_beside
from .contents import CheckpointContents, packed_tensors, refuse_online_rotations
from ..errors import CheckpointError
from .gguf_blocks import GGUFBlocks, codes_of_mxfp4_rows, codes_of_nvfp4_rows, mxfp4_rows, nvfp4_rows
from .gguf_llama import LlamaGGUF, llama_gguf, row_permutation
from .packed_state_dict import FORMAT_NAME, FORMAT_VERSION

__all__ = ["write_gguf", "read_gguf", "check_gguf_weight", "file_type", "HEADER_KEY", "MAX_NAME"]

#: The GGUF string key of groupquant's JSON header.
HEADER_KEY = "groupquant.checkpoint"
#: Longest tensor name GGUF / ggml takes (GGML_MAX_NAME - 1).
MAX_NAME = 63
_DTYPES = {str(d): d for d in (torch.float32, torch.bfloat16, torch.float16)}
#: integer / bool torch dtypes -> the signed torch dtype of their width that GGUF stores (I8 ... I64)
_STORED_INT = {torch.bool: torch.int8, torch.uint8: torch.int8, torch.int8: torch.int8, torch.int16: torch.int16,
               torch.uint16: torch.int16, torch.int32: torch.int32, torch.uint32: torch.int32,
               torch.int64: torch.int64, torch.uint64: torch.int64}
_INT_DTYPES = {str(d): d for d in _STORED_INT}


def _gguf():
    """The gguf package, or an ImportError naming the extra."""
    try:
        import gguf
    except ImportError as e:
        raise ImportError(f"groupquant.save/load with format='gguf' needs the gguf package ({e}); "
                          "install it with: pip install 'groupquant[llm]'") from e
    return gguf


def check_gguf_weight(p: PackedTensor, where: str) -> str:
    """'MXFP4' or 'NVFP4' for a packed weight GGUF holds; CheckpointError names the layer and its format otherwise."""
    fp4 = get_format("fp4_e2m1")
    if p.fmt == fp4 and p.block_size == 32 and p.scale_format == E8M0 and p.tensor_scale is None:
        kind, row = "MXFP4", 32
    elif p.fmt == fp4 and p.block_size == 16 and p.scale_format == get_scale_format("ue4m3"):
        kind, row = "NVFP4", 64
    else:
        ts = "with" if p.tensor_scale is not None else "without"
        raise CheckpointError(f"{where}: GGUF holds MXFP4 (fp4_e2m1, blocks of 32, e8m0 scales) and NVFP4 (fp4_e2m1, "
                              f"blocks of 16, ue4m3 scales) weights; this layer's weight is {p.fmt.name} in blocks of "
                              f"{p.block_size} with {p.scale_format.name} scales, {ts} a tensor scale")
    if len(p.shape) != 2 or p.dim != 1 or p.shape[1] % row:
        raise CheckpointError(f"{where}: GGUF {kind} holds a 2-D weight [out, in] grouped along in, with in a multiple "
                              f"of {row}; got shape {tuple(p.shape)} grouped along dim {p.dim}")
    if bool((p.scale.view(torch.uint8) == p.scale_format.nan_code).any()):
        raise CheckpointError(f"{where}: the weight has NaN or Inf in a block; GGUF {kind} has no NaN scale")
    return kind


def _name(llama: Optional[LlamaGGUF], key: str) -> str:
    """The GGUF tensor name of state key ``key`` (llama.cpp's for a Llama model, else the key)."""
    name = (llama.tensor_name(key) if llama is not None else None) or key
    if len(name) > MAX_NAME:
        raise CheckpointError(f"{key}: GGUF tensor names have at most {MAX_NAME} characters; {name!r} has {len(name)}")
    return name


def _rows(t: torch.Tensor, heads: Optional[int]) -> torch.Tensor:
    """``t`` with its rows in llama.cpp's rotary order when ``heads`` is given."""
    return t if heads is None else t[row_permutation(t.shape[0], heads)]


def _copy_tokenizer(writer: Any, source: Path) -> None:
    """Every ``tokenizer.*`` key of GGUF file ``source`` onto ``writer`` (values and types as they are)."""
    gguf = _gguf()
    if not source.is_file():
        raise FileNotFoundError(f"groupquant.save: tokenizer_from={str(source)!r} is not a file")
    fields = [f for name, f in gguf.GGUFReader(str(source)).fields.items() if name.startswith("tokenizer.")]
    if not fields:
        raise CheckpointError(f"groupquant.save: tokenizer_from={str(source)!r} has no tokenizer.* keys")
    for f in fields:
        main = f.types[0]
        sub = f.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), main, sub)


def file_type(kinds: Dict[str, int], float16: bool) -> int:
    """llama.cpp's ``general.file_type`` (``gguf.LlamaFileType``) of a file whose packed weights hold
    ``kinds`` (``'MXFP4'`` / ``'NVFP4'`` -> element count): the kind with the most elements, else
    all-F32 (or mostly-F16 for a float16 model)."""
    gguf = _gguf()
    if not kinds:
        return int(gguf.LlamaFileType.MOSTLY_F16 if float16 else gguf.LlamaFileType.ALL_F32)
    kind = max(sorted(kinds), key=lambda k: kinds[k])
    return int(gguf.LlamaFileType.MOSTLY_MXFP4_MOE if kind == "MXFP4" else gguf.LlamaFileType.MOSTLY_NVFP4)


def _stored(t: torch.Tensor) -> np.ndarray:
    """A float or integer state tensor as the numpy array GGUF stores (module docstring)."""
    t = t.detach().contiguous().reshape(t.shape or (1,))  # a 0-d tensor as one element
    if t.dtype in _STORED_INT:
        return (t.to(torch.int8) if t.dtype == torch.bool else t.view(_STORED_INT[t.dtype])).numpy()
    if not t.is_floating_point():
        raise CheckpointError(f"GGUF holds float and integer tensors; this tensor is {t.dtype}")
    return (t.half() if t.dtype == torch.float16 else t.float()).numpy()


def _write_tensors(writer: Any, contents: CheckpointContents, llama: Optional[LlamaGGUF],
                   header: Dict[str, Any]) -> Dict[str, int]:
    """Every packed weight and state tensor on ``writer``, their names and dtypes in ``header``;
    returns the element count per packed GGUF type."""
    gguf = _gguf()
    state = contents.state
    kinds: Dict[str, int] = {}
    for key, p in packed_tensors(state).items():
        kind, name = check_gguf_weight(p, key), _name(llama, key)
        kinds[kind] = kinds.get(kind, 0) + int(p.shape[0]) * int(p.shape[1])
        q = p.unpack()
        heads = llama.heads_of(key) if llama is not None else None
        blocks = GGUFBlocks(_rows(q.codes, heads), _rows(q.scale_codes.squeeze(-1), heads))
        rows = mxfp4_rows(blocks) if kind == "MXFP4" else nvfp4_rows(blocks)
        writer.add_tensor(name, rows.numpy(), raw_dtype=getattr(gguf.GGMLQuantizationType, kind))
        if p.tensor_scale is not None:
            writer.add_tensor(f"{name.removesuffix('.weight')}.scale", p.tensor_scale.reshape(1).numpy())
        header["names"][name], header["dtypes"][key] = key, str(p.dtype)
        if heads is not None:
            header["permuted"][key] = heads
    skip = set(state["quantizer_keys"])
    for key, t in state["tensors"].items():
        if key in skip:
            continue
        name, heads = _name(llama, key), llama.heads_of(key) if llama is not None else None
        try:
            writer.add_tensor(name, _stored(_rows(t, heads)))
        except CheckpointError as e:
            raise CheckpointError(f"{key}: {e}") from None
        header["names"][name], header["dtypes"][key], header["shapes"][key] = key, str(t.dtype), list(t.shape)
        if heads is not None:
            header["permuted"][key] = heads
    for name, t in (llama.extra_tensors() if llama is not None else {}).items():
        writer.add_tensor(name, t.numpy())
        header["extra"].append(name)
    return kinds


def write_gguf(contents: CheckpointContents, path: Path) -> None:
    """Write ``contents`` to the GGUF file ``path`` (see the module docstring)."""
    from ... import __version__
    gguf = _gguf()
    refuse_online_rotations(contents.state, "GGUF", "llama.cpp and transformers' GGUF loader")
    state, llama = contents.state, llama_gguf(contents.config)
    header: Dict[str, Any] = {"format_version": 1, "groupquant_version": __version__, "names": {}, "dtypes": {},
                              "shapes": {}, "aliases": state["aliases"], "permuted": {}, "extra": [],
                              "config": contents.config}
    with written_beside(path) as tmp:
        writer = gguf.GGUFWriter(str(tmp), "llama" if llama is not None else "groupquant")
        try:
            if llama is not None:
                llama.write_keys(writer)
            if contents.tokenizer_from is not None:
                _copy_tokenizer(writer, contents.tokenizer_from)
            kinds = _write_tensors(writer, contents, llama, header)
            if llama is not None:  # the converter's size label (e.g. "135M"), from the tensors written
                writer.add_size_label(gguf.size_label(*writer.get_total_parameter_count()))
            float16 = any(t.dtype == torch.float16 for t in state["tensors"].values())
            writer.add_file_type(file_type(kinds, float16))
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
            writer.add_string(HEADER_KEY, json.dumps(header, default=str))
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()


def _header(reader: Any) -> Dict[str, Any]:
    """groupquant's JSON header of a GGUF file, or {} for a file without one."""
    field = reader.fields.get(HEADER_KEY)
    return json.loads(field.contents()) if field is not None else {}


def _unrows(t: torch.Tensor, heads: Optional[int]) -> torch.Tensor:
    """Inverse of :func:`_rows`."""
    return t if heads is None else t[torch.argsort(row_permutation(t.shape[0], heads))]


def _packed(kind: str, data: np.ndarray, scale: Optional[np.ndarray], heads: Optional[int],
            dtype: torch.dtype) -> PackedTensor:
    """The PackedTensor of one GGUF MXFP4 / NVFP4 tensor (rows of blocks, as the reader gives them)."""
    rows = torch.from_numpy(np.array(data, dtype=np.uint8))
    rows = rows.reshape(rows.shape[0], -1)
    b = codes_of_mxfp4_rows(rows) if kind == "MXFP4" else codes_of_nvfp4_rows(rows)
    codes, scales = _unrows(b.codes, heads), _unrows(b.scales, heads)
    block = codes.shape[-1]
    layout = GroupLayout.build(torch.Size((codes.shape[0], codes.shape[1] * block)), 1, block)
    sf = E8M0 if kind == "MXFP4" else get_scale_format("ue4m3")
    ts = None if scale is None else torch.from_numpy(np.array(scale, dtype=np.float32)).reshape(())
    return PackedTensor(pack_bits(codes, 4), scales.view(sf.storage_dtype), get_format("fp4_e2m1"), layout, dtype, sf,
                        ts)


def _plain(t: Any, key: str, header: Dict[str, Any], path: Path) -> torch.Tensor:
    """A float or integer GGUF tensor in the dtype and shape ``header`` records for ``key`` (float32,
    or its integer type, in the GGUF shape where the header has none)."""
    gguf = _gguf()
    kind = t.tensor_type
    ints = {gguf.GGMLQuantizationType.I8: torch.int8, gguf.GGMLQuantizationType.I16: torch.int16,
            gguf.GGMLQuantizationType.I32: torch.int32, gguf.GGMLQuantizationType.I64: torch.int64}
    if kind in ints:
        value = torch.from_numpy(np.array(t.data)).view(ints[kind])
    elif kind in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16):
        value = torch.from_numpy(np.array(gguf.quants.dequantize(t.data, kind)))
    else:
        raise CheckpointError(f"{path}: tensor {t.name!r} is GGUF {kind.name}; groupquant reads MXFP4, NVFP4, F32, "
                              "F16, BF16 and I8 / I16 / I32 / I64 tensors")
    shape = header.get("shapes", {}).get(key)
    value = value.reshape([int(d) for d in reversed(t.shape)] if shape is None else shape)
    value = _unrows(value, header.get("permuted", {}).get(key)) if value.dim() else value
    recorded = header.get("dtypes", {}).get(key)
    if recorded in _INT_DTYPES:
        want = _INT_DTYPES[recorded]
        return value.to(torch.bool) if want == torch.bool else value.view(want)
    return value.to(_DTYPES.get(recorded, torch.float32)) if value.is_floating_point() else value


def read_gguf(path: Path) -> CheckpointContents:
    """The contents of a GGUF file (MXFP4 / NVFP4 tensors packed, float and integer tensors as written)."""
    gguf = _gguf()
    reader = gguf.GGUFReader(str(path))
    header = _header(reader)
    names, dtypes, permuted = header.get("names", {}), header.get("dtypes", {}), header.get("permuted", {})
    by_name = {t.name: t for t in reader.tensors}
    fp4 = {gguf.GGMLQuantizationType.MXFP4: "MXFP4", gguf.GGMLQuantizationType.NVFP4: "NVFP4"}
    scale_of = {f"{n.removesuffix('.weight')}.scale": n for n, t in by_name.items()
                if fp4.get(t.tensor_type) == "NVFP4"}
    extra = set(header.get("extra", []))  # tensors llama.cpp needs that the model does not hold (rope_freqs)
    packed: Dict[str, Dict[str, Any]] = {}
    tensors: Dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        if t.name in scale_of or t.name in extra:
            continue
        key = names.get(t.name, t.name)
        if t.tensor_type in fp4:
            scale = by_name.get(f"{t.name.removesuffix('.weight')}.scale")
            packed[key] = _packed(fp4[t.tensor_type], t.data, None if scale is None else scale.data,
                                  permuted.get(key), _DTYPES.get(dtypes.get(key), torch.float32)).to_record()
        else:
            tensors[key] = _plain(t, key, header, path)
    state = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "packed": packed, "tensors": tensors,
             "aliases": header.get("aliases", {}), "quantizer_keys": []}
    return CheckpointContents(state, header.get("config"))
