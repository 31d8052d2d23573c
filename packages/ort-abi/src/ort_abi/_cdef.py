"""Turn the public header into cffi `cdef` text: the section between the CDEF markers, checked.

This module has no dependencies, so the cffi build script can load it by path at install time.
"""

from __future__ import annotations

import pathlib
import re

BEGIN_MARKER = "ORT_KERNEL_ABI_CDEF_BEGIN"
END_MARKER = "ORT_KERNEL_ABI_CDEF_END"
HEADER_NAME = "ort_kernel_abi.h"

_INT_DEFINE = re.compile(r"^#\s*define\s+[A-Za-z_]\w*\s+-?(0x[0-9A-Fa-f]+|\d+)[uUlL]*\s*$")


class CdefError(ValueError):
    """The header does not have one well-formed, cdef-clean section between the markers."""


def extract_cdef(header_text: str, *, source: str = HEADER_NAME) -> str:
    """The declarations between the markers, with every preprocessor line checked.

    Inside the section only `#define NAME <integer>` lines are allowed (cffi understands those);
    any other directive (#if, #include, function-like macros) is an error that names the line.
    Line count is preserved (rejected nothing, dropped nothing) so cffi errors point at header lines.
    """
    lines = header_text.splitlines()
    begins = [i for i, line in enumerate(lines) if BEGIN_MARKER in line]
    ends = [i for i, line in enumerate(lines) if END_MARKER in line]
    if len(begins) != 1 or len(ends) != 1:
        raise CdefError(
            f"{source}: expected exactly one {BEGIN_MARKER!r} and one {END_MARKER!r} marker, found "
            f"{len(begins)} and {len(ends)}; wrap the cdef-clean declarations in one marker pair"
        )
    start, stop = begins[0], ends[0]
    if stop <= start:
        raise CdefError(f"{source}: {END_MARKER!r} (line {stop + 1}) comes before {BEGIN_MARKER!r} "
                        f"(line {start + 1}); put the begin marker first")
    body = lines[start + 1:stop]
    for offset, line in enumerate(body):
        stripped = line.strip()
        if stripped.startswith("#") and not _INT_DEFINE.match(stripped):
            raise CdefError(
                f"{source}:{start + 2 + offset}: preprocessor line {stripped!r} inside the cdef section; "
                "only '#define NAME <integer>' is allowed there, move the rest outside the markers"
            )
    if not any(line.strip() for line in body):
        raise CdefError(f"{source}: the cdef section between the markers is empty")
    return "\n".join(body) + "\n"


def read_cdef(header_path: str | pathlib.Path) -> str:
    path = pathlib.Path(header_path)
    return extract_cdef(path.read_text(encoding="utf-8"), source=str(path))


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_FIELD_FN = re.compile(r"([A-Za-z_][\w\s\*]*?)\(\s*\*\s*(\w+)\s*\)\s*\(([^;]*)\)\s*;", re.S)


def api_functions(cdef_text: str, struct: str = "OrtKernelApi") -> list[tuple[str, str, str]]:
    """(name, return type, parameter list) of every function-pointer field of `struct <struct>`,
    in declaration order and spelled exactly as in the header (const kept)."""
    text = _COMMENT.sub(" ", cdef_text)
    m = re.search(r"struct\s+" + re.escape(struct) + r"\s*\{", text)
    if m is None:
        raise CdefError(f"no definition of struct {struct!r} in the cdef section")
    depth, end = 1, m.end()
    while depth and end < len(text):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        end += 1
    if depth:
        raise CdefError(f"struct {struct!r} is not closed in the cdef section")
    out = []
    for ret, name, params in _FIELD_FN.findall(text[m.end():end - 1]):
        out.append((name, " ".join(ret.split()), " ".join(params.split())))
    if not out:
        raise CdefError(f"struct {struct!r} has no function-pointer fields")
    return out
