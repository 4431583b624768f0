"""The window's cost: 8 panes stream the headless bench's load; aggregate tokens/s and the longest Qt stall.

Same load as `python -m app bench --parallel 8 --max-tokens 128 --ignore-eos`: conversation i asks
the bench's question i, greedy, repeat penalty 1.0, exactly 128 tokens each, one warm-up request
first and an empty KV cache. With --compare the headless bench runs first in the same process, so
both figures come from one run; --repeats N alternates the two N times and reports medians, as the
machine's own speed drifts by tens of percent between runs.

That drift is as large as the cost being measured, so --interleave measures the cost a second way:
one long stream (256 tokens a pane), the window shown and minimized in turns of 1.5 s, each
shown phase against the minimized ones beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time

import qasync
from PySide6.QtCore import QElapsedTimer, QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication

from app.bench import QUESTIONS, BenchSettings, conversations_for, engine_config, run_bench, warm_up
from app.client import EngineClient
from app.default_model import default_model_path
from app.engine.events import FinishEvent
from app.engine.params import SamplingParams
from app.workspace.chat_store import ChatStore
from app.workspace.pane_params import PaneParams

from .main import freeze_startup_objects
from .main_window import MainWindow
from .settings import AppSettings

PANES = 8
MAX_TOKENS = 128
STALL_TICK_MS = 10  # a stall reads as up to one tick shorter than it was: keep the tick fine
SETTLE_S = 0.3  # an interleaved phase's first moments are left out: restoring the window repaints it whole


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


class BenchWindow:
    """The real window with 8 panes set to the bench's exact load; `send()` starts every pane at once."""

    def __init__(self, client: EngineClient, max_tokens: int, second: str | None = None):
        self.client = client
        home = tempfile.mkdtemp(prefix="window-bench-")
        app_settings = AppSettings(QSettings(f"{home}/settings.ini", QSettings.Format.IniFormat))
        self.window = MainWindow(client, ChatStore(home), app_settings, pane_count=PANES)
        self.window.resize(1600, 960)
        self.finals: list[FinishEvent] = []
        self.all_done = asyncio.Event()  # awaited, not polled: the harness should not add GUI work
        # the sliders cannot say ignore_eos: the panes get the bench's exact params instead
        params = SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=42, max_tokens=max_tokens, ignore_eos=True)
        for pane in self.window.panes:
            pane.sigReplyFinished.connect(self._finished)
            pane.params_editor.set_params(PaneParams(temperature=0.0, repeat_penalty=1.0, seed=42, max_tokens=max_tokens))
            pane.sampling_override = params
        if second is not None:  # half the panes on the second model
            self.window._show_models()
            for pane in self.window.panes[PANES // 2 :]:
                pane.params_editor.set_params(pane.params.with_(model=second))

    @classmethod
    async def open(
        cls, model_path: str, n_threads: int | None, max_tokens: int = MAX_TOKENS, second: str | None = None
    ) -> BenchWindow:
        settings = bench_settings(model_path, n_threads, max_tokens)
        client = EngineClient(engine_config(settings, conversations_for(settings)))
        await client.start()
        await warm_up(client)
        name = await client.load_model(client.config.with_(model_path=second)) if second else None
        bench = cls(client, max_tokens, name)
        bench.window.show()
        freeze_startup_objects()  # as the app does once its window is up
        await asyncio.sleep(0.3)  # let the window paint once before the clock starts
        return bench

    def _finished(self, final: FinishEvent) -> None:
        self.finals.append(final)
        if len(self.finals) == PANES:
            self.all_done.set()

    def send(self) -> None:
        for i, pane in enumerate(self.window.panes):
            pane.send(QUESTIONS[i % len(QUESTIONS)])

    @property
    def tokens(self) -> int:
        return sum(f.stats.gen_tokens for f in self.finals)

    async def close(self) -> None:
        closed = asyncio.Event()
        self.window.sigClosed.connect(closed.set)
        self.window.close()
        await closed.wait()


async def measure_window(model_path: str, n_threads: int | None) -> dict:
    bench = await BenchWindow.open(model_path, n_threads)
    meter = StallMeter()
    meter.start()
    t0, gui_cpu0 = time.perf_counter(), time.thread_time()
    bench.send()
    await bench.all_done.wait()
    wall = time.perf_counter() - t0
    gui_cpu = time.thread_time() - gui_cpu0  # this is the GUI thread: qasync runs asyncio on it
    meter.stop()
    await bench.close()
    return {
        "tok_s": bench.tokens / wall,
        "tokens": bench.tokens,
        "wall_s": wall,
        "stall_ms": meter.worst_ms,
        "gui_cpu": gui_cpu / wall,
    }


async def measure_interleaved(
    model_path: str, n_threads: int | None, max_tokens: int, phase_s: float, second: str | None = None
) -> dict:
    """One long stream, the window shown and minimized in turns of `phase_s`: minimized, the window
    draws nothing, which leaves the GUI thread what the headless bench also does (take the events).
    Each shown phase is compared with the minimized phases on either side of it, so the machine's
    drift and the slower steps of a growing context cancel out."""
    bench = await BenchWindow.open(model_path, n_threads, max_tokens, second)
    window = bench.window
    meter = StallMeter()
    meter.start()
    bench.send()
    phases = []  # (shown, start, end, GUI CPU s)
    shown = False
    while not bench.all_done.is_set():
        window.setWindowState(Qt.WindowState.WindowNoState if shown else Qt.WindowState.WindowMinimized)
        start, cpu = time.monotonic(), time.thread_time()
        try:
            await asyncio.wait_for(bench.all_done.wait(), phase_s)
        except TimeoutError:
            phases.append((shown, start, time.monotonic(), time.thread_time() - cpu))
        shown = not shown
    meter.stop()
    steps = [step for name in bench.client.models for step in bench.client.recent_steps(model=name)]
    await bench.close()
    phases = phases[1:]  # the first holds the prompts' prefill, which generates nothing
    rates = [_rate(steps, start + SETTLE_S, end) for _, start, end, _ in phases]
    costs = [100 * (1 - rates[i] / ((rates[i - 1] + rates[i + 1]) / 2)) for i in range(1, len(phases) - 1) if phases[i][0]]
    if not costs:
        raise ValueError(
            f"the stream ended before a shown phase had minimized ones on both sides: "
            f"give it more tokens than {max_tokens} a pane, or shorter phases than {phase_s} s"
        )
    gui = {flag: [p[3] / (p[2] - p[1]) for p in phases if p[0] == flag] for flag in (True, False)}
    return {
        "costs": costs,
        "shown_tok_s": statistics.median(r for r, p in zip(rates, phases) if p[0]),
        "minimized_tok_s": statistics.median(r for r, p in zip(rates, phases) if not p[0]),
        "gui_shown": statistics.median(gui[True]),
        "gui_minimized": statistics.median(gui[False]),
        "stall_ms": meter.worst_ms,
    }


def _rate(steps, start: float, end: float) -> float:
    """Tokens generated per second by the steps that ended between start and end."""
    return sum(s.n_decode for s in steps if start <= s.t_end < end) / (end - start)


def bench_settings(model_path: str, n_threads: int | None, max_tokens: int = MAX_TOKENS) -> BenchSettings:
    return BenchSettings(model_path=model_path, parallel=PANES, max_tokens=max_tokens, ignore_eos=True, n_threads=n_threads)


async def measure_headless(model_path: str, n_threads: int | None) -> dict:
    meter = StallMeter()  # the measuring costs CPU too: both sides pay it, so the cost is the window's
    meter.start()
    run = await run_bench(bench_settings(model_path, n_threads))
    meter.stop()
    return {"tok_s": run["agg_tok_s"], "wall_s": run["wall_s"]}


async def main_async(args) -> int:
    model = args.model or default_model_path()
    if args.interleave:
        return await interleaved(model, args)
    costs, stalls, rates = [], [], {"window": [], "headless": []}
    for _ in range(args.repeats):
        headless = await measure_headless(model, args.threads) if args.compare else None
        window = await measure_window(model, args.threads)
        stalls.append(window["stall_ms"])
        rates["window"].append(window["tok_s"])
        print(
            f"window:   {window['tok_s']:.1f} tok/s aggregate ({window['tokens']} tokens in {window['wall_s']:.2f} s), "
            f"longest event-loop stall {window['stall_ms']:.0f} ms, GUI thread busy {100 * window['gui_cpu']:.0f}% of a core"
        )
        if headless:
            rates["headless"].append(headless["tok_s"])
            costs.append(100 * (1 - window["tok_s"] / headless["tok_s"]))
            print(f"headless: {headless['tok_s']:.1f} tok/s aggregate; the window costs {costs[-1]:.1f}%", flush=True)
    if args.repeats > 1:
        cost = ""
        if costs:
            of_medians = 100 * (1 - statistics.median(rates["window"]) / statistics.median(rates["headless"]))
            cost = (
                f"the window costs {statistics.median(costs):.1f}% (median of the pairs; "
                f"{of_medians:.1f}% from the median tok/s of each side), "
            )
        print(f"over {args.repeats} runs: {cost}longest stall {max(stalls):.0f} ms")
    return 0


async def interleaved(model: str, args) -> int:
    costs, stalls = [], []
    for _ in range(args.repeats):
        try:
            run = await measure_interleaved(model, args.threads, args.interleave_tokens, args.phase, args.second)
        except ValueError as e:
            print(f"window-bench: {e}", file=sys.stderr)
            return 2
        costs += run["costs"]
        stalls.append(run["stall_ms"])
        print(
            f"shown {run['shown_tok_s']:.1f} tok/s, minimized {run['minimized_tok_s']:.1f} tok/s (medians of the phases); "
            f"the window costs {statistics.median(run['costs']):.1f}% (median of {len(run['costs'])} shown phases against "
            f"their neighbours); GUI thread busy {100 * run['gui_shown']:.0f}% of a core shown, "
            f"{100 * run['gui_minimized']:.0f}% minimized; longest stall {run['stall_ms']:.0f} ms (restoring the window "
            "included)",
            flush=True,
        )
    if args.repeats > 1:
        print(
            f"over {args.repeats} runs: the window costs {statistics.median(costs):.1f}% (median of {len(costs)} shown phases), "
            f"longest stall {max(stalls):.0f} ms"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.ui.window_cost", description=__doc__)
    parser.add_argument("--model")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--compare", action="store_true", help="run the headless bench first, in this process")
    parser.add_argument("--repeats", type=int, default=1, help="alternate the runs this many times; print medians")
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="one long stream per run, the window shown and minimized in turns; compare the phases",
    )
    parser.add_argument("--interleave-tokens", type=int, default=256, help="tokens per pane in an interleaved run")
    parser.add_argument("--phase", type=float, default=1.5, help="seconds per interleaved phase")
    parser.add_argument("--second", metavar="PATH", help="with --interleave: a second model, for half the panes")
    args = parser.parse_args(argv)
    if args.second and not args.interleave:
        parser.error("--second goes with --interleave")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        return loop.run_until_complete(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
