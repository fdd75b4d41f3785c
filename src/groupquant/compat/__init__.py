"""Entries for users migrating from other libraries; each maps their names onto groupquant's layers.

- :mod:`groupquant.compat.microxcaling`: microxcaling's ``mx`` package (``from mx import ...`` ->
  ``from groupquant.compat.microxcaling import ...``): ``MxSpecs`` / ``mx_specs`` and its layers.
"""
