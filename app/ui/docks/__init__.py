"""The window's docks: plots, step timeline, KV cells, benchmark, chats, engine, model library,
compare and batching views, and how the docks are grouped into tabs."""
