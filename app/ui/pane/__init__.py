"""A chat pane: its header, transcript (Markdown, tokens), input, readout and settings editor."""
