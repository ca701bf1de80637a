"""The host side of plugins: hookspecs, the table of component kinds, the manager and its registries.

Also what ``tercet plugins`` lists and the skeletons ``tercet plugin new`` writes (skeleton_templates/).
May import: the foundation modules only. Plugins see tercet.plugin_api, never this folder."""
