"""The tool-call syntaxes beyond one JSON object a call: each kind of wrapper's reader (a reply's
calls as far as they are written) and grammar (what holds a reply to it), in a file each; the JSON
reading they share. tool_syntax.py names the families that write them."""
