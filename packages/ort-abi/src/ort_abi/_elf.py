"""A structural check of an ELF shared object before dlopen.

Kernel libraries are trusted code, loaded because the user named them; but a truncated or corrupt
file (an interrupted copy, a partial download, a text file named `.so`) must not take the process
down: the dynamic loader maps PT_LOAD segments straight from the file, and touching a page past the
end of the file raises SIGBUS inside dlopen. So before loading we read only the headers, with
`struct`, and check that the file is a regular file, an ELF shared object of this process's class,
byte order and machine, and that the program header table, the section header table and every
PT_LOAD / PT_DYNAMIC segment's file range lie inside the file.

This is not a validator of untrusted code (a well-formed library can still do anything); it turns
"killed by SIGBUS" into a KernelLibraryError naming the path and the problem.
"""

from __future__ import annotations

import os
import stat
import struct
import sys

_MAGIC = b"\x7fELF"
_ELFCLASS = {1: 32, 2: 64}
_ELFDATA = {1: "little", 2: "big"}
_ET_DYN = 3
_PT_LOAD, _PT_DYNAMIC = 1, 2
_PT_NAMES = {_PT_LOAD: "PT_LOAD", _PT_DYNAMIC: "PT_DYNAMIC"}
# e_type, e_machine, e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize, e_phentsize, e_phnum,
# e_shentsize, e_shnum, e_shstrndx — after the 16-byte e_ident
_EHDR = {32: "HHIIIIIHHHHHH", 64: "HHIQQQIHHHHHH"}
_PHDR = {32: "IIIIIIII", 64: "IIQQQQQQ"}  # 32: type offset vaddr paddr filesz memsz flags align
_PHDR_SIZE = {32: 32, 64: 56}
_SHDR_SIZE = {32: 40, 64: 64}


class ElfProblem(Exception):
    """What is wrong with the file, in words (the caller wraps it in KernelLibraryError)."""


def applies() -> bool:
    """Whether shared libraries are ELF here. macOS (Mach-O) and Windows (PE) are not checked:
    their loaders report a corrupt file as an error, and this module reads only ELF."""
    return sys.platform.startswith(("linux", "freebsd", "netbsd", "openbsd", "sunos"))


def _host_machine(endian: str) -> int | None:
    """e_machine of the running interpreter's own ELF image (None if it cannot be read)."""
    try:
        with open(sys.executable, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != _MAGIC:
        return None
    return struct.unpack_from("<H" if endian == "little" else ">H", head, 18)[0]


def check_shared_object(path: str | os.PathLike[str]) -> None:
    """Raise ElfProblem if `path` is not a complete ELF shared object this process could load."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ElfProblem(f"cannot stat the file ({e.strerror})") from e
    if not stat.S_ISREG(st.st_mode):
        raise ElfProblem("it is not a regular file")
    size = st.st_size
    try:
        with open(path, "rb") as f:
            _check(f, size)
    except OSError as e:
        raise ElfProblem(f"cannot read the file ({e.strerror})") from e


def _read(f, offset: int, count: int) -> bytes:
    f.seek(offset)
    return f.read(count)


def _check(f, size: int) -> None:
    ident = _read(f, 0, 16)
    if ident[:4] == _MAGIC and len(ident) < 16:
        raise ElfProblem(f"it is truncated inside the ELF header ({size} bytes)")
    if ident[:4] != _MAGIC:
        raise ElfProblem(f"it is not an ELF file (first bytes {ident[:4]!r}, expected {_MAGIC!r}); "
                         f"the file has {size} bytes")
    bits, endian = _ELFCLASS.get(ident[4]), _ELFDATA.get(ident[5])
    host_bits = struct.calcsize("P") * 8
    if bits != host_bits:
        raise ElfProblem(f"it is a {bits or 'unknown'}-bit ELF file (EI_CLASS={ident[4]}), this process is "
                         f"{host_bits}-bit")
    if endian != sys.byteorder:
        raise ElfProblem(f"its byte order is {endian or 'unknown'} (EI_DATA={ident[5]}), this process is "
                         f"{sys.byteorder}-endian")
    prefix = "<" if endian == "little" else ">"
    ehdr_fmt = prefix + _EHDR[bits]
    body = _read(f, 16, struct.calcsize(ehdr_fmt))
    if len(body) < struct.calcsize(ehdr_fmt):
        raise ElfProblem(f"it is truncated inside the ELF header ({size} bytes)")
    (e_type, e_machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, shnum,
     _shstrndx) = struct.unpack(ehdr_fmt, body)
    if e_type != _ET_DYN:
        raise ElfProblem(f"it is not a shared object (ELF e_type={e_type}, expected {_ET_DYN} ET_DYN); "
                         "link it with -shared")
    host = _host_machine(endian)
    if host is not None and e_machine != host:
        raise ElfProblem(f"it is built for another processor (ELF e_machine={e_machine}, this process has {host})")
    if phnum == 0:
        raise ElfProblem("it has no program headers, nothing to load")
    if phentsize != _PHDR_SIZE[bits]:
        raise ElfProblem(f"its program header entries are {phentsize} bytes, expected {_PHDR_SIZE[bits]}")
    if phoff + phnum * phentsize > size:
        raise ElfProblem(f"its program header table ({phnum} x {phentsize} bytes at offset {phoff}) ends past the "
                         f"end of the file ({size} bytes): the file is truncated")
    table = _read(f, phoff, phnum * phentsize)
    phdr_fmt = prefix + _PHDR[bits]
    for i in range(phnum):
        fields = struct.unpack_from(phdr_fmt, table, i * phentsize)
        if bits == 64:
            p_type, _pflags, p_offset, _vaddr, _paddr, p_filesz, _memsz, _align = fields
        else:
            p_type, p_offset, _vaddr, _paddr, p_filesz, _memsz, _pflags, _align = fields
        if p_type in _PT_NAMES and p_offset + p_filesz > size:
            raise ElfProblem(f"its {_PT_NAMES[p_type]} segment {i} ({p_filesz} bytes at offset {p_offset}) ends "
                             f"past the end of the file ({size} bytes): the file is truncated")
    if shoff:
        if shentsize != _SHDR_SIZE[bits]:
            raise ElfProblem(f"its section header entries are {shentsize} bytes, expected {_SHDR_SIZE[bits]}")
        count = max(shnum, 1)  # 0 with a table present: the real count is in section 0 (still one entry)
        if shoff + count * shentsize > size:
            raise ElfProblem(f"its section header table ({count} x {shentsize} bytes at offset {shoff}) ends past "
                             f"the end of the file ({size} bytes): the file is truncated")
