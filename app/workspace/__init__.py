"""The workspace: the panes, their chats and replies, and the rules between them, without Qt.

The window draws it and forwards clicks to it; tests drive it headless against a scripted reply source.
"""
