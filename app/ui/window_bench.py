"""Window benchmark: 8 panes stream the headless bench's load; aggregate tokens/s and the longest Qt stall.

Same load as `python -m app bench --parallel 8 --max-tokens 128 --ignore-eos`: conversation i asks
the bench's question i, greedy, repeat penalty 1.0, exactly 128 tokens each, one warm-up request
first and an empty KV cache. With --compare the headless bench runs first in the same process, so
both figures come from one run; --repeats N alternates the two N times and reports medians, as the
machine's own speed drifts by tens of percent between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time

import qasync
from PySide6.QtCore import QElapsedTimer, QSettings, QTimer
from PySide6.QtWidgets import QApplication

from app.bench import QUESTIONS, BenchSettings, conversations_for, engine_config, run_bench, warm_up
from app.client import EngineClient
from app.default_model import default_model_path
from app.engine.events import FinishEvent
from app.engine.params import SamplingParams

from .chat_store import ChatStore
from .main_window import MainWindow
from .settings import AppSettings, PaneParams

PANES = 8
MAX_TOKENS = 128
STALL_TICK_MS = 10  # a stall reads as up to one tick shorter than it was: keep the tick fine


class StallMeter:
    """A timer that records how late it fires: the event loop's longest stall."""

    def __init__(self):
        self.worst_ms = 0.0
        self._clock = QElapsedTimer()
        self._timer = QTimer(interval=STALL_TICK_MS, timeout=self._tick)

    def start(self) -> None:
        self.worst_ms = 0.0
        self._clock.start()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        self.worst_ms = max(self.worst_ms, self._clock.restart() - STALL_TICK_MS)


async def measure_window(model_path: str, n_threads: int | None) -> dict:
    settings = bench_settings(model_path, n_threads)
    client = EngineClient(engine_config(settings, conversations_for(settings)))
    await client.start()
    await warm_up(client)
    home = tempfile.mkdtemp(prefix="window-bench-")
    app_settings = AppSettings(QSettings(f"{home}/settings.ini", QSettings.Format.IniFormat))
    window = MainWindow(client, ChatStore(home), app_settings, pane_count=PANES)
    window.resize(1600, 960)
    window.show()
    finals: list[FinishEvent] = []
    all_done = asyncio.Event()  # awaited, not polled: the harness should not add GUI work

    def finished(final: FinishEvent) -> None:
        finals.append(final)
        if len(finals) == PANES:
            all_done.set()

    for pane in window.panes:
        pane.sigReplyFinished.connect(finished)
    # the sliders cannot say ignore_eos: the panes get the bench's exact params instead
    params = SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=42, max_tokens=MAX_TOKENS, ignore_eos=True)
    for pane in window.panes:
        pane.params_editor.set_params(PaneParams(temperature=0.0, repeat_penalty=1.0, seed=42, max_tokens=MAX_TOKENS))
        pane.sampling_override = params
    await asyncio.sleep(0.3)  # let the window paint once before the clock starts
    meter = StallMeter()
    meter.start()
    t0, gui_cpu0 = time.perf_counter(), time.thread_time()
    for i, pane in enumerate(window.panes):
        pane.send(QUESTIONS[i % len(QUESTIONS)])
    await all_done.wait()
    wall = time.perf_counter() - t0
    gui_cpu = time.thread_time() - gui_cpu0  # this is the GUI thread: qasync runs asyncio on it
    meter.stop()
    closed = asyncio.Event()
    window.sigClosed.connect(closed.set)
    window.close()
    await closed.wait()
    tokens = sum(f.stats.gen_tokens for f in finals)
    return {"tok_s": tokens / wall, "tokens": tokens, "wall_s": wall, "stall_ms": meter.worst_ms, "gui_cpu": gui_cpu / wall}


def bench_settings(model_path: str, n_threads: int | None) -> BenchSettings:
    return BenchSettings(model_path=model_path, parallel=PANES, max_tokens=MAX_TOKENS, ignore_eos=True, n_threads=n_threads)


async def measure_headless(model_path: str, n_threads: int | None) -> dict:
    meter = StallMeter()  # the measuring costs CPU too: both sides pay it, so the cost is the window's
    meter.start()
    run = await run_bench(bench_settings(model_path, n_threads))
    meter.stop()
    return {"tok_s": run["agg_tok_s"], "wall_s": run["wall_s"]}


async def main_async(args) -> int:
    model = args.model or default_model_path()
    costs, stalls, rates = [], [], {"window": [], "headless": []}
    for _ in range(args.repeats):
        headless = await measure_headless(model, args.threads) if args.compare else None
        window = await measure_window(model, args.threads)
        stalls.append(window["stall_ms"])
        rates["window"].append(window["tok_s"])
        print(f"window:   {window['tok_s']:.1f} tok/s aggregate ({window['tokens']} tokens in {window['wall_s']:.2f} s), "
              f"longest event-loop stall {window['stall_ms']:.0f} ms, GUI thread busy {100 * window['gui_cpu']:.0f}% of a core")
        if headless:
            rates["headless"].append(headless["tok_s"])
            costs.append(100 * (1 - window["tok_s"] / headless["tok_s"]))
            print(f"headless: {headless['tok_s']:.1f} tok/s aggregate; the window costs {costs[-1]:.1f}%", flush=True)
    if args.repeats > 1:
        cost = ""
        if costs:
            of_medians = 100 * (1 - statistics.median(rates["window"]) / statistics.median(rates["headless"]))
            cost = (f"the window costs {statistics.median(costs):.1f}% (median of the pairs; "
                    f"{of_medians:.1f}% from the median tok/s of each side), ")
        print(f"over {args.repeats} runs: {cost}longest stall {max(stalls):.0f} ms")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.ui.window_bench", description=__doc__)
    parser.add_argument("--model")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--compare", action="store_true", help="run the headless bench first, in this process")
    parser.add_argument("--repeats", type=int, default=1, help="alternate the runs this many times; print medians")
    args = parser.parse_args(argv)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        return loop.run_until_complete(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
