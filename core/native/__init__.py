"""Native code: what this CPU can run, and C kernels built per instruction-set level.

- :mod:`.levels`: the levels (portable; x86's avx2, avxvnni, avx512vnni, avx512, amx; aarch64's
  neon, dotprod, i8mm) and the compiler flags of each;
- :mod:`.cpu`: this CPU's features, read once, the level in use and ``model.cpu_isa``'s forcing;
- :mod:`.build`: a C source compiled at a level, cached, and loaded with ctypes;
- :mod:`.prebuild`: the install step that compiles the built-in kernels at every level;
- ``include/``: tercet's C headers, on every build's include path.

It imports only :mod:`tercet.formats` (the cache folder) and nothing at the top of
``build.py``, ``levels.py`` and ``prebuild.py``, which the install step loads by their
paths. Plugins reach it through :mod:`tercet.plugin_api`.
"""
