"""SGLang's native API: ``POST /generate``, its body in and its answer out.

May import: http's top level and ``http.control`` (which adapter a request names), frontend and below.
"""
