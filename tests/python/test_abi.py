"""Pins the ctypes declarations (kvtier/_lib.py) to kvtier.h, so that a header change fails
here rather than corrupting memory in an engine:

  - struct sizes and field offsets as the C compiler lays them out (kvtier_abi_dump, a C program
    built against the header by CMake) against ctypes.sizeof / field offsets;
  - the struct field names and order, parsed from the header text, against ctypes' _fields_;
  - every KVT_API prototype, parsed from the header text (return and parameter types mapped to
    ctypes by the table below), against the restype/argtypes the binding declares, and the set
    of functions both ways (a function added to the header and not bound fails).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p

import pytest

from conftest import SOURCE
from kvtier import _lib

HEADER = os.path.join(SOURCE, "client", "kvtier.h")
DUMP = os.environ.get("KVTIER_ABI_DUMP") or os.path.join(SOURCE, "build", "tests", "kvtier_abi_dump")


def header_text() -> str:
    with open(HEADER) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def test_struct_layout_matches_the_compiler():
    if not os.path.exists(DUMP):
        pytest.fail(f"{DUMP} is not built (ctest builds it: target kvtier_abi_dump)")
    c = json.loads(subprocess.run([DUMP], check=True, capture_output=True, text=True).stdout)
    assert set(c) == set(_lib.STRUCTS), "abi_dump.c and _lib.STRUCTS name different structs"
    for name, cls in _lib.STRUCTS.items():
        assert ctypes.sizeof(cls) == c[name]["size"], f"sizeof({name})"
        offsets = {f: getattr(cls, f).offset for f, _t in cls._fields_}
        assert offsets == c[name]["fields"], f"offsets of {name}"


def header_structs(text: str) -> dict[str, list[str]]:
    out = {}
    for m in re.finditer(r"typedef\s+struct\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        body, name = m.group(1), m.group(2)
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            ident = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", decl)
            fields.append(ident.group(1))
        out[name] = fields
    return out


def struct_mismatches(text: str) -> list[str]:
    structs = header_structs(text)
    bad = sorted(set(structs) ^ set(_lib.STRUCTS))
    for name, fields in structs.items():
        if name in _lib.STRUCTS and [f for f, _t in _lib.STRUCTS[name]._fields_] != fields:
            bad.append(name)
    return bad


def test_struct_fields_match_the_header():
    assert struct_mismatches(header_text()) == []


_STRUCT_PTR = {name: POINTER(cls) for name, cls in _lib.STRUCTS.items()}
_SCALARS = {
    "int": c_int,
    "size_t": c_size_t,
    "uint32_t": c_uint32,
    "uint64_t": c_uint64,
    "char*": c_char_p,
    "void*": c_void_p,
    "void**": POINTER(c_void_p),
    "size_t*": POINTER(c_size_t),
    "uint8_t*": POINTER(c_uint8),
    "uint32_t*": POINTER(c_uint32),
    "kvt_client_t*": c_void_p,
    "kvt_client_t**": POINTER(c_void_p),
    "kvt_handle_t*": POINTER(c_uint64),
    "kvt_completion_t**": POINTER(POINTER(_lib.KvtCompletion)),
}


def ctype_of(decl: str):
    """The ctypes type of a C type (const dropped: it does not change the ABI)."""
    t = re.sub(r"\bconst\b", " ", decl)
    t = re.sub(r"\s+", "", t)
    if t == "void":
        return None
    if t in _SCALARS:
        return _SCALARS[t]
    if t.endswith("*") and t[:-1] in _STRUCT_PTR:
        return _STRUCT_PTR[t[:-1]]
    raise AssertionError(f"kvtier.h uses a C type the ABI test does not map: {decl!r}")


def param_type(param: str) -> str:
    param = param.strip()
    arr = re.match(r"(.*?)(\w+)\s*\[[^\]]*\]$", param)
    if arr:  # char buf[33]: a pointer
        return arr.group(1) + "*"
    m = re.match(r"(.*?[\s*])(\w+)$", param)
    assert m, f"cannot parse parameter {param!r}"
    return m.group(1)


def header_prototypes(text: str) -> dict:
    out = {}
    for m in re.finditer(r"KVT_API\s+([^;(]*?)\b(kvt_\w+)\s*\(([^)]*)\)\s*;", text, re.S):
        ret, name, params = m.group(1), m.group(2), m.group(3).strip()
        args = [] if params in ("", "void") else [ctype_of(param_type(p)) for p in params.split(",")]
        out[name] = (ctype_of(ret), args)
    return out


def prototype_mismatches(text: str) -> list[str]:
    protos = header_prototypes(text)
    bad = sorted(set(protos) ^ set(_lib.PROTOTYPES))
    for name, (ret, args) in protos.items():
        if name in _lib.PROTOTYPES and _lib.PROTOTYPES[name] != (ret, args):
            bad.append(name)
    return bad


def test_prototypes_match_the_header():
    assert len(header_prototypes(header_text())) > 30
    assert prototype_mismatches(header_text()) == []
    for name, (ret, args) in _lib.PROTOTYPES.items():
        fn = getattr(_lib.lib, name)
        assert fn.argtypes == args and fn.restype == ret, name


def test_a_header_change_fails():
    """The checks above can fail: a header with a field added to a struct, a parameter of
    another type, or one more function does not match the binding."""
    text = header_text()
    grown = text.replace("uint32_t arena_gen;", "uint32_t arena_gen;\n    uint32_t extra;", 1)
    assert struct_mismatches(grown) == ["kvt_server_info_t"]
    retyped = re.sub(r"kvt_poll\(kvt_client_t \*c, int timeout_ms\)", "kvt_poll(kvt_client_t *c, size_t t)", text)
    assert retyped != text and prototype_mismatches(retyped) == ["kvt_poll"]
    added = text + "\nKVT_API int kvt_new_call(kvt_client_t *c);\n"
    assert prototype_mismatches(added) == ["kvt_new_call"]
    with pytest.raises(AssertionError):
        ctype_of("const kvt_new_thing_t *")
