"""Built-in plugins, registered through the ``tercet`` entry-point group like any third party's."""
