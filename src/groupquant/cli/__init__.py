"""The command line, ``python -m groupquant COMMAND``.

Commands (``build_parser`` holds their help, which ``--help`` prints once):
    demo      the main job: train on scikit-learn's digits, quantize to every MX format, QAT (default);
              with --recipe, train with an MX training recipe and compare with float
    formats   the element format table (bits, bias, emax, max normal, min normal/subnormal, specials),
              the scale format table and the block schemes (MX formats, NVFP4) with bits per element
    describe  the settings of a format or a quantizer, by name
    llm       quantize a causal language model, evaluate, generate from packed weights, save
              (:mod:`groupquant.cli.llm_command`; the llm extra)

Every command-line entry lives in this package: ``entry.py`` (the parser and :func:`main`, which
``python -m groupquant`` runs through ``groupquant/__main__.py``), ``arguments.py`` (argument types),
``tables.py`` (formats, describe), ``demo_command.py`` and ``llm_command.py``.
"""
from .entry import build_parser, main
from .tables import format_aliases, format_table, scale_format_table, scheme_table

__all__ = ["main", "build_parser", "format_table", "format_aliases", "scale_format_table", "scheme_table"]
