"""The server: the starlette app (API key, browser guard, errors, plugin routes bound to it) and its
own routes (health, metrics, the chat page at ``GET /``), hypercorn listening, the API process and
the API worker processes.

May import: every folder of http (the app serves them all), frontend and everything below it.
"""
