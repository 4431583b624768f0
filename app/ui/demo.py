"""The scripted demo with extras for the README picture: several prompts in turn, a mid-reply screenshot.

python -m app.ui.demo --panes 4 --prompt "first" --prompt "second" --screenshot-after-tokens 40 \
    --screenshot out.png --exit-when-done
python -m app.ui.demo --panes 8 --docks all --prompt "hello" --geometry-json layout.json --exit-when-done
"""

from __future__ import annotations

import argparse
import sys

from .main import run_app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.ui.demo", description=__doc__)
    parser.add_argument("--model")
    parser.add_argument("--panes", type=int)
    parser.add_argument("--prompt", action="append", help="broadcast this; repeat for later turns")
    parser.add_argument("--screenshot", metavar="PNG")
    parser.add_argument(
        "--screenshot-after-tokens", type=int, metavar="N", help="take it once every pane has N tokens of its last reply"
    )
    parser.add_argument("--exit-when-done", action="store_true")
    parser.add_argument("--dark", action="store_true", help="a dark palette, as a dark desktop theme gives")
    parser.add_argument("--fan-out", metavar="SETTING=VALUES", help="fan the first prompt out, e.g. temperature=0..1.5 step 0.5")
    parser.add_argument("--probs", action="store_true", help="every pane shows its tokens' probabilities")
    parser.add_argument("--schema", metavar="JSON", help="every pane's replies follow this JSON schema file (greedy)")
    parser.add_argument(
        "--docks", action="append", metavar="NAME", help='open this dock (its title, e.g. "KV cells"), or "all"; repeat for more'
    )
    parser.add_argument(
        "--geometry-json", metavar="FILE", help="after the demo, write the visible docks, plots, transcripts, readouts and status"
    )
    parser.add_argument("--show-batching", action="store_true", help="run Show batching (with --prompt: on that prompt)")
    args = parser.parse_args(argv)
    if args.dark:
        from PySide6.QtWidgets import QApplication

        from .theme import dark_palette

        app = QApplication.instance() or QApplication(sys.argv[:1])
        app.setStyle("Fusion")  # the offscreen platform's default style draws with a fixed light look
        app.setPalette(dark_palette())
    return run_app(args)


if __name__ == "__main__":
    sys.exit(main())
