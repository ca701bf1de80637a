"""``GET /openapi.json``: the document, and the path items and schemas of every API it is made of
(the route plugins name their path items here), built from the limits the parsers enforce.

May import: the protocols' folders (for their parsers' limits), ``http.server``'s plugin routes (the
document describes the routes served; the app serves the document), http's top level, frontend and below.
"""
