"""The main window and its parts: the actions of its menus and toolbar, the pane grid, the status
line, the engine's banner and recovery, loading models, serving, placing, closing."""
