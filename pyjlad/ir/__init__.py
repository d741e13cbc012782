"""Structured LLVM IR for pyjlad: one tokenizer (:mod:`.lexer`), symbol names (:mod:`.names`), a parsed
module that renders back byte for byte (:mod:`.module`: its items in :mod:`.items`, read by
:mod:`.item_parser`, the instructions of a body in :mod:`.instructions`) and the analyses the passes share
(:mod:`.analysis`). See docs/ir-layer.md."""

from .lexer import Token, decode_name, symbol_for, tokenize
from .module import (
    AttributeGroup,
    Call,
    Function,
    GlobalVariable,
    Instruction,
    IRParseError,
    Line,
    Metadata,
    Module,
    Parameter,
    TypeDefinition,
    parse,
)

__all__ = [
    "Token", "tokenize", "decode_name", "symbol_for", "AttributeGroup", "Call", "Function", "GlobalVariable",
    "Instruction", "IRParseError", "Line", "Metadata", "Module", "Parameter", "TypeDefinition", "parse",
]
