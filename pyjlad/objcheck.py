"""Structural checks of what pyjlad stores in and loads from its disk cache.

A cache entry whose checksum is right can still hold a bad payload: a
truncated ``opt`` output that ``opt`` reported as a success, machine code
written by a different build, a file restored from elsewhere. Handing such
bytes to LLVM's bitcode reader fails with an error; handing a damaged ELF
object to the JIT linker can crash the process. These checks run before
anything is stored and before anything is loaded, and raise
:class:`InvalidObject` with the reason.
"""

from __future__ import annotations

import platform
import struct
import sys

from .errors import InvalidObject

__all__ = ["InvalidObject", "check_elf", "check_llvm_module", "host_elf_machine"]


_ELF_MAGIC = b"\x7fELF"
_ELFCLASS32, _ELFCLASS64 = 1, 2
_ELFDATA2LSB, _ELFDATA2MSB = 1, 2
_ET_REL = 1
_SHT_NOBITS = 8

#: ``e_machine`` of the ELF objects LLVM writes on each ``platform.machine()``.
_MACHINES = {
    "x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21, "ppc64": 21,
    "s390x": 22, "riscv64": 243, "i386": 3, "i686": 3, "x86": 3, "armv7l": 40, "armv8l": 40,
}


def host_elf_machine() -> int | None:
    """The ``e_machine`` code of this machine's native objects (None where unknown)."""
    return _MACHINES.get(platform.machine().lower())


def check_elf(data: bytes, *, machine: int | None = None, object_type: int = _ET_REL) -> None:
    """Check that ``data`` is a well-formed ELF object for this machine.

    Checks the magic, the class (32/64-bit) and byte order of this Python, the
    object type (relocatable by default), the machine (``machine``, default
    this host's), and that the header, the section-header table and every
    section's contents lie inside ``data``.

    Raises
    ------
    InvalidObject
        Naming the first thing that is wrong.

    Examples
    --------
    >>> check_elf(b"not an object")
    Traceback (most recent call last):
    ...
    pyjlad.errors.InvalidObject: not an ELF object (13 bytes, no ELF magic)
    """
    if len(data) < 16 or data[:4] != _ELF_MAGIC:
        raise InvalidObject(f"not an ELF object ({len(data)} bytes, no ELF magic)")
    want_class = _ELFCLASS64 if sys.maxsize > 2**32 else _ELFCLASS32
    if data[4] != want_class:
        raise InvalidObject(f"ELF class {data[4]}, this process needs {want_class} ({struct.calcsize('P') * 8}-bit)")
    want_order = _ELFDATA2LSB if sys.byteorder == "little" else _ELFDATA2MSB
    if data[5] != want_order:
        raise InvalidObject(f"ELF byte order {data[5]} differs from this machine's ({sys.byteorder}-endian)")
    if data[6] != 1:
        raise InvalidObject(f"ELF version {data[6]}, expected 1")
    end = "<" if want_order == _ELFDATA2LSB else ">"
    wide = want_class == _ELFCLASS64
    header = struct.Struct(end + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"))
    if len(data) < 16 + header.size:
        raise InvalidObject(f"ELF header truncated ({len(data)} bytes)")
    (e_type, e_machine, e_version, _entry, _phoff, e_shoff, _flags, e_ehsize, _phentsize, _phnum,
     e_shentsize, e_shnum, e_shstrndx) = header.unpack_from(data, 16)
    if e_type != object_type:
        raise InvalidObject(f"ELF type {e_type}, expected {object_type} (a relocatable object)")
    want_machine = host_elf_machine() if machine is None else machine
    if want_machine is not None and e_machine != want_machine:
        raise InvalidObject(f"ELF machine {e_machine}, this machine's is {want_machine}")
    if e_version != 1:
        raise InvalidObject(f"ELF version {e_version}, expected 1")
    if e_ehsize != 16 + header.size:
        raise InvalidObject(f"ELF header size {e_ehsize}, expected {16 + header.size}")
    section = struct.Struct(end + ("IIQQQQIIQQ" if wide else "IIIIIIIIII"))
    if e_shoff == 0:
        raise InvalidObject("ELF object without a section-header table")
    if e_shentsize != section.size:
        raise InvalidObject(f"ELF section-header size {e_shentsize}, expected {section.size}")
    if e_shoff + section.size > len(data):
        raise InvalidObject(f"ELF section-header table at {e_shoff} lies beyond the {len(data)} bytes")
    first = section.unpack_from(data, e_shoff)
    count = e_shnum or first[5]  # more than 0xff00 sections: the count is in section 0's sh_size
    if count == 0 or e_shoff + count * section.size > len(data):
        raise InvalidObject(f"ELF section-header table ({count} entries at {e_shoff}) exceeds the {len(data)} bytes")
    strtab_index = first[6] if e_shstrndx == 0xFFFF else e_shstrndx
    if strtab_index >= count:
        raise InvalidObject(f"ELF section-name table index {strtab_index} out of range ({count} sections)")
    for index in range(1, count):
        _name, sh_type, _flags, _addr, sh_offset, sh_size, *_ = section.unpack_from(data, e_shoff + index * section.size)
        if sh_type != _SHT_NOBITS and sh_offset + sh_size > len(data):
            raise InvalidObject(
                f"ELF section {index} ({sh_size} bytes at {sh_offset}) lies beyond the {len(data)} bytes"
            )


_BITCODE_MAGIC = b"BC\xc0\xde"
_WRAPPER_MAGIC = b"\xde\xc0\x17\x0b"


def check_llvm_module(data: bytes) -> None:
    """Check that ``data`` is an LLVM module: bitcode, or IR text, that LLVM parses.

    Bitcode must start with its magic and be a whole number of 32-bit words;
    either form is then parsed by llvmlite in a context of its own (so the
    check needs no lock shared with Numba's compiler).

    Raises
    ------
    InvalidObject
        With LLVM's parse error, or the structural reason.

    Examples
    --------
    >>> check_llvm_module(b"define i32 @one() {\\n  ret i32 1\\n}\\n")
    >>> check_llvm_module(b"BC\\xc0\\xde\\x35\\x14")
    Traceback (most recent call last):
    ...
    pyjlad.errors.InvalidObject: LLVM bitcode of 6 bytes is not a whole number of 32-bit words (truncated)
    """
    import llvmlite.binding as llvm

    context = llvm.create_context()
    if data[:4] in (_BITCODE_MAGIC, _WRAPPER_MAGIC):
        if len(data) % 4:
            raise InvalidObject(f"LLVM bitcode of {len(data)} bytes is not a whole number of 32-bit words (truncated)")
        try:
            module = llvm.parse_bitcode(data, context=context)
        except RuntimeError as exc:
            raise InvalidObject(f"LLVM cannot read the bitcode: {exc}") from None
    else:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise InvalidObject(f"neither LLVM bitcode nor IR text ({len(data)} bytes)") from None
        if not text.strip():
            raise InvalidObject("an empty module")
        try:
            module = llvm.parse_assembly(text, context=context)
        except RuntimeError as exc:
            raise InvalidObject(f"LLVM cannot parse the IR: {exc}") from None
    try:
        module.verify()
    except RuntimeError as exc:
        raise InvalidObject(f"the module does not verify: {exc}") from None
