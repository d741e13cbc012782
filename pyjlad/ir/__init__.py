"""Structured LLVM IR for pyjlad: one tokenizer (:mod:`.lexer`), a parsed module that renders back byte for
byte (:mod:`.module`) and the analyses the passes share (:mod:`.analysis`). See docs/ir-layer.md."""

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
